"""Row chains: a run of row-wise instructions run one partition chunk at a time.

A run of plain rows (``codegen.flush``) normally runs each instruction over all its
partitions before the next starts, so every instruction streams its operands through the
caches once. When every instruction of the run is row-wise (each partition's results depend
only on that partition's inputs: ``helper(row_wise=True)``) and the run's operands map
partition for partition onto each other, the loops may be interchanged: for each chunk of
``R`` partitions, every instruction of the run on that chunk (a loop interchange in codegen;
each helper call is the same instruction restricted to the chunk, ``memory.chunk_window``),
while the chunk's rows are still in L2. Each instruction's arithmetic and rounding are the
row-wise helper's own, so the results are the bits of the plain order.

Legality, decided here from the placed operands, is that the interchange reorders no two
accesses to the same bytes across chunks: for every pair of operands of two different
instructions of the run, one of them written, either their bytes never meet, or they are
rows of one pitch whose row ``r`` can meet only the other's row ``r`` (the same partition,
so the same chunk). Engine accumulator lanes count as operands too. A run is refused when an
operand is a partition broadcast (pitch 0) or not rows of one partition count ``P``, when an
instruction is not row-wise (transposes, matmul, partition reductions, shuffles, iota over
partitions, indirect DMA, host calls), or when more than one instruction may log an
accumulator read before any write (the log keeps first-seen order). Register-moved rows,
which may fault, never reach a run (``codegen._dynamic``): the row-wise helpers return 0.
"""

from __future__ import annotations

import functools
import glob
import os
from dataclasses import dataclass

import numpy as np

from nki.ir.affine import Affine
from nki.ir.nodes import Instr, Placed
from nki.ir.ops import Opcode, ReduceCmd
from nki.ir.types import Memory
from nki.sim.helpers.memory import CHUNK_ELEMS

# Bytes one chunk of a chain may touch: the sum over the run's distinct operands of chunk
# rows x row bytes. The smaller L2 of the machine kinds at hand (1 MiB a core on Zen 5;
# 2 MiB on the Xeons), so what one instruction wrote is still there when the next reads it
# (the HBM rows in it only stream through). No smaller: every chunk is one more call per
# instruction (~0.75 us each, measured on the Xeon), and 16-row chunks of a 4096x1024
# layernorm ran no faster there than 48-row ones.
CHAIN_BYTES = 1 << 20
# A chain can pay only where the plain order misses L2 a lot: when the run's on-chip tiles
# (SBUF, PSUM) at all partitions exceed FOOTPRINT_L2 times this CPU's L2. Where they fit,
# every instruction already reads its operands from L2 and the chunks only add calls.
# Measured on the Xeon (2 MiB L2), chained (16-64 rows) against plain, timed in turn:
# softmax (1.5 MiB of tiles), layernorm and rmsnorm (2.5 MiB) 1-15% slower, exact GELU and
# SiLU ([128, 8192] tiles, 8 MiB) from 7% faster to 2% slower over three runs (two runs of
# one program differ by up to 5% there). 2 lies between; Zen 5 (1 MiB L2) is not measured.
FOOTPRINT_L2 = 2
L2_FALLBACK = 1 << 20


@functools.lru_cache(maxsize=1)
def l2_bytes() -> int:
    """One core's L2 on this CPU (Linux's cache description of cpu0), else
    ``L2_FALLBACK``."""
    for index in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            with open(os.path.join(index, "level")) as f:
                if f.read().strip() != "2":
                    continue
            with open(os.path.join(index, "size")) as f:
                size = f.read().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
        digits = size.rstrip("KM")
        if digits.isdigit() and int(digits) > 0:
            return int(digits) * scale
    return L2_FALLBACK


_HBM = (Memory.SHARED_HBM, Memory.PRIVATE_HBM)   # one arena: one address space
_SCALAR_LANES, _VECTOR_LANES = "scalar accumulators", "vector accumulators"


@dataclass(frozen=True)
class _Rows:
    """One operand as ``P`` rows: the address space, the byte offset of row 0, the pitch
    between rows (bytes), the bytes of a row relative to its start ``[lo, hi)``."""

    space: object
    offset: Affine
    pitch: int
    lo: int
    hi: int
    write: bool
    elems: int = 1      # elements per row


def chain_rows(instrs: list[Instr], row_wise: list[bool], trips: dict[int, int]) -> int:
    """Partitions per chunk for running ``instrs`` (a run of plain rows, in order) as a row
    chain, or 0 when the interchange is not legal or gains nothing. ``row_wise[k]``: whether
    instruction ``k``'s helper is row-wise; ``trips``: the largest trip count of each
    enclosing loop slot (the offsets' loop variables)."""
    if len(instrs) < 2 or not all(row_wise):
        return 0
    per_instr, parts = [], set()
    for ins in instrs:
        rows = _operand_rows(ins, parts)
        if rows is None:
            return 0
        per_instr.append(rows)
    if len(parts) != 1 or sum(_reads_lanes(ins) for ins in instrs) > 1:
        return 0
    P = parts.pop()
    if P < 2 or not _ordered_safely(per_instr, P, trips):
        return 0
    return _rows_per_chunk(per_instr, P)


