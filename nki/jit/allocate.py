"""Placement: give every tensor an address, and check that what is live fits.

Runs on the traced program before rerolling, when every tensor instance and every use is
explicit, so liveness is exact: a tensor is live from its first to its last use in program
order. SBUF tensors get (partition 0, byte offset) by first fit; PSUM tensors are placed
inside a single 2 KiB bank; HBM tensors are laid out one after another in the HBM arena.
First fit over a free list is deterministic, so a tile allocated in every iteration of a loop
lands at the same address each time, which is what lets the reroll pass fold the loop.
"""

from __future__ import annotations

from dataclasses import replace

from nki.errors import NkiCapacityError, fail
from nki.ir.nodes import DYN_LOOPS, Instr, Program, RecordedLoop, TensorDecl
from nki.ir.target import Target
from nki.ir.types import Memory

HBM_ALIGN = 64
SBUF_ALIGN = 4


def live_ranges(program: Program) -> dict[int, tuple[int, int]]:
    """First and last statement index (in unrolled order) that touch each tensor.

    A tensor used inside a loop that it was created before stays live until that loop ends
    (as a compiler keeps a loop-invariant value): freeing it after its last use in the last
    iteration would hand its bytes to that iteration's tiles, so the last iteration would be
    laid out differently and could not be folded with the others.

    A runtime loop (``DynFor``/``DynWhile``) was traced once but runs many times: every
    tensor its body touches is live for the whole loop, so no two of them share bytes."""
    ranges: dict[int, tuple[int, int]] = {}
    dyn: set[int] = set()                    # spans of runtime loops
    loops_at: list[tuple[int, ...]] = []     # per instruction: the loops around it
    spans: list[list[int]] = []              # per loop: [first, last] instruction index
    counter = [0]

    def visit(stmts, stack: tuple[int, ...]) -> None:
        for stmt in stmts:
            if isinstance(stmt, (RecordedLoop, *DYN_LOOPS)):
                spans.append([counter[0], counter[0]])
                inner = stack + (len(spans) - 1,)
                if isinstance(stmt, RecordedLoop):
                    for it in stmt.iterations:
                        visit(it, inner)
                else:
                    dyn.add(inner[-1])
                    visit(stmt.body, inner)
                spans[inner[-1]][1] = counter[0] - 1
            elif isinstance(stmt, Instr):
                index = counter[0]
                for _, acc, _ in stmt.accesses():
                    lo, hi = ranges.get(acc.tensor, (index, index))
                    ranges[acc.tensor] = (min(lo, index), max(hi, index))
                loops_at.append(stack)
                counter[0] += 1

    visit(program.body, ())
    for tid, (lo, hi) in ranges.items():
        for loop in loops_at[lo] + loops_at[hi]:
            if loop in dyn:
                lo, hi = min(lo, spans[loop][0]), max(hi, spans[loop][1])
        for loop in loops_at[hi]:
            if spans[loop][0] > lo:
                hi = max(hi, spans[loop][1])
        ranges[tid] = (lo, hi)
    return ranges


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


def allocate(program: Program, target: Target, private_base: int | None = None) -> Program:
    """Place every tensor; raises NkiCapacityError when live tensors do not fit.

    ``private_base``: where this core's private HBM scratch starts (LNC launches give each
    core its own range, see ``nki.jit.specialize.specialize_cores``)."""
    ranges = live_ranges(program)
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
