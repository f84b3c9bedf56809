"""NKI kernels as PyTorch operators: the ``nki_op`` decorator and the ``nki::`` op library.

``@nki_op("name")`` turns a Python wrapper that lays out its inputs and calls ``@nki.jit``
kernels into ``torch.ops.nki.name``: a ``torch.library.custom_op`` with a CPU and a ``neuron``
implementation (neuron tensors live in host memory, so the kernel reads zero-copy CPU views of
them), a fake kernel for ``torch.compile`` (inferred from the kernels' traces unless one is
registered) and, optionally, autograd whose backward runs NKI kernels too. Registered here:

* ``nki::matmul(a, b)`` — ``a @ b`` for ``[..., M, K] @ [..., K, N]`` on the ``matmul`` /
  ``batched_matmul`` kernels; its backward is two more ``nki::matmul`` calls.
* ``nki::flash_attention(q, k, v, mask, is_causal, scale) -> (out, lse)`` — SDPA layout
  ``[B, H, S, d]`` (GQA when ``k``/``v`` have fewer heads), optional bool/additive mask, on
  the ``flash_attention`` kernel; backward ``nki::flash_attention_backward``.

Every NKI kernel launched through this module is counted: see :func:`kernel_counts`.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
from torch import Tensor
from torch.utils._pytree import tree_map

from nki.jit.torch_values import describing, is_fake
from nki.kernels import attention as _attn
from nki.kernels import matmul as _mm

NAMESPACE = "nki"
# dtypes the library kernels take (float64/int tensors are left to torch by the routing layer)
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
ATTENTION_DTYPES = (torch.float32, torch.bfloat16)      # the flash attention kernels' dtypes

_counts: Counter = Counter()
_counts_lock = threading.Lock()   # autograd runs device backward passes on a worker thread
_ops: dict[str, tuple[torch.library.CustomOpDef, Callable]] = {}


# ---------------------------------------------------------------- kernel launches and counts

def launch(kernel, *args, **kwargs):
    """Run an ``@nki.jit`` kernel and count it under its function name (a call on fake
    tensors, which only describes its outputs for ``torch.compile``, is not counted)."""
    if not any(isinstance(a, Tensor) and is_fake(a) for a in args):
        with _counts_lock:
            _counts[kernel.__name__] += 1
    return kernel(*args, **kwargs)


def kernel_counts() -> dict[str, int]:
    """How many times each NKI kernel ran through the torch bridge since the last reset."""
    with _counts_lock:
        return dict(_counts)


def reset_kernel_counts() -> None:
    """Set every kernel count back to zero."""
    with _counts_lock:
        _counts.clear()


@contextlib.contextmanager
def count_kernels() -> Iterator[dict[str, int]]:
    """``with count_kernels() as c:`` — ``c`` holds the kernels that ran inside the block."""
    before = kernel_counts()
    seen: dict[str, int] = {}
    try:
        yield seen
    finally:
        for name, n in kernel_counts().items():
            if n - before.get(name, 0):
                seen[name] = n - before.get(name, 0)


# ---------------------------------------------------------------- the neuron device

def neuron_available() -> bool:
    """True once the ``neuron`` PrivateUse1 backend is registered in this process."""
    return torch._C._get_privateuse1_backend_name() == "neuron"


def host_view(t):
    """A CPU tensor sharing ``t``'s bytes (neuron memory is host memory); others unchanged."""
    if isinstance(t, Tensor) and t.device.type == "neuron":
        from nki.torch.device import as_cpu

        return as_cpu(t)
    return t


def to_device(t: Tensor, device: torch.device) -> Tensor:
    """A fresh CPU result ``t`` on ``device``: relabelled without a copy for neuron (its
    memory is host memory), copied for any other device."""
    if device.type == "neuron":
        from nki.torch.device import as_neuron

        return as_neuron(t, device)
    return t.to(device)


