"""``nki.kernels``: a library of NKI kernels written in the current API, each with a torch or
numpy reference beside it.

======================  =====================================================================
module                  kernels
======================  =====================================================================
``matmul``              ``matmul(a, b)``, ``matmul_lhsT(lhsT, rhs)``, ``batched_matmul(a, b)``
``linear``              ``linear(x, weight, bias=None, activation=None)`` (nn.Linear layout)
``softmax``             ``softmax_rows(x)``, ``log_softmax(x)``
``norms``               ``layernorm``, ``rmsnorm``, ``rmsnorm_residual``, ``layernorm_bwd``,
                        ``rmsnorm_bwd``
``mlp``                 ``gelu(x)``, ``silu(x)``, ``silu_mul(gate, up)``,
                        ``swiglu_mlp(x, w_gate, w_up, w_down,
                        out_dtype=None)`` (fp8 weights and activations too)
``rope``                ``rope(x, cos, sin, offset=0)`` (offset: int or int32 tensor)
``losses``              ``cross_entropy(logits, targets, ignore_index=-100)``,
                        ``cross_entropy_bwd(..., ignore_index=-100, reduction="mean")``
``transpose``           ``transpose2d(x)``
``attention``           ``flash_attention(q, k, v, ...)``, ``flash_attention_fwd(...)``
``attention_bwd``       ``flash_attention_bwd(q, k, v, o, dout, lse, ..., mask_grad=False)``
======================  =====================================================================

Every kernel is importable from its module (``from nki.kernels.matmul import matmul``); all
but ``matmul``, ``linear`` and ``rope``, whose names are their modules' names, also from the
package (``from nki.kernels import rmsnorm``); ``nki.kernels.matmul`` etc. stay the modules.
The package imports its modules lazily, on first use of a name, so importing one kernel
module never depends on the others.
"""

from __future__ import annotations

import importlib

# exported name -> the module that defines it
_EXPORTS = {
    "flash_attention": "attention", "flash_attention_fwd": "attention",
    "flash_attention_bwd": "attention_bwd",
    "cross_entropy": "losses", "cross_entropy_bwd": "losses",
    "matmul_lhsT": "matmul", "batched_matmul": "matmul",
    "gelu": "mlp", "silu": "mlp", "silu_mul": "mlp", "swiglu_mlp": "mlp",
    "layernorm": "norms", "rmsnorm": "norms", "rmsnorm_residual": "norms",
    "layernorm_bwd": "norms", "rmsnorm_bwd": "norms",
    "softmax_rows": "softmax", "log_softmax": "softmax",
    "transpose2d": "transpose",
}
_MODULES = ("attention", "attention_bwd", "linear", "losses", "matmul", "mlp", "norms", "rope",
            "softmax", "transpose")

__all__ = sorted(_EXPORTS) + ["linear", "matmul", "rope"]   # the last three: the modules


def __getattr__(name: str):
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | set(_MODULES))
