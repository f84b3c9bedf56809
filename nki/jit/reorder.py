"""PSUM live ranges under a compiler's schedule, not the kernel's program order.

A kernel may accumulate more PSUM tiles than PSUM has banks before it reads any of them
(nki-library's MoE ``bwmm_shard_on_I`` fills one fp32 bank per 128-column tile of the
intermediate dimension, 12 of them at I=3072, then copies each to SBUF in a second loop).
In program order that is 24 KiB live against 16 KiB; neuronx-cc schedules instructions
along their dependencies, and the copy out of a tile depends only on that tile's last
matmul, so it can run right after it and the bank is free again. Capacity must never be
stricter than the real compiler, so PSUM's check asks whether the tiles fit in *a* legal
schedule, not only in program order.

The schedule measured here is one every compiler may take: each *evacuation* (an
instruction that reads PSUM and writes no PSUM) moves up to just after the last earlier
instruction it depends on (it reads what that one writes, or writes what that one reads
or writes; dependencies by tensor, which is conservative), everything else keeps its
order. It never crosses a barrier, a collective, or the edge of a runtime loop. Evacuations
are the instructions that end PSUM live ranges, so moving them up only shortens those.

The simulator still runs the program in its own order: tiles this schedule fits but
program order does not are simulated outside PSUM (nki/jit/allocate.py), values exact.
"""

from __future__ import annotations

import itertools

from nki.ir.nodes import Access, Instr
from nki.ir.ops import Opcode, ReduceCmd
from nki.ir.types import Memory
from nki.jit.liveness import Liveness

Key = tuple[int, int]     # (anchor, program index): the order of the schedule

# instructions that may move: pure functions of their operands on an engine without state
# carried between instructions (no accumulator commands), memory in and memory out
_MOVABLE = frozenset((
    Opcode.TENSOR_COPY, Opcode.TENSOR_TENSOR, Opcode.TENSOR_SCALAR,
    Opcode.SCALAR_TENSOR_TENSOR, Opcode.TENSOR_REDUCE, Opcode.ACTIVATION,
    Opcode.RECIPROCAL, Opcode.EXPONENTIAL, Opcode.DMA_COPY))

# instructions nothing moves across: they order memory between cores or ranks
_FENCES = frozenset((Opcode.CORE_BARRIER, Opcode.SENDRECV, Opcode.COLLECTIVE,
                     Opcode.COLLECTIVE_V))


def _is_evacuation(instr: Instr, decls) -> bool:
    """Reads PSUM, writes no PSUM, and may be moved (see the module doc)."""
    if instr.opcode not in _MOVABLE or instr.hint("depends_on") or instr.attr("indirect"):
        return False
    if instr.attr("reduce_cmd", ReduceCmd.idle) != ReduceCmd.idle:
        return False
    if not all(isinstance(a, Access) and a.offset.is_const and a.partition.is_const
               for _, a in instr.reads + instr.writes):
        return False
    return any(decls[a.tensor].memory is Memory.PSUM for _, a in instr.reads) and \
        all(decls[a.tensor].memory is not Memory.PSUM for _, a in instr.writes)


def _runtime_loops(live: Liveness, index: int) -> tuple[int, ...]:
    return tuple(loop for loop, _ in live.frames[index] if loop in live.dyn)


def schedule_keys(live: Liveness) -> list[Key]:
    """Per instruction (program order), its place in the schedule of the module doc: sorting
    the instructions by these keys gives an order that keeps every dependency."""
    decls = live.decls
    last_write: dict[int, int] = {}   # tensor -> anchor of its last writer
    last_read: dict[int, int] = {}    # tensor -> largest anchor among its readers
    fence, context = 0, ()
    keys: list[Key] = []
    for index, instr in enumerate(live.instrs):
        loops = _runtime_loops(live, index) if live.dyn else ()
        if loops != context or instr.opcode in _FENCES:
            fence, context = index, loops
        if _is_evacuation(instr, decls):
            anchor = max([fence] + [last_write.get(a.tensor, 0) for _, a in instr.reads]
                         + [max(last_write.get(a.tensor, 0), last_read.get(a.tensor, 0))
                            for _, a in instr.writes])
        else:
            anchor = index
        keys.append((anchor, index))
        for _, a in instr.reads:
            last_read[a.tensor] = max(last_read.get(a.tensor, 0), anchor)
        for _, a in instr.writes:
            last_write[a.tensor] = anchor
    return keys


def reordered_ranges(live: Liveness, exact: dict[int, tuple[int, int]],
                     tensors: set[int]) -> dict[int, tuple[int, int]]:
    """First and last position of each of ``tensors`` in the schedule (positions 0..n-1),
    widened to whole runtime loops where ``exact`` widened it (nki/jit/liveness.py)."""
    keys = schedule_keys(live)
    position = [0] * len(keys)
    for rank, (_, index) in enumerate(sorted(keys)):
        position[index] = rank
    # the last position of the instructions up to each index: where a runtime loop ending
    # there ends in the schedule (its last instruction may have moved up inside it)
    reach = list(itertools.accumulate(position, max))
    ranges: dict[int, list[int]] = {}
    for index, instr in enumerate(live.instrs):
        for _, a in instr.reads + instr.writes:
            if a.tensor in tensors:
                span = ranges.setdefault(a.tensor, [position[index], position[index]])
                span[0], span[1] = min(span[0], position[index]), max(span[1], position[index])
    out = {}
    for tid, (lo, hi) in ranges.items():
        first, last = live.uses[tid]
        if exact[tid] != (first, last):          # kept live across a runtime loop
            lo, hi = min(lo, position[exact[tid][0]]), max(hi, reach[exact[tid][1]])
        out[tid] = (lo, hi)
    return out
