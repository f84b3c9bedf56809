"""Plain PyTorch on ``neuron`` runs on NKI kernels: aten kernels for the PrivateUse1 key.

:func:`enable` registers ``neuron`` kernels for ``aten::mm``, ``bmm``, ``addmm`` (so
``nn.Linear``, ``F.linear`` and ``torch.matmul`` run on the NKI ``matmul`` kernels), for
``aten::_scaled_dot_product_fused_attention_overrideable`` and its backward (where the neuron
device sends ``F.scaled_dot_product_attention``) and for ``aten::_native_multi_head_attention``
(``nn.MultiheadAttention``'s inference fast path). Each kernel reads zero-copy CPU views of its
neuron arguments. What the NKI kernels cannot do (float64/int dtypes, head dim > 128,
dropout) runs the same computation with torch on those views instead — the "math path".

An additive ``attn_mask`` that requires grad reaches the overrideable op only while routing
is on (a flag the device's C++ backend choice reads, set here): its backward here returns the
mask gradient, the device's default one cannot, so otherwise such masks take torch's math path.

Routing can be switched off (``set_enabled(False)``, ``with routing(False):`` or
``NKI_TORCH_ROUTING=0``); the ops then run on torch's CPU kernels. ``kernel_counts()`` tells
which NKI kernels ran.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch
import torch.nn.functional as F  # noqa: N812  (the universal PyTorch spelling)
from torch import Tensor

from nki import config
from nki.torch import ops
from nki.torch.ops import host_view, kernel_counts, reset_kernel_counts, to_device

__all__ = ["ROUTED_OPS", "enable", "is_enabled", "kernel_counts", "reset_kernel_counts",
           "routing", "set_enabled"]
_state = {"enabled": config.torch_routing_enabled(), "lib": None}

ROUTED_OPS = ("mm", "bmm", "addmm", "_scaled_dot_product_fused_attention_overrideable",
              "_scaled_dot_product_fused_attention_overrideable_backward",
              "_native_multi_head_attention")


# ---------------------------------------------------------------- the switch

def is_enabled() -> bool:
    """Whether aten ops on neuron tensors go to NKI kernels."""
    return _state["enabled"]


def set_enabled(flag: bool) -> bool:
    """Turn routing on or off for the whole process; returns the previous setting."""
    previous, _state["enabled"] = _state["enabled"], bool(flag)
    _tell_device()
    return previous


def _tell_device() -> None:
    """Tell the device's C++ SDPA backend choice whether a float mask that requires grad may
    take the overrideable op: only while our backward kernel (which returns the mask gradient)
    is registered and routing is on; otherwise such masks keep the math path."""
    if _state["lib"] is not None:
        from nki.torch import device

        device.set_sdpa_mask_grad_routed(_state["enabled"])


@contextlib.contextmanager
def routing(enabled: bool) -> Iterator[None]:
    """``with routing(False): ...`` runs the block on torch's CPU kernels (or NKI with True)."""
    previous = set_enabled(enabled)
    try:
        yield
    finally:
        set_enabled(previous)


def enable() -> bool:
    """Register the neuron kernels of :data:`ROUTED_OPS` and of the ``nki::`` ops.

    Call once the ``neuron`` device exists (after its extension has registered its own aten
    kernels: the later registration wins). Idempotent; False if there is no neuron device.
    """
    if not ops.neuron_available():
        return False
    ops.register_device_kernels()
    if _state["lib"] is None:
        lib = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            # replacing the device's default (CPU-kernel) neuron kernels is the point
            warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered")
            for name, kernel in _kernels().items():
                lib.impl(name, kernel, "PrivateUse1")
        _state["lib"] = lib
    _tell_device()
    return True


# ---------------------------------------------------------------- matmuls (CPU tensors)

def _matmul_ok(*tensors: Tensor) -> bool:
    dtypes = {t.dtype for t in tensors}
    return (is_enabled() and len(dtypes) == 1 and dtypes <= set(ops.KERNEL_DTYPES)
            and all(t.numel() > 0 for t in tensors))