def _on_host(fn: Callable) -> Callable:
    """``fn`` run on host views of its neuron arguments, its outputs moved back to neuron."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        device = next((a.device for a in args if isinstance(a, Tensor)), None)
        out = fn(*tree_map(host_view, args), **tree_map(host_view, kwargs))
        return tree_map(lambda t: to_device(t, device) if isinstance(t, Tensor) else t, out)

    return run


def register_device_kernels() -> None:
    """Give every ``nki::`` op its ``neuron`` implementation (idempotent; needs the device)."""
    if not neuron_available():
        return
    for op, fn in _ops.values():
        if not getattr(op, "_nki_on_neuron", False):
            op.register_kernel("neuron", _on_host(fn))
            op._nki_on_neuron = True


# ---------------------------------------------------------------- the decorator

def nki_op(name: str, *, mutates_args: Iterable[str] | str = (),
           device_types: Sequence[str] = ("neuron", "cpu"),
           schema: str | None = None) -> Callable[[Callable], torch.library.CustomOpDef]:
    """Decorator: a typed Python wrapper around NKI kernels becomes ``torch.ops.nki.<name>``.

    The wrapper receives CPU tensors (host views of neuron tensors) and calls ``@nki.jit``
    kernels on them, ideally through :func:`launch` so they are counted. It is always the
    ``cpu`` implementation (the simulated kernels run on the host); ``"neuron"`` in
    ``device_types`` adds the neuron one once the device exists. Register autograd with
    ``op.register_autograd``, as for any ``torch.library.custom_op``.

    The fake kernel ``torch.compile`` needs is inferred: it is the wrapper itself run on fake
    tensors, where every ``@nki.jit`` kernel it calls is traced for those shapes and dtypes
    but not run, and returns empty (contiguous) tensors of its outputs' shapes and dtypes
    (:func:`nki.jit.torch_values.fake_outputs`). ``op.register_fake`` replaces it (e.g. for
    outputs that are not contiguous).

    Example:
        >>> @nki_op("scale_rows")                                    # doctest: +SKIP
        ... def scale_rows(x: torch.Tensor) -> torch.Tensor:
        ...     return launch(scale_rows_kernel, x)
        >>> scale_rows.register_fake(lambda x: torch.empty_like(x))  # doctest: +SKIP
    """
    qualname = name if "::" in name else f"{NAMESPACE}::{name}"

    def wrap(fn: Callable) -> torch.library.CustomOpDef:
        host_types = tuple(d for d in device_types if d != "neuron") or ("cpu",)
        op = torch.library.custom_op(qualname, fn, mutates_args=mutates_args,
                                     device_types=host_types, schema=schema)
        if "neuron" in device_types:
            _ops[qualname] = (op, fn)
            register_device_kernels()
        if op._opoverload._schema.returns == []:
            op.register_fake(lambda *a, **k: None)     # nothing to describe
        else:
            op.register_fake(_traced_fake(fn))      # until one is registered by hand
        return op

    return wrap


def _traced_fake(fn: Callable) -> Callable:
    """``fn`` run on fake tensors with its kernel calls described, not made graph nodes."""

    @functools.wraps(fn)
    def fake(*args, **kwargs):
        with describing():
            return fn(*args, **kwargs)

    return fake


def registered_ops() -> list[str]:
    """Qualified names of the ops made by :func:`nki_op` with a neuron implementation."""
    return sorted(_ops)


# ---------------------------------------------------------------- nki::matmul

def check_kernel_dtypes(*tensors: Tensor, allowed: Sequence[torch.dtype] = KERNEL_DTYPES
                        ) -> None:
    """Raise a clear TypeError unless all tensors share one dtype of ``allowed``."""
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1 or not dtypes <= set(allowed):
        raise TypeError(f"NKI kernels take one of {tuple(allowed)}, all inputs alike; got "
                        f"{sorted(map(str, dtypes))}")


def matmul_host(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` on CPU tensors for ``a: [..., M, K]``, ``b: [K, N]`` or ``[..., K, N]``."""
    check_kernel_dtypes(a, b)
    if a.dim() == 2 and b.dim() == 2:
        return launch(_mm.matmul, a, b)
    batch = a.shape[:-2]
    if b.dim() > 2 and b.shape[:-2] != batch:
        raise ValueError(f"nki::matmul: batch dims differ: {tuple(a.shape)} @ {tuple(b.shape)}")
    if b.dim() == 2:            # one shared right operand: a single [B*M, K] @ [K, N] matmul
        out = launch(_mm.matmul, a.reshape(-1, a.shape[-1]), b)
    else:
        out = launch(_mm.batched_matmul, a.reshape(-1, *a.shape[-2:]),
                     b.reshape(-1, *b.shape[-2:]))
    return out.reshape(*batch, a.shape[-2], b.shape[-1])


