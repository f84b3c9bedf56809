"""Partition broadcasts of the legacy dialect, realised as NKI realises them: on TensorE.

AWS's architecture guide for NeuronCore-v2 (``general/nki/arch/trainium_inferentia2_arch.rst``,
"Alternative Use Case") says that ``x.broadcast_to((M, F))`` of a one-partition tile is a
matmul under the hood, ``nc_matmul(ones[1, M], x, is_stationary_onezero=True)``, and the
fused-mamba tutorial (``nki/guides/tutorials/fused_mamba.rst``) says a partition-dim
broadcast "requires a separate instruction on TensorE". Its profile of ``mamba_v1`` shows
those matmuls on TensorE and PSUM filling with their results while VectorE consumes them.

So a broadcast of a float ``[1, F]`` tile is a ones-matmul per PSUM bank (512 fp32 columns,
the most one ``nc_matmul`` may write). An fp32 result of one bank stays in PSUM, where the
consumer reads it; anything larger, or of another float dtype, is copied into an SBUF tile of
the source's dtype (the copy reads PSUM). Values are exact either way: each output element is
``x * 1.0`` accumulated in fp32 (bf16/fp16 widen exactly and narrow back unchanged).
Integer tiles, tiles with more free dims, and free-dim broadcasts keep the stream-shuffle
lowering of :func:`nki.lang.select.broadcast_to`.
"""

from __future__ import annotations

from nki.ir.ops import Engine
from nki.ir.types import FLOAT32, Memory
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import current

# dtypes nc_matmul takes as stationary and moving, whose products by 1.0 are exact in fp32
_MATMUL_FLOATS = ("float32", "bfloat16", "float16")
# PSUM banks an fp32 broadcast may occupy and still stay in PSUM for its consumer: where
# neuronx-cc keeps larger results is not documented (our assumption, docs/cost-model.md §4).
# A source constant on purpose: the program cache keys on nki's sources, not on values
# patched at run time, so an experiment must edit it here, not monkeypatch it
PSUM_RESIDENT_BANKS = 1


def _on_tensor_engine(x: NkiTensor, shape: tuple[int, ...]) -> bool:
    """A pure partition broadcast ``[1, F] -> [M, F]`` of a float tile (M <= 128)."""
    return (x.ndim == 2 and len(shape) == 2 and x.shape[0] == 1 and 1 < shape[0] <= 128
            and shape[1] == x.shape[1] and x.dtype.name in _MATMUL_FLOATS)


def partition_broadcast(x: NkiTensor, shape: tuple[int, ...]) -> NkiTensor:
    """``x.broadcast_to(shape)`` as a new tile: ones-matmuls into PSUM (see the module doc);
    other broadcasts as :func:`nki.lang.select.broadcast_to` makes them."""
    from nki.lang.creation import ndarray, value_result
    from nki.lang.matmul import nc_matmul
    from nki.lang.select import broadcast_to as stream_broadcast
    from nki.lang.vector import memset, tensor_copy

    shape = tuple(int(s) for s in shape)
    if not _on_tensor_engine(x, shape):
        return stream_broadcast(x, shape)
    parts, free = shape
    bank = current().target.psum_fmax
    if x.buffer is Memory.PSUM:            # TensorE reads SBUF: the compiler copies it out first
        staged_x = ndarray(x.shape, x.dtype, buffer=Memory.SBUF)
        tensor_copy(dst=staged_x, src=x)
        x = staged_x
    # the hardware's stationary is a compile-time one/zero constant; we fill it on ScalarE
    # (a short instruction off VectorE, which such kernels keep busy)
    ones = ndarray((1, parts), x.dtype, buffer=Memory.SBUF)
    memset(dst=ones, value=1.0, engine=Engine.scalar)
    if x.dtype == FLOAT32 and free <= bank * PSUM_RESIDENT_BANKS:
        out = value_result((parts, free), FLOAT32, buffer=Memory.PSUM)
        for lo in range(0, free, bank):
            hi = min(free, lo + bank)
            nc_matmul(dst=out[:, lo:hi], stationary=ones, moving=x[:, lo:hi],
                      is_stationary_onezero=True)
        return out
    out = value_result(shape, x.dtype, buffer=Memory.SBUF)
    for lo in range(0, free, bank):
        hi = min(free, lo + bank)
        staged = ndarray((parts, hi - lo), FLOAT32, buffer=Memory.PSUM)
        nc_matmul(dst=staged, stationary=ones, moving=x[:, lo:hi], is_stationary_onezero=True)
        tensor_copy(dst=out[:, lo:hi], src=staged)
    return out
