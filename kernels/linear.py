"""Fused linear layer: ``act(x @ W.T + bias)`` in torch's ``nn.Linear`` layout.

``linear(x, weight, bias=None, activation=None)`` for ``x: [..., in]``, ``weight: [out, in]``
(torch's layout), ``bias: [out]``; ``activation`` is ``None``, ``"relu"``, ``"gelu"`` (erf),
``"gelu_tanh"`` or ``"silu"``. Leading dims of ``x`` are flattened into rows.

Tiling (``matmul.tiled_matmul``): both operands have the contraction dim ``in`` on their
columns, so both are loaded transposed by the DMA engines — ``Wᵀ`` in blocks of ``[in,
NB]`` (NB output features, up to the moving free-size limit) that stay resident in SBUF
while every 128-row tile of ``x`` streams past as the stationary operand ``xᵀ [in, 128]``.
Per output tile ``[128 rows, NB]`` the Tensor engine first writes the bias — a rank-1
matmul of a ones row ``[1, 128]`` with the bias row ``[1, NB]`` — then accumulates the
``in / 128`` tile products onto it in fp32 PSUM; the Scalar engine applies the activation
while evacuating PSUM to SBUF (one instruction, with the cast to the output dtype), and the
tile is stored. Any sizes; fp32, bf16 and fp8 inputs (fp8 → fp32 output).
"""

from __future__ import annotations

import nki
import nki.language as nl

from .matmul import out_dtype_for, tiled_matmul

ACTIVATIONS = {
    None: None,
    "none": None,
    "relu": nl.relu,
    "gelu": nl.gelu,
    "gelu_tanh": nl.gelu_apprx_tanh,
    "silu": nl.silu,
}


def activation_op(name):
    """The Scalar-engine op for an activation name (``None`` → no activation)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"activation {name!r} is not one of {sorted(map(str, ACTIVATIONS))}")
    return ACTIVATIONS[name]


@nki.jit
def linear(x, weight, bias=None, activation=None, out_dtype=None):
    """``act(x @ weight.T + bias)``; output ``[..., out]`` in x's dtype (fp32 for fp8).

    Example:
        >>> y = linear(x, w, b, activation="gelu")   # x: [200, 333], w: [96, 333]  # doctest: +SKIP
    """
    act = activation_op(activation)
    lead, K = tuple(x.shape[:-1]), x.shape[-1]
    n_out = weight.shape[0]
    rows = 1
    for d in lead:
        rows *= d
    out = nl.ndarray(lead + (n_out,), dtype=out_dtype_for(x.dtype, out_dtype), buffer=nl.shared_hbm)
    x2 = x.reshape((rows, K)) if x.ndim != 2 else x
    o2 = out.reshape((rows, n_out)) if x.ndim != 2 else out
    tiled_matmul(o2, x2, weight, a_transposed=False, b_transposed=True, bias=bias, act=act)
    return out


def linear_torch(x, weight, bias=None, activation=None):
    """torch reference in float64."""
    import torch.nn.functional as F

    y = F.linear(x.double(), weight.double(), None if bias is None else bias.double())
    if activation in (None, "none"):
        return y
    return {"relu": F.relu, "silu": F.silu, "gelu": F.gelu,
            "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}[activation](y)
