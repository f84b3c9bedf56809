"""Exact conversions between torch tensors and the host numpy arrays the simulator uses,
without importing torch.

A kernel called with torch tensors gets torch from the tensor itself (``sys.modules``: the
caller has imported it), so calling a kernel never imports ``nki.torch`` — importing that
package enables the ``neuron`` device, which a user who only passes CPU tensors must not pay
for. bf16 and fp8 tensors have no numpy dtype of their own; they travel as their bit patterns
and are viewed as ml_dtypes arrays, so no value is ever rounded on the way in or out.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import sys
import weakref

import ml_dtypes
import numpy as np


def is_torch_tensor(x) -> bool:
    """True for a torch tensor, recognised by its type's module (torch is not imported)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _torch():
    torch = sys.modules.get("torch")
    if torch is None:
        raise ImportError("converting to torch needs torch imported first")
    return torch


@functools.lru_cache(maxsize=1)
def _bit_views() -> tuple[dict, dict]:
    """torch dtype → (same-width int dtype, ml_dtypes type), and the way back."""
    torch = _torch()
    table = {torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
             torch.float8_e4m3fn: (torch.uint8, ml_dtypes.float8_e4m3fn),
             torch.float8_e5m2: (torch.uint8, ml_dtypes.float8_e5m2)}
    back = {np.dtype(ml): (bits, tdt) for tdt, (bits, ml) in table.items()}
    return table, back


def _neuron_device():
    """The ``nki.torch.device`` module if the bridge is loaded (else None): a ``neuron``
    tensor of ours is host memory, so it is read and made without a copy."""
    return sys.modules.get("nki.torch.device")


def is_fake(t) -> bool:
    """A tensor without data (a FakeTensor of ``torch.compile``, or on the meta device)."""
    if t.device.type == "meta":
        return True
    fake = sys.modules.get("torch._subclasses.fake_tensor")
    return fake is not None and fake.is_fake(t)


@functools.lru_cache(maxsize=1)
def _numpy_dtypes() -> dict:
    """torch dtype -> numpy dtype of the arrays the simulator takes (ml_dtypes for bf16/fp8)."""
    torch = _torch()
    plain = {torch.float32: np.float32, torch.float16: np.float16, torch.float64: np.float64,
             torch.int8: np.int8, torch.uint8: np.uint8, torch.int16: np.int16,
             torch.uint16: np.uint16, torch.int32: np.int32, torch.uint32: np.uint32,
             torch.int64: np.int64, torch.bool: np.bool_}
    table, _ = _bit_views()
    plain.update({tdt: ml for tdt, (_, ml) in table.items()})
    return {tdt: np.dtype(npdt) for tdt, npdt in plain.items()}


def to_numpy(t) -> np.ndarray:
    """A C-contiguous numpy copy (or view) of a tensor, bf16/fp8 as ml_dtypes; for a tensor
    without data (:func:`is_fake`), an uninitialised array of its shape and dtype, which is all
    a trace reads.

    Example:
        >>> to_numpy(torch.ones(2, dtype=torch.bfloat16)).dtype   # doctest: +SKIP
        dtype(bfloat16)
    """
    if is_fake(t):
        shape = tuple(int(d) for d in t.shape)   # a symbolic size is specialised (guarded)
        return np.empty(shape, _numpy_dtypes().get(t.dtype, np.float64))
    t = t.detach()
    if t.device.type != "cpu":
        device = _neuron_device()
        ours = device is not None and t.device.type == "neuron" and device.is_initialized()
        t = device.as_cpu(t) if ours else t.cpu()
    t = t.contiguous()
    table, _ = _bit_views()
    if t.dtype in table:
        bits, ml = table[t.dtype]
        return t.view(bits).numpy().view(ml)
    return t.numpy()


def from_numpy(a: np.ndarray, like=None):
    """A torch tensor holding exactly ``a``'s values (bf16/fp8 through their bits), on the
    device of tensor ``like`` (CPU without one)."""
    torch = _torch()
    a = np.ascontiguousarray(a)
    _, back = _bit_views()
    if a.dtype in back:
        bits, tdt = back[a.dtype]
        view = np.int16 if bits is torch.int16 else np.uint8
        out = torch.from_numpy(a.view(view).copy()).view(tdt)
    else:
        out = torch.from_numpy(a.copy())
    if like is None or like.device.type == "cpu":
        return out
    device = _neuron_device()
    if device is not None and like.device.type == "neuron" and device.is_initialized():
        return device.as_neuron(out, like.device)      # relabelled, no second copy
    return out.to(like.device)