def _operand_rows(ins: Instr, parts: set[int]) -> list[_Rows] | None:
    """The instruction's operands as rows (plus its accumulator lanes), adding their
    partition counts to ``parts``; None when one is not a set of rows."""
    out = []
    for _, op, write in ins.accesses():
        if not isinstance(op, Placed) or not op.dims:
            return None
        pitch, p = op.dims[0]
        if pitch <= 0 or p < 1:
            return None       # partition broadcast (pitch 0) or reversed partitions
        parts.add(p)
        size = op.dtype.itemsize
        lo, hi = 0, size
        for stride, count in op.dims[1:]:
            span = (count - 1) * stride * size
            lo, hi = lo + min(span, 0), hi + max(span, 0)
        space = Memory.SHARED_HBM if op.space in _HBM else op.space
        elems = int(np.prod([c for _, c in op.dims[1:]], dtype=np.int64))
        out.append(_Rows(space, op.offset * size, pitch * size, lo, hi, write, elems))
    lanes = _lanes(ins)
    if lanes is False:
        return None
    if lanes is not None:
        out.append(lanes)
    return out


def _lanes(ins: Instr) -> _Rows | None | bool:
    """The engine accumulator lanes an instruction may read or write, as rows of one lane
    each (None: it touches none; False: they cannot be named). ScalarE lane ``i`` is
    physical partition ``i`` of the data; VectorE lanes count from the access's first
    partition (nki/sim/helpers/accumulators.py)."""
    if ins.opcode is Opcode.TENSOR_SCALAR_REDUCE:
        return _Rows(_VECTOR_LANES, Affine.of(0), 1, 0, 1, True)
    if ins.opcode is not Opcode.ACTIVATION:
        return None
    data = ins.operand("data")
    pitch = data.dims[0][0]
    if any(c % pitch for _, c in data.offset.terms):
        return False
    first = Affine(data.offset.const // pitch,
                   tuple((s, c // pitch) for s, c in data.offset.terms))
    return _Rows(_SCALAR_LANES, first, 1, 0, 1, True)


def _reads_lanes(ins: Instr) -> bool:
    """Whether the instruction may log a read of never-written accumulator lanes."""
    if ins.opcode not in (Opcode.ACTIVATION, Opcode.TENSOR_SCALAR_REDUCE):
        return False
    cmd = ins.attr("reduce_cmd")
    has_res = any(role == "reduce_res" for role, _, _ in ins.accesses())
    return cmd == ReduceCmd.reduce or (cmd == ReduceCmd.idle and has_res)


def _ordered_safely(per_instr: list[list[_Rows]], P: int, trips: dict[int, int]) -> bool:
    """Whether no two operands of different instructions, one written, can touch the same
    bytes in different chunks."""
    for i, xs in enumerate(per_instr):
        for ys in per_instr[i + 1:]:
            for x in xs:
                for y in ys:
                    if (x.write or y.write) and x.space == y.space and \
                            not _rows_pair_safe(x, y, P, trips):
                        return False
    return True


def _rows_pair_safe(x: _Rows, y: _Rows, P: int, trips: dict[int, int]) -> bool:
    """Whether row ``r`` of ``x`` and row ``q`` of ``y`` share no byte unless ``r == q``.

    With ``d`` = x's offset - y's, row ``r`` of x meets row ``q`` of y iff
    ``y.lo - x.hi < d + k*pitch < y.hi - x.lo`` for ``k = r - q``. A ``d`` that depends on
    loop variables is only judged by its bounds, as whole operands that never meet."""
    diff = x.offset - y.offset
    if not diff.is_const:
        try:
            dlo, dhi = diff.bounds(trips)
        except KeyError:
            return False
        # whole operands: x spans [lo, hi + (P-1) pitch), y likewise
        x_hi, y_hi = x.hi + (P - 1) * x.pitch, y.hi + (P - 1) * y.pitch
        return dhi <= y.lo - x_hi or dlo >= y_hi - x.lo
    d = diff.const
    if x.pitch != y.pitch:
        x_hi, y_hi = x.hi + (P - 1) * x.pitch, y.hi + (P - 1) * y.pitch
        return d <= y.lo - x_hi or d >= y_hi - x.lo
    s = x.pitch
    k_lo = (y.lo - x.hi - d) // s + 1        # smallest k with d + k s > y.lo - x.hi
    k_hi = -((d - y.hi + x.lo) // s) - 1     # largest k with d + k s < y.hi - x.lo
    k_lo, k_hi = max(k_lo, 1 - P), min(k_hi, P - 1)
    return k_lo > k_hi or (k_lo == 0 and k_hi == 0)


def _rows_per_chunk(per_instr: list[list[_Rows]], P: int) -> int:
    """Chunk rows whose working set (distinct operands x row bytes) fits ``CHAIN_BYTES``,
    the chunks of one size; 0 when the run's on-chip tiles are not much more than L2 holds
    (``FOOTPRINT_L2``: nothing to gain) or one chunk would take every partition anyway."""
    distinct = {(r.space, r.offset, r.pitch, r.lo, r.hi)
                for rows in per_instr for r in rows if not isinstance(r.space, str)}
    on_chip = sum(hi - lo for space, _, _, lo, hi in distinct if space not in _HBM)
    if on_chip * P <= FOOTPRINT_L2 * l2_bytes():
        return 0
    row_bytes = sum(hi - lo for _, _, _, lo, hi in distinct)
    rows = max(1, CHAIN_BYTES // max(row_bytes, 1))
    if rows >= P:
        return 0
    # whole multiples of the row-wise helpers' own chunks (memory.chunk_rows: CHUNK_ELEMS
    # elements of the first operand), so a window leaves them no remainder chunk to call
    inner = max([n for n in (max(1, CHUNK_ELEMS // max(ops[0].elems, 1)) for ops in per_instr)
                 if n < P], default=1)
    if rows >= inner:
        return rows // inner * inner
    chunks = -(-P // rows)
    return -(-P // chunks)      # P split evenly: no chunk of a few leftover partitions