def mm_host(a: Tensor, b: Tensor) -> Tensor:
    """``aten::mm`` on CPU tensors: the NKI matmul when it applies, else torch."""
    return ops.matmul_host(a, b) if _matmul_ok(a, b) else torch.mm(a, b)


def bmm_host(a: Tensor, b: Tensor) -> Tensor:
    """``aten::bmm`` on CPU tensors."""
    return ops.matmul_host(a, b) if _matmul_ok(a, b) else torch.bmm(a, b)


def addmm_host(bias: Tensor, a: Tensor, b: Tensor, beta: float = 1, alpha: float = 1) -> Tensor:
    """``aten::addmm`` (``beta * bias + alpha * a @ b``) on CPU tensors."""
    if not _matmul_ok(a, b) or bias.dtype != a.dtype:
        return torch.addmm(bias, a, b, beta=beta, alpha=alpha)
    out = ops.matmul_host(a, b)
    if alpha != 1:
        out.mul_(alpha)
    if beta != 0:      # beta == 0 ignores bias entirely (even NaNs), as torch does
        out.add_(bias if beta == 1 else bias * beta)
    return out


def _neuron_mm(self: Tensor, mat2: Tensor) -> Tensor:
    return to_device(mm_host(host_view(self), host_view(mat2)), self.device)


def _neuron_bmm(self: Tensor, mat2: Tensor) -> Tensor:
    return to_device(bmm_host(host_view(self), host_view(mat2)), self.device)


def _neuron_addmm(self: Tensor, mat1: Tensor, mat2: Tensor, *, beta=1, alpha=1) -> Tensor:
    out = addmm_host(host_view(self), host_view(mat1), host_view(mat2), beta, alpha)
    return to_device(out, mat1.device)


# ---------------------------------------------------------------- SDPA (CPU tensors)

def attention_ok(q: Tensor, k: Tensor, v: Tensor, dropout_p: float = 0.0) -> bool:
    """Whether the NKI flash attention kernel computes this SDPA call."""
    if not is_enabled() or dropout_p > 0:
        return False
    if len({q.dtype, k.dtype, v.dtype}) != 1 or q.dtype not in ops.ATTENTION_DTYPES:
        return False
    try:
        ops.check_attention_shapes(q, k, v)
    except ValueError:
        return False
    return min(q.numel(), k.numel()) > 0


def sdpa_host(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, is_causal: bool,
              scale: float | None) -> tuple[Tensor, Tensor]:
    """``(out, lse)`` on CPU tensors: NKI flash attention, or the torch math path."""
    if attention_ok(q, k, v):
        return ops.flash_attention_host(q, k, v, bias, is_causal, scale)
    return ops.attention_reference(q, k, v, is_causal, ops.attention_scale(q, scale), bias)


def sdpa_backward_host(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None,
                       out: Tensor, lse: Tensor, is_causal: bool, scale: float | None,
                       bias_grad: bool = False):
    """``(dq, dk, dv, dbias)`` on CPU tensors; ``dbias`` (summed to the bias' broadcast
    shape, in its dtype) only with ``bias_grad`` and a float bias, else None."""
    bias_grad = bias_grad and bias is not None and bias.dtype != torch.bool
    if attention_ok(q, k, v):
        return ops.attention_grads_host(dout, q, k, v, out, lse, None, bias, is_causal, scale,
                                        mask_grad=bias_grad)
    dq, dk, dv, ds = ops.attention_reference_backward(
        dout, q, k, v, out, lse, is_causal, ops.attention_scale(q, scale), None, bias)
    dbias = ds.sum_to_size(bias.shape).to(bias.dtype) if bias_grad else None
    return dq, dk, dv, dbias