def copy_into(t, data: np.ndarray) -> None:
    """Write ``data`` back into the caller's tensor (inputs a kernel modified)."""
    with _torch().no_grad():
        t.copy_(from_numpy(data.reshape(tuple(t.shape))).to(t.device))


def guard_backward(outs: list, inputs: list, kernel: str) -> list:
    """``outs`` unchanged, unless autograd records this call (an input requires grad): then
    they get a backward that raises, naming the kernel. A bare ``@nki.jit`` kernel has no
    derivative; without this guard ``loss.backward()`` would silently skip it (or fail with
    torch's "does not require grad") instead of saying what to do."""
    torch = _torch()
    tracked = [t for t in inputs if t.requires_grad]
    if not tracked or not torch.is_grad_enabled() or not outs:
        return outs
    return list(_no_backward().apply(kernel, len(outs), *tracked, *outs))


@functools.lru_cache(maxsize=1)
def _no_backward():
    torch = _torch()

    class NkiKernelWithoutBackward(torch.autograd.Function):
        """Outputs of an ``@nki.jit`` call on tensors that require grad."""

        @staticmethod
        def forward(ctx, kernel, n_out, *tensors):
            ctx.kernel = kernel
            outs = tuple(t.detach() for t in tensors[len(tensors) - n_out:])
            ctx.mark_non_differentiable(*(o for o in outs if not o.is_floating_point()))
            return outs

        @staticmethod
        def backward(ctx, *grads):
            raise RuntimeError(
                f"nki kernel '{ctx.kernel}' has no backward: it was called on tensors that "
                "require grad, and a bare @nki.jit kernel has no derivative. Register it as "
                "a custom op with nki.torch.nki_op (torch_neuronx.nki_op) and give it a "
                "backward with register_autograd, or call it under torch.no_grad()")

    return NkiKernelWithoutBackward


REAL = object()   # what fake_outputs returns for a call on real data: run it
_DESCRIBING = contextvars.ContextVar("nki_describing_outputs", default=False)
_KERNELS: weakref.WeakSet = weakref.WeakSet()   # every Kernel made, for the torch.compile bridge
GRAPH_BRIDGE = "nki.torch.jit_ops"              # the module that makes kernel calls graph nodes


def kernel_created(kernel) -> None:
    """Kernel.__init__ (and each LNC clone) reports here, so that ``torch.compile`` can be told
    about every kernel once it is in use (:mod:`nki.torch.jit_ops`); nothing is imported."""
    _KERNELS.add(kernel)
    bridge = sys.modules.get(GRAPH_BRIDGE)
    if bridge is not None:
        bridge.kernel_created(kernel)


def known_kernels() -> list:
    """The live kernels made so far."""
    return list(_KERNELS)


@contextlib.contextmanager
def describing():
    """Inside, kernel calls on fake tensors return their described outputs directly (the fake
    kernel of a custom op runs here) instead of becoming a ``torch.compile`` graph node."""
    token = _DESCRIBING.set(True)
    try:
        yield
    finally:
        _DESCRIBING.reset(token)


def fake_outputs(spec, tensor_args: dict, call: tuple):
    """The outputs of a call whose torch tensors carry no data (``torch.compile`` tracing an
    ``nki_op`` or a kernel call), described without running it; ``REAL`` for real data.

    Shapes and dtypes come from the traced program (``spec``, the kernel traced on these
    shapes), so no fake kernel has to be written by hand. Outputs are contiguous, as real ones.
    While ``torch.compile`` is tracing, the call (``call``: kernel, args, kwargs) becomes one
    custom-op node of the graph instead (:mod:`nki.torch.jit_ops`).
    """
    torch_in = [ta.original for ta in tensor_args.values() if ta.is_torch]
    if not torch_in or not any(is_fake(t) for t in torch_in):
        return REAL
    bridge = sys.modules.get(GRAPH_BRIDGE)
    if bridge is not None and not _DESCRIBING.get():
        return bridge.graph_call(spec, tensor_args, *call)
    prog = spec.cores[0].program
    views = dict(prog.meta).get("output_views") or [None] * len(spec.cores[0].output_ids)
    to_torch = {npdt: tdt for tdt, npdt in _numpy_dtypes().items()}
    outs = []
    for tid, view in zip(spec.cores[0].output_ids, views):
        decl = prog.tensor(tid)
        shape, dtype = (decl.shape, decl.dtype) if view is None else (view[1], view[3])
        outs.append(torch_in[0].new_empty(tuple(shape), dtype=to_torch[np.dtype(
            dtype.host_dtype())]))
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else tuple(outs)
