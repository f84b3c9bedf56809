"""DMA family rules: ``nisa.dma_copy`` and the ``nl.load``/``nl.store`` wrappers."""

from __future__ import annotations

from nki.ir.nodes import Instr
from nki.ir.ops import Opcode
from nki.ir.types import Memory
from nki.lang.common import Call, acc
from nki.lang.tensor import NkiTensor

_DMA_MEMS = (Memory.SBUF, Memory.SHARED_HBM, Memory.PRIVATE_HBM)


def _dma(call: Call, dst, src, attrs: tuple = ()) -> Instr:
    d = call.tensor(dst, "dst", _DMA_MEMS)
    s = call.tensor(src, "src", _DMA_MEMS)
    if d.size != s.size:
        raise call.error("nki_shape_mismatch", f"dst {d.shape} has {d.size} elements but src "
                         f"{s.shape} has {s.size}")
    for t, role in ((d, "dst"), (s, "src")):
        if t.on_chip and t.shape[0] > call.trace.target.pmax:
            raise call.error("err_num_partition_exceed_arch_limit",
                             f"partition dimension {t.shape[0]} of {role!r} exceeds "
                             f"{call.trace.target.pmax}")
    if d.on_chip and s.on_chip:
        call.same_elements(d, s, "dst", "src")
    elif d.on_chip or s.on_chip:
        chip, other = (d, s) if d.on_chip else (s, d)
        if other.size // max(chip.shape[0], 1) * chip.shape[0] != other.size:
            raise call.error("nki_shape_mismatch", "the HBM side does not split into the "
                             "on-chip partitions")
    ins = Instr(Opcode.DMA_COPY, (("dst", acc(d)),), (("src", acc(s)),), attrs, call.loc)
    return call.trace.emit(ins, api=call.api)


def dma_copy(dst, src, priority=None, oob_mode=None, dge_mode=None, engine=None, name=""):
    """Copy ``src`` to ``dst`` between HBM and SBUF (neither may be PSUM); casts through fp32
    when dtypes differ. Element counts must match; shapes may differ.

    Example:
        >>> nisa.dma_copy(dst=tile, src=x[0:128, :])  # doctest: +SKIP
    """
    return _dma(Call("nisa.dma_copy"), dst, src)


def load(src, dtype=None) -> NkiTensor:
    """Load an HBM view into a new SBUF tile of the same shape."""
    from nki.lang.creation import value_result

    call = Call("nl.load")
    s = call.tensor(src, "src", (Memory.SHARED_HBM, Memory.PRIVATE_HBM, Memory.SBUF))
    shape = s.shape if len(s.shape) >= 2 else (1,) + s.shape
    t = value_result(shape, dtype or s.dtype, buffer=Memory.SBUF)
    _dma(call, t, s)
    return t


def store(dst, value) -> None:
    """Store an SBUF tile into an HBM view (PSUM values must be copied to SBUF first)."""
    call = Call("nl.store")
    call.tensor(dst, "dst", (Memory.SHARED_HBM, Memory.PRIVATE_HBM))
    call.tensor(value, "value", (Memory.SBUF,))
    _dma(call, dst, value)