def _like(src: Tensor, like: Tensor) -> Tensor:
    """``src`` (CPU) copied into a new tensor with ``like``'s device and dim order (SDPA's
    meta kernels promise the query's layout: compiled graphs rely on these strides)."""
    if src.shape == like.shape:
        out = torch.empty_like(like)
    else:
        order = sorted(range(like.dim()), key=lambda i: like.stride(i), reverse=True)
        out = like.new_empty([src.shape[i] for i in order]).permute(
            [order.index(i) for i in range(like.dim())])
    host_view(out).copy_(src)
    return out


def _neuron_sdpa(
        query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False,
        return_debug_mask=False, *, scale=None):
    if dropout_p > 0:
        raise NotImplementedError("neuron SDPA: dropout is not supported by the NKI attention "
                                  "kernel; the SDPA backend choice must send it to the math path")
    q, k, v, bias = (host_view(t) for t in (query, key, value, attn_bias))
    out, lse = sdpa_host(q, k, v, bias, is_causal, scale)
    B, H, Sq = (1, *query.shape[:2]) if query.dim() == 3 else query.shape[:3]
    seed = torch.empty((), dtype=torch.long, device=query.device)
    return (_like(out, query), to_device(lse.reshape(B, H, Sq), query.device), None, None,
            Sq, key.shape[-2], seed, seed.clone(), None)


def _neuron_sdpa_backward(
        grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
        cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *,
        scale=None):
    q, k, v, bias, o, do = (host_view(t) for t in (query, key, value, attn_bias, out, grad_out))
    lse = host_view(logsumexp).reshape(q.shape[:-1])
    dq, dk, dv, dbias = sdpa_backward_host(do, q, k, v, bias, o, lse, is_causal, scale,
                                           bool(grad_input_mask[3]))
    grads = [_like(dq, query), _like(dk, key), _like(dv, value),
             _like(dbias, attn_bias) if dbias is not None else None]
    return tuple(g if want else None for g, want in zip(grads, grad_input_mask))


# ---------------------------------------------------------------- nn.MultiheadAttention

def _neuron_native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight,
                                        qkv_bias, proj_weight, proj_bias, mask=None,
                                        need_weights=True, average_attn_weights=True,
                                        mask_type=None):
    """The fast path of ``nn.MultiheadAttention`` (eval, no grad) on routed ops; masks fall
    back to torch's CPU kernel."""
    args = (query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
            proj_bias, mask, need_weights, average_attn_weights, mask_type)
    if mask is not None or not is_enabled() or query.dim() != 3 or query.is_nested:
        res = torch.ops.aten._native_multi_head_attention(*(host_view(a) for a in args))
        return tuple(to_device(r, query.device) for r in res)
    B, T, E = query.shape
    if query is key and key is value:
        q, k, v = F.linear(query, qkv_weight, qkv_bias).chunk(3, dim=-1)
    else:
        w, b = qkv_weight.chunk(3), qkv_bias.chunk(3)
        q, k, v = (F.linear(x, w[i], b[i]) for i, x in enumerate((query, key, value)))
    q, k, v = (t.unflatten(-1, (num_head, E // num_head)).transpose(1, 2) for t in (q, k, v))
    if need_weights:
        weights = torch.softmax(q @ k.mT * (E // num_head) ** -0.5, dim=-1)
        ctx = weights @ v
        weights = weights.mean(dim=1) if average_attn_weights else weights
    else:
        ctx = F.scaled_dot_product_attention(q, k, v)
        weights = query.new_empty(0)
    out = F.linear(ctx.transpose(1, 2).reshape(B, T, E), proj_weight, proj_bias)
    return out.contiguous(), weights


def _kernels() -> dict:
    """aten op name -> its neuron kernel here (one entry per name in ROUTED_OPS)."""
    table = {
        "mm": _neuron_mm,
        "bmm": _neuron_bmm,
        "addmm": _neuron_addmm,
        "_scaled_dot_product_fused_attention_overrideable": _neuron_sdpa,
        "_scaled_dot_product_fused_attention_overrideable_backward": _neuron_sdpa_backward,
        "_native_multi_head_attention": _neuron_native_multi_head_attention,
    }
    assert set(table) == set(ROUTED_OPS)
    return table