@nki_op("matmul")
def matmul(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` for ``a: [..., M, K]`` and ``b: [K, N]`` or ``[..., K, N]`` (same batch)."""
    return matmul_host(a, b)


@matmul.register_fake
def _matmul_fake(a: Tensor, b: Tensor) -> Tensor:
    torch._check(a.shape[-1] == b.shape[-2], lambda: "nki::matmul: inner dims differ")
    return a.new_empty((*a.shape[:-1], b.shape[-1]))


def _matmul_setup(ctx, inputs, output) -> None:
    a, b = inputs
    ctx.save_for_backward(a, b)
    ctx.b_dim = b.dim()


def _matmul_backward(ctx, grad: Tensor):
    a, b = ctx.saved_tensors
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        grad_a = matmul(grad.contiguous(), b.mT.contiguous())
    if ctx.needs_input_grad[1]:
        if ctx.b_dim == 2 and a.dim() > 2:    # b was shared by every batch: fold the batch
            grad_b = matmul(a.reshape(-1, a.shape[-1]).t().contiguous(),
                            grad.reshape(-1, grad.shape[-1]).contiguous())
        else:
            grad_b = matmul(a.mT.contiguous(), grad.contiguous())
    return grad_a, grad_b


matmul.register_autograd(_matmul_backward, setup_context=_matmul_setup)


# ---------------------------------------------------------------- attention reference

def attention_scale(q: Tensor, scale: float | None) -> float:
    """SDPA's default softmax scale, 1/sqrt(head dim)."""
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def _scores(q: Tensor, k: Tensor, is_causal: bool, scale: float,
            bias: Tensor | None = None) -> Tensor:
    """fp32 scaled scores [..., Hq, Sq, Sk] with k repeated for GQA, mask and bias applied."""
    groups = q.shape[-3] // k.shape[-3]
    kf = k.float().repeat_interleave(groups, dim=-3)
    s = q.float() @ kf.mT * scale
    if bias is not None:
        s = s.masked_fill(~bias, float("-inf")) if bias.dtype == torch.bool else s + bias
    if is_causal:
        keep = torch.ones(s.shape[-2:], dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return s


def attention_reference(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, scale: float,
                        bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """torch reference (fp32): ``(out in q's dtype, logsumexp fp32)``: SDPA's math path for
    what the NKI kernel cannot do (float64, head dim > 128, dropout-free only)."""
    s = _scores(q, k, is_causal, scale, bias)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)      # fully masked rows: zeros
    vf = v.float().repeat_interleave(q.shape[-3] // v.shape[-3], dim=-3)
    return (p @ vf).to(q.dtype), lse


def attention_reference_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                                 lse: Tensor, is_causal: bool, scale: float,
                                 dlse: Tensor | None = None, bias: Tensor | None = None):
    """Reference backward by torch recomputation (fp32): ``(dq, dk, dv, ds)``, ``ds`` the
    scores' gradient (a float mask's, before summing it to the mask's shape).

    The math path for what the NKI backward kernel does not compute: a gradient flowing into
    the log-sum-exp, and inputs the kernel does not take (float64, head dim > 128).
    dS = P * (dP - rowsum(dO * O) + dlse), with P recomputed from the scores and ``lse``.
    """
    groups = q.shape[-3] // k.shape[-3]
    p = torch.exp(_scores(q, k, is_causal, scale, bias) - lse[..., None]).nan_to_num(0.0)
    do = dout.float()
    vf = v.float().repeat_interleave(groups, dim=-3)
    dp = do @ vf.mT
    row = (do * out.float()).sum(-1, keepdim=True)
    ds = p * (dp - row + (0.0 if dlse is None else dlse.float()[..., None]))
    dq = ds @ k.float().repeat_interleave(groups, dim=-3) * scale
    dk = ds.mT @ q.float() * scale
    dv = p.mT @ do

    def fold(g: Tensor) -> Tensor:            # GQA: sum the gradients of each group's heads
        return g.unflatten(-3, (k.shape[-3], groups)).sum(-3) if groups > 1 else g

    return dq.to(q.dtype), fold(dk).to(k.dtype), fold(dv).to(v.dtype), ds


# ---------------------------------------------------------------- nki::flash_attention

def _as_4d(t: Tensor) -> Tensor:
    return t if t.dim() == 4 else t.unsqueeze(0)


def check_attention_shapes(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Raise unless q/k/v are [B, H, S, d] (or [H, S, d]) with d <= 128 and GQA groups."""
    if not (q.dim() == k.dim() == v.dim() and q.dim() in (3, 4)):
        raise ValueError("nki::flash_attention takes [B, H, S, d] or [H, S, d] tensors")
    if q.shape[-1] > 128 or k.shape[-1] != q.shape[-1] or v.shape[-1] != q.shape[-1]:
        raise ValueError("nki::flash_attention: head dims must match and be <= 128")
    if k.shape != v.shape or q.shape[:-3] != k.shape[:-3] or q.shape[-3] % k.shape[-3]:
        raise ValueError("nki::flash_attention: k and v must be alike, with the batch of q "
                         "and a number of heads dividing q's")


def kernel_mask(mask: Tensor | None, q4: Tensor, k4: Tensor) -> Tensor | None:
    """An SDPA ``attn_mask`` (bool: True = attend; float: added) in the kernel's layout: an
    additive mask of q's dtype, ``[Sq, Sk]`` or ``[1|B, 1|H, Sq, Sk]``."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q4.dtype).masked_fill(~mask, float("-inf"))
    mask = mask.to(q4.dtype)
    B, H, Sq, Sk = q4.shape[0], q4.shape[1], q4.shape[2], k4.shape[2]
    fits = (mask.dim() == 2 and tuple(mask.shape) == (Sq, Sk)) or (
        mask.dim() == 4 and tuple(mask.shape[2:]) == (Sq, Sk)
        and mask.shape[0] in (1, B) and mask.shape[1] in (1, H))
    return (mask if fits else mask.expand(B, H, Sq, Sk)).contiguous()


def flash_attention_host(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                         is_causal: bool, scale: float | None) -> tuple[Tensor, Tensor]:
    """``(out, lse)`` of attention on CPU tensors through the NKI forward kernel."""
    check_kernel_dtypes(q, k, v, allowed=ATTENTION_DTYPES)
    check_attention_shapes(q, k, v)
    q4, k4, v4 = _as_4d(q), _as_4d(k), _as_4d(v)
    out, lse = launch(_attn.flash_attention, q4, k4, v4, kernel_mask(mask, q4, k4),
                      causal=is_causal, scale=attention_scale(q, scale))
    return out.reshape(q.shape), lse.reshape(q.shape[:-1])


def _mask_grad_wanted(mask: Tensor | None, mask_grad: bool) -> bool:
    """A mask gradient exists only for a float (additive) mask."""
    return mask_grad and mask is not None and mask.is_floating_point()


def attention_grads_host(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                         lse: Tensor, dlse: Tensor | None, mask: Tensor | None,
                         is_causal: bool, scale: float | None, mask_grad: bool = False
                         ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """``(dq, dk, dv, dmask)`` of attention on CPU tensors, contiguous, by the NKI backward
    kernel. ``dmask`` — dS summed to the mask's broadcast shape, in its dtype, as SDPA's
    autograd of a float ``attn_mask`` — only with ``mask_grad`` and a float mask, else None.

    A gradient flowing into ``lse`` itself (rare: only if the caller used it) is outside the
    kernel's formula; then the torch reference recomputes the gradients.
    """
    check_kernel_dtypes(q, k, v, out, dout, allowed=ATTENTION_DTYPES)
    check_attention_shapes(q, k, v)
    mask_grad = _mask_grad_wanted(mask, mask_grad)
    if dlse is not None and bool(dlse.any()):
        sc = attention_scale(q, scale)
        *grads, ds = attention_reference_backward(dout, q, k, v, out, lse, is_causal, sc, dlse,
                                                  mask)
    else:
        from nki.kernels.attention_bwd import flash_attention_bwd  # only a backward needs it

        q4, k4, v4 = _as_4d(q), _as_4d(k), _as_4d(v)
        res = launch(flash_attention_bwd, q4, k4, v4, _as_4d(out), _as_4d(dout),
                     lse.reshape(q4.shape[:-1]), kernel_mask(mask, q4, k4), causal=is_causal,
                     scale=attention_scale(q, scale), mask_grad=mask_grad)
        grads = [g.reshape(t.shape) for g, t in zip(res[:3], (q, k, v))]
        ds = res[3] if mask_grad else None
    # the kernel's dS has its mask layout (maybe expanded to [B, H, Sq, Sk]): fold it back
    dmask = ds.sum_to_size(mask.shape).to(mask.dtype).contiguous() if mask_grad else None
    return (*(g.contiguous() for g in grads), dmask)


def flash_attention_backward_host(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                                  lse: Tensor, dlse: Tensor | None, mask: Tensor | None,
                                  is_causal: bool, scale: float | None
                                  ) -> tuple[Tensor, Tensor, Tensor]:
    """``(dq, dk, dv)`` of attention on CPU tensors (:func:`attention_grads_host` without
    the mask gradient)."""
    return attention_grads_host(dout, q, k, v, out, lse, dlse, mask, is_causal, scale)[:3]


@nki_op("flash_attention")
def flash_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                    is_causal: bool = False, scale: float | None = None
                    ) -> tuple[Tensor, Tensor]:
    """``softmax(q kᵀ·scale + mask [causal]) v`` -> ``(out, logsumexp fp32 [..., Sq])``.

    ``q: [B, H, Sq, d]``, ``k, v: [B, Hkv, Sk, d]`` (GQA when ``Hkv < H``), ``d <= 128``;
    ``mask`` is an SDPA ``attn_mask`` (bool, True = attend, or additive); an additive mask
    that requires grad gets SDPA's gradient (dS summed over its broadcast dims).
    """
    return flash_attention_host(q, k, v, mask, is_causal, scale)


@flash_attention.register_fake
def _flash_attention_fake(q, k, v, mask=None, is_causal=False, scale=None):
    return q.new_empty(q.shape), q.new_empty(q.shape[:-1], dtype=torch.float32)


@nki_op("flash_attention_backward")
def flash_attention_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                             lse: Tensor, dlse: Tensor | None = None,
                             mask: Tensor | None = None, is_causal: bool = False,
                             scale: float | None = None, mask_grad: bool = False
                             ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients ``(dq, dk, dv, dmask)`` of :func:`flash_attention` (``dlse``: grad of its
    lse); ``dmask`` is the float mask's gradient with ``mask_grad``, else an empty tensor
    (a custom op cannot return None)."""
    *grads, dmask = attention_grads_host(dout, q, k, v, out, lse, dlse, mask, is_causal, scale,
                                         mask_grad)
    return (*grads, q.new_empty((0,)) if dmask is None else dmask)


@flash_attention_backward.register_fake
def _flash_attention_backward_fake(dout, q, k, v, out, lse, dlse=None, mask=None,
                                   is_causal=False, scale=None, mask_grad=False):
    wanted = _mask_grad_wanted(mask, mask_grad)
    dmask = mask.new_empty(mask.shape) if wanted else q.new_empty((0,))
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dmask


def _attention_setup(ctx, inputs, output) -> None:
    q, k, v, mask, is_causal, scale = inputs
    ctx.save_for_backward(q, k, v, mask, *output)
    ctx.is_causal, ctx.scale = is_causal, scale


def _attention_backward(ctx, dout: Tensor | None, dlse: Tensor | None):
    q, k, v, mask, out, lse = ctx.saved_tensors
    dout = torch.zeros_like(out) if dout is None else dout.contiguous()
    mask_grad = bool(ctx.needs_input_grad[3])       # a float mask that requires grad
    dq, dk, dv, dmask = flash_attention_backward(dout, q, k, v, out, lse, dlse, mask,
                                                 ctx.is_causal, ctx.scale, mask_grad)
    return dq, dk, dv, dmask if mask_grad else None, None, None


flash_attention.register_autograd(_attention_backward, setup_context=_attention_setup)


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
              is_causal: bool = False, scale: float | None = None) -> Tensor:
    """``nki::flash_attention`` without its log-sum-exp: a drop-in for SDPA's output."""
    return flash_attention(q, k, v, mask, is_causal, scale)[0]
