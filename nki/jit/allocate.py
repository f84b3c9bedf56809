"""Placement: give every tensor an address, and check that what is live fits.

Runs on the traced program before rerolling, when every tensor instance and every use is
explicit, so liveness is exact: a tensor is live from its first to its last use in program
order. SBUF tensors get (partition 0, byte offset) by first fit; PSUM tensors are placed
inside a single 2 KiB bank; HBM tensors are laid out one after another in the HBM arena.
First fit over a free list is deterministic, so a tile allocated in every iteration of a loop
lands at the same address each time, which is what lets the reroll pass fold the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from nki.errors import NkiCapacityError, fail
from nki.ir.nodes import DYN_LOOPS, Instr, Program, RecordedLoop, TensorDecl
from nki.ir.target import Target
from nki.ir.types import Memory

HBM_ALIGN = 64
SBUF_ALIGN = 4


Frame = tuple[tuple[int, int], ...]   # the (loop, iteration) pairs around a statement


@dataclass
class _Walk:
    """What one pass over the unrolled trace learns, by instruction index (program order)."""

    uses: dict[int, tuple[int, int]] = field(default_factory=dict)  # tid -> first, last use
    frames: list[Frame] = field(default_factory=list)               # per instruction
    spans: list[list[int]] = field(default_factory=list)            # per loop: first, last
    dyn: set[int] = field(default_factory=set)                      # runtime loops
    born: dict[int, tuple[Frame, int]] = field(default_factory=dict)
    """tid -> (frame it was created in, last instruction of that iteration) for tensors
    created inside a recorded loop (``RecordedLoop.tensors``); the rest were created outside
    every recorded loop."""

    def visit(self, stmts, frame: Frame) -> None:
        for stmt in stmts:
            if isinstance(stmt, (RecordedLoop, *DYN_LOOPS)):
                loop = len(self.spans)
                self.spans.append([len(self.frames), len(self.frames)])
                if isinstance(stmt, RecordedLoop):
                    for k, body in enumerate(stmt.iterations):
                        self.visit(body, frame + ((loop, k),))
                        made = stmt.tensors[k] if k < len(stmt.tensors) else ()
                        for tid in made:
                            self.born[tid] = (frame + ((loop, k),), len(self.frames) - 1)
                else:
                    self.dyn.add(loop)
                    self.visit(stmt.body, frame + ((loop, 0),))
                self.spans[loop][1] = len(self.frames) - 1
            elif isinstance(stmt, Instr):
                index = len(self.frames)
                for _, acc, _ in stmt.accesses():
                    lo, hi = self.uses.get(acc.tensor, (index, index))
                    self.uses[acc.tensor] = (min(lo, index), max(hi, index))
                self.frames.append(frame)


def live_ranges(program: Program) -> dict[int, tuple[int, int]]:
    """First and last statement index (in unrolled order) during which each tensor is live.

    A tensor is live from its first to its last use, with two exceptions, both about loops:

    * A tensor used inside a loop that it was created before stays live for that whole loop
      (as a compiler keeps a loop-invariant value): freeing it after its last use, or
      placing it only at its first use, would share its bytes with tiles of other
      iterations. Those iterations would then be laid out differently (and could not be
      folded), and the iterations of an ``affine_range``, which may run in parallel, would
      write the same bytes. What matters is where the tensor was *created*, which may be
      an earlier loop than its first use (a tile made in one loop and first written in the
      next): such a tensor is live from its creation.
    * A runtime loop (``DynFor``/``DynWhile``) was traced once but runs many times: every
      tensor its body touches is live for the whole loop, so no two of them share bytes."""
    walk = _Walk()
    walk.visit(program.body, ())
    made_by = _creation_bounds(walk.uses)
    ranges = {}
    for tid, (lo, hi) in walk.uses.items():
        born, it_end = walk.born.get(tid, ((), lo))
        if born != walk.frames[lo]:        # created in another iteration or outside a loop
            lo = min(lo, made_by[tid], it_end, _entry_of(walk, born, walk.frames[lo]))
            lo = max(lo, 0)
        lo, hi = _widen_for_runtime_loops(walk, lo, hi)
        outer = {loop for loop, _ in born}
        for loop, _ in walk.frames[hi]:
            if loop not in outer:          # created before this loop: live to its end
                hi = max(hi, walk.spans[loop][1])
        ranges[tid] = (lo, hi)
    return ranges


def linear_ranges(program: Program) -> dict[int, tuple[int, int]]:
    """Live ranges of ``Allocation.LINEAR`` (NKI's linear scan): a tile takes its address at
    its first write (its first use: a read before any write reads fresh memory, and the
    sentinel fill before it is that write), not where it was created, and keeps it through
    its last use. On hardware its last read ends it; a write after that read (a dead write)
    is kept inside the range so it never lands on another tile's bytes. Unlike the default
    placement, a tile created before a loop neither starts at its creation nor stays live
    to the loop's end. A runtime loop's body runs many times, so every tile it touches
    stays live for the whole loop, as in the default placement."""
    walk = _Walk()
    walk.visit(program.body, ())
    return {tid: _widen_for_runtime_loops(walk, lo, hi) for tid, (lo, hi) in walk.uses.items()}


def _widen_for_runtime_loops(walk: _Walk, lo: int, hi: int) -> tuple[int, int]:
    """A range touching a runtime loop's body covers the whole loop (it runs many times)."""
    for loop, _ in walk.frames[lo] + walk.frames[hi]:
        if loop in walk.dyn:
            lo, hi = min(lo, walk.spans[loop][0]), max(hi, walk.spans[loop][1])
    return lo, hi


def _creation_bounds(uses: dict[int, tuple[int, int]]) -> dict[int, int]:
    """An upper bound on where each tensor was created: the trace numbers tensors in
    creation order, so a tensor exists before any later-numbered tensor is first used."""
    bounds, soonest = {}, None
    for tid in sorted(uses, reverse=True):
        first = uses[tid][0]
        soonest = first if soonest is None else min(soonest, first)
        bounds[tid] = soonest
    return bounds


def _entry_of(walk: _Walk, born: Frame, used: Frame) -> int:
    """The first instruction of the outermost loop around ``used`` that the tensor was
    created outside of, else a large number. (Created in an earlier iteration of a loop
    around ``used``: the end of that iteration bounds the creation better.)"""
    common = 0
    while common < min(len(born), len(used)) and born[common] == used[common]:
        common += 1
    if common == len(used) or (common < len(born) and born[common][0] == used[common][0]):
        return len(walk.frames)
    return walk.spans[used[common][0]][0]


class _FreeList:
    """First-fit allocator over [0, size) with sorted free intervals."""

    def __init__(self, size: int):
        self.free = [(0, size)]

    def take(self, nbytes: int, align: int, limit_in_bank: int = 0) -> int | None:
        for i, (lo, hi) in enumerate(self.free):
            start = -(-lo // align) * align
            if limit_in_bank:  # must not cross a PSUM bank boundary
                bank_end = (start // limit_in_bank + 1) * limit_in_bank
                if start + nbytes > bank_end:
                    start = bank_end
            if start + nbytes <= hi:
                pieces = [(lo, start)] if start > lo else []
                if start + nbytes < hi:
                    pieces.append((start + nbytes, hi))
                self.free[i:i + 1] = pieces
                return start
        return None

    def reserve(self, start: int, nbytes: int) -> None:
        """Take ``[start, start+nbytes)`` out of the free list (a tensor placed by address=)."""
        out = []
        for lo, hi in self.free:
            if hi <= start or lo >= start + nbytes:
                out.append((lo, hi))
                continue
            if lo < start:
                out.append((lo, start))
            if hi > start + nbytes:
                out.append((start + nbytes, hi))
        self.free = out

    def give(self, start: int, nbytes: int) -> None:
        self.free.append((start, start + nbytes))
        self.free.sort()
        merged = [self.free[0]]
        for lo, hi in self.free[1:]:
            if lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        self.free = merged


def _is_core_private(t: TensorDecl) -> bool:
    """A core's own HBM scratch (each LNC core has its own copy on hardware)."""
    return t.memory is Memory.PRIVATE_HBM and t.role == "internal"


def _hbm_size(t: TensorDecl) -> int:
    return -(-max(t.free_size * t.dtype.itemsize, 1) // HBM_ALIGN) * HBM_ALIGN


def hbm_footprint(program: Program) -> tuple[int, int]:
    """(bytes of HBM tensors the cores share, bytes of this core's private scratch)."""
    shared = sum(_hbm_size(t) for t in program.tensors
                 if t.memory.is_hbm and not _is_core_private(t))
    private = sum(_hbm_size(t) for t in program.tensors if _is_core_private(t))
    return shared, private


def _place_hbm(program: Program, private_base: int | None) -> tuple[dict, int]:
    """HBM addresses: the shared tensors (inputs, outputs, constants, shared scratch) from 0
    in creation order — the same in every core's trace — then this core's private scratch
    from ``private_base`` (by default right after the shared ones)."""
    placed, top = {}, 0
    for t in program.tensors:
        if t.memory.is_hbm and not _is_core_private(t):
            placed[t.id] = replace(t, address=(0, top))
            top += _hbm_size(t)
    top = top if private_base is None else max(top, private_base)
    for t in program.tensors:
        if _is_core_private(t):
            placed[t.id] = replace(t, address=(0, top))
            top += _hbm_size(t)
    return placed, top


def allocate(program: Program, target: Target, private_base: int | None = None,
             linear: bool = False) -> Program:
    """Place every tensor; raises NkiCapacityError when live tensors do not fit.

    ``private_base``: where this core's private HBM scratch starts (LNC launches give each
    core its own range, see ``nki.jit.specialize.specialize_cores``). ``linear``: place by
    the live ranges of ``Allocation.LINEAR`` (:func:`linear_ranges`)."""
    ranges = linear_ranges(program) if linear else live_ranges(program)
    placed, hbm_top = _place_hbm(program, private_base)
    events = sorted((r[0], 0, tid) for tid, r in ranges.items()
                    if program.tensor(tid).memory.on_chip)
    ends = sorted((r[1], tid) for tid, r in ranges.items()
                  if program.tensor(tid).memory.on_chip)
    pools = {Memory.SBUF: _FreeList(target.sbuf_bytes_per_partition),
             Memory.PSUM: _FreeList(target.psum_bytes_per_partition)}
    live: dict[int, int] = {}
    end_i = 0
    for start, _, tid in events:
        while end_i < len(ends) and ends[end_i][0] < start:
            gone = ends[end_i][1]
            end_i += 1
            if gone in live:
                t = program.tensor(gone)
                pools[t.memory].give(live.pop(gone), t.bytes_per_partition)
        t = program.tensor(tid)
        if t.user_address:   # placed by the user: keep automatic tiles off its bytes
            pools[t.memory].reserve(t.address[1], t.bytes_per_partition)
            live[tid] = t.address[1]
            placed[tid] = t
            continue
        bank = target.psum_bank_bytes if t.memory is Memory.PSUM else 0
        addr = pools[t.memory].take(max(t.bytes_per_partition, 1), SBUF_ALIGN, bank)
        if addr is None:
            raise _capacity_error(program, t, live, target)
        live[tid] = addr
        placed[tid] = replace(t, address=(0, addr))
    tensors = tuple(placed.get(t.id, t) for t in program.tensors)
    return replace(program, tensors=tensors, meta=program.meta + (("hbm_bytes", hbm_top),))


def _capacity_error(program: Program, t: TensorDecl, live: dict[int, int],
                    target: Target) -> NkiCapacityError:
    mem = t.memory
    cap = (target.sbuf_bytes_per_partition if mem is Memory.SBUF
           else target.psum_bytes_per_partition)
    others = sorted((program.tensor(i) for i in live if program.tensor(i).memory is mem),
                    key=lambda d: -d.bytes_per_partition)
    used = sum(d.bytes_per_partition for d in others)
    lines = [f"  {d.name}: {d.bytes_per_partition} B/partition, created at {d.loc}"
             for d in others[:6]]
    code = "nki_sbuf_capacity_exceeded" if mem is Memory.SBUF else "nki_psum_capacity_exceeded"
    detail = (f"{mem.value.upper()} overflow on {target.name}: tensor {t.name!r} needs "
              f"{t.bytes_per_partition} B/partition while {used} of {cap} B/partition are live "
              f"(short by {used + t.bytes_per_partition - cap} B). Largest live tensors:\n"
              + "\n".join(lines)
              + "\n  Use smaller tiles, or allocate tiles inside the loop that uses them so "
                "they are reused across iterations.")
    return fail(code, detail, t.loc, NkiCapacityError)
