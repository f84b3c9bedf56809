"""Placement: give every tensor an address.

Runs on the traced program before rerolling, when every tensor instance and every use is
explicit (liveness: nki/jit/liveness.py). Whether what is live fits is decided apart, by
nki/jit/capacity.py, on exact live ranges; this module only packs:

* SBUF and PSUM tensors get (partition 0, byte offset) by first fit over our placement's
  live ranges, PSUM ones inside a single 2 KiB bank. First fit over a free list is
  deterministic, so a tile allocated in every iteration of a loop lands at the same address
  each time, which is what lets the reroll pass fold the loop.
* When first fit fails, it is retried on exact live ranges (first to last use, as NKI's
  linear allocator frees a tile after its last read); first fit still gives a tile the same
  address in iterations that look alike, so loops mostly still fold.
* SBUF tensors the capacity check spilled, and SBUF tensors neither packing could place
  (fragmentation: ``NkiFragmentationWarning``), are simulated in overflow pages: copies of
  the SBUF's 128 partitions laid after it in the simulator's arena (partitions 128..255,
  256..383, ...), so every instruction reads them as usual and values stay exact.
* PSUM tensors that do not fit in program order but do in a compiler's schedule (each
  evacuation moved up to the instruction it depends on, nki/jit/reorder.py) go to PSUM
  overflow pages the same way, with an ``NkiFragmentationWarning``; PSUM that fits in
  neither is an error (PSUM spills are not modelled).
* HBM tensors are laid out one after another in the HBM arena.
"""

from __future__ import annotations

import heapq
import warnings
from dataclasses import replace

from nki.errors import NkiCapacityError, NkiError, NkiFragmentationWarning, fail
from nki.ir.nodes import Program, TensorDecl
from nki.ir.target import Target
from nki.ir.types import Memory
from nki.jit.capacity import META_KEY, check_capacity
from nki.jit.liveness import Liveness, exact_ranges, live_ranges, walk_program
from nki.jit.reorder import reordered_ranges

HBM_ALIGN = 64
SBUF_ALIGN = 4
ROWS_KEY = "sbuf_rows"   # meta: partitions of the simulated SBUF arena, overflow pages included
PSUM_ROWS_KEY = "psum_rows"   # the same for the PSUM arena

Ranges = dict[int, tuple[int, int]]


class _FreeList:
    """First-fit allocator over [0, size) with sorted free intervals."""

    def __init__(self, size: int):
        self.free = [(0, size)]

    def take(self, nbytes: int, align: int, bank: int = 0,
             avoid: list[tuple[int, int]] = ()) -> int | None:
        """The lowest aligned start of ``nbytes`` free bytes that stay inside one ``bank``
        (when given; a tile larger than a bank starts on a bank boundary instead) and
        overlap none of the ``avoid`` byte ranges; taken out of the list."""
        if bank and nbytes > bank:
            align, bank = max(align, bank), 0
        for i, (lo, hi) in enumerate(self.free):
            start = -(-lo // align) * align
            while start + nbytes <= hi:
                if bank and start + nbytes > (start // bank + 1) * bank:
                    start = (start // bank + 1) * bank     # must not cross a PSUM bank
                    continue
                clash = max((e for s, e in avoid if s < start + nbytes and start < e),
                            default=None) if avoid else None
                if clash is None:
                    pieces = [(lo, start)] if start > lo else []
                    if start + nbytes < hi:
                        pieces.append((start + nbytes, hi))
                    self.free[i:i + 1] = pieces
                    return start
                start = -(-clash // align) * align
        return None

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


def _size(d: TensorDecl) -> int:
    return max(d.bytes_per_partition, 1)


def _first_fit(autos: list[TensorDecl], ranges: Ranges, size: int, bank: int,
               users: list[TensorDecl]) -> tuple[dict[int, int], list[tuple[int, list[int]]]]:
    """Online first fit of ``autos`` over [0, size), in order of first use, keeping off the
    bytes of the ``address=`` tensors (``users``) live at the same time on the same
    partitions. Returns the byte offsets placed and, per tensor that did not fit, the ids
    of the tensors live when it was tried."""
    free, placed, failed = _FreeList(size), {}, []
    sizes = {d.id: _size(d) for d in autos}
    ends: list[tuple[int, int]] = []
    for d in sorted(autos, key=lambda d: (ranges[d.id][0], d.id)):
        lo, hi = ranges[d.id]
        while ends and ends[0][0] < lo:
            _, gone = heapq.heappop(ends)
            free.give(placed[gone], sizes[gone])
        clashing = [u for u in users if ranges[u.id][0] <= hi and lo <= ranges[u.id][1]
                    and u.address[0] < d.partitions]
        addr = free.take(sizes[d.id], SBUF_ALIGN, bank,
                         [(u.address[1], u.address[1] + _size(u)) for u in clashing])
        if addr is None:
            failed.append((d.id, [t for _, t in ends] + [u.id for u in clashing]))
            continue
        placed[d.id] = addr
        heapq.heappush(ends, (hi, d.id))
    return placed, failed


def _pack(program: Program, target: Target, memory: Memory, ranges: Ranges, exact: Ranges,
          skip: frozenset[int]) -> tuple[dict[int, int], list[tuple[int, list[int]]]]:
    """First fit on our ranges; if some tensor does not fit, first fit on exact ranges,
    kept when it places more. Returns offsets and the failures of the packing kept."""
    by_id = program._by_id()     # a dict, not program.tensor() per tile instance
    decls = [d for d in (by_id[t] for t in ranges) if d.memory is memory]
    users, autos = _by_placement(decls, skip)
    size, bank = _capacity(target, memory)
    placed, failed = _first_fit(autos, ranges, size, bank, users)
    if failed:
        tight = {d.id: exact[d.id] for d in decls}
        placed2, failed2 = _first_fit(autos, tight, size, bank, users)
        if len(failed2) < len(failed):
            placed, failed = placed2, failed2
    return placed, failed


def _by_placement(decls: list[TensorDecl], skip: frozenset[int] = frozenset()
                  ) -> tuple[list[TensorDecl], list[TensorDecl]]:
    """(tensors placed with ``address=``, tensors first fit places, less ``skip``)."""
    return ([d for d in decls if d.user_address],
            [d for d in decls if not d.user_address and d.id not in skip])


def _capacity(target: Target, memory: Memory) -> tuple[int, int]:
    """(bytes per partition, bank bytes or 0) of an on-chip memory."""
    if memory is Memory.SBUF:
        return target.sbuf_bytes_per_partition, 0
    return target.psum_bytes_per_partition, target.psum_bank_bytes


def _fits_reordered(program: Program, target: Target, live: Liveness, exact: Ranges) -> bool:
    """Whether every PSUM tensor fits when each evacuation runs as early as its dependencies
    allow (nki/jit/reorder.py), as a compiler's scheduler may run it."""
    by_id = program._by_id()
    psum = {t for t in exact if by_id[t].memory is Memory.PSUM}
    moved = reordered_ranges(live, exact, psum)
    users, autos = _by_placement([by_id[t] for t in sorted(psum)])
    size, bank = _capacity(target, Memory.PSUM)
    return not _first_fit(autos, moved, size, bank, users)[1]


def _overflow_pages(decls: list[TensorDecl], ranges: Ranges, target: Target,
                    memory: Memory = Memory.SBUF) -> tuple[dict[int, tuple[int, int]], int]:
    """First fit of tensors simulated outside the capacity into overflow pages (each another
    128 partitions of the memory's bytes, PSUM tiles inside one bank as usual); returns
    their addresses and the page count."""
    size, bank = _capacity(target, memory)
    pages: list[_FreeList] = []
    ends: list[tuple[int, int, int]] = []
    placed: dict[int, tuple[int, int]] = {}
    sizes = {d.id: _size(d) for d in decls}
    for d in sorted(decls, key=lambda d: (ranges[d.id][0], d.id)):
        lo, hi = ranges[d.id]
        while ends and ends[0][0] < lo:
            _, gone, page = heapq.heappop(ends)
            pages[page].give(placed[gone][1], sizes[gone])
        page, addr = 0, None
        while addr is None:
            if page == len(pages):
                # the capacity checks let no tensor larger than a partition through
                assert sizes[d.id] <= size, d
                pages.append(_FreeList(size))
            addr = pages[page].take(sizes[d.id], SBUF_ALIGN, bank)
            page += addr is None
        placed[d.id] = ((page + 1) * target.pmax, addr)
        heapq.heappush(ends, (hi, d.id, page))
    return placed, len(pages)


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
            placed[t.id] = _placed_at(t, (0, top))
            top += _hbm_size(t)
    top = top if private_base is None else max(top, private_base)
    for t in program.tensors:
        if _is_core_private(t):
            placed[t.id] = _placed_at(t, (0, top))
            top += _hbm_size(t)
    return placed, top


def _placed_at(t: TensorDecl, address: tuple[int, int]) -> TensorDecl:
    """``t`` at ``address`` (the constructor, not dataclasses.replace: once per tile
    instance of the unrolled trace)."""
    return TensorDecl(t.id, t.name, t.memory, t.shape, t.dtype, t.role, t.loc, address,
                      t.user_address, t.site)


def allocate(program: Program, target: Target, private_base: int | None = None, *,
             spill: bool = True, linear: bool = False) -> Program:
    """Place every tensor.

    ``spill``: whether the allocator being modelled spills SBUF tensors to HBM when more is
    live than fits (neuronx-cc: the legacy dialect, the current one by default) or refuses
    (NKI's linear allocator without ``nki_alloc_fallback``); see nki/jit/capacity.py.
    ``linear``: place as ``Allocation.LINEAR`` does, by exact live ranges (a tile takes its
    address at its first use and gives it back after its last), not our loop-friendly ones.
    ``private_base``: where this core's private HBM scratch starts (LNC launches give each
    core its own range, see ``nki.jit.specialize.specialize_cores``). Raises
    ``NkiCapacityError`` when no allocator could fit the live tensors, or PSUM does not fit.

    Example:
        >>> placed = allocate(traced_program, TRN2)                  # doctest: +SKIP
        >>> placed.tensor(tile_id).address                           # doctest: +SKIP
        (0, 4096)
    """
    live = walk_program(program)
    exact = exact_ranges(live)
    ranges = exact if linear else live_ranges(live)
    plan = check_capacity(program, target, live, exact, spill=spill)
    spilled = plan.tensor_ids if plan else frozenset()
    placed, hbm_top = _place_hbm(program, private_base)
    by_id = program._by_id()     # a dict, not program.tensor() per tile instance
    for t in ranges:
        if by_id[t].user_address:
            placed[t] = by_id[t]
    outside = {Memory.SBUF: [by_id[t] for t in sorted(spilled)], Memory.PSUM: []}
    for memory in (Memory.SBUF, Memory.PSUM):
        offsets, failed = _pack(program, target, memory, ranges, exact, spilled)
        placed.update([(t, _placed_at(by_id[t], (0, a))) for t, a in offsets.items()])
        if failed and memory is Memory.PSUM and not _fits_reordered(program, target, live,
                                                                      exact):
            raise _capacity_error(program, failed[0], target)
        if failed:
            _warn_fragmented(program, target, failed, memory)
            outside[memory] += [program.tensor(t) for t, _ in failed]
    rows = {}
    for memory, decls in outside.items():
        pages, npages = _overflow_pages(decls, ranges, target, memory)
        placed.update((t, _placed_at(program.tensor(t), a)) for t, a in pages.items())
        rows[memory] = target.pmax * (1 + npages)
    tensors = tuple(placed.get(t.id, t) for t in program.tensors)
    meta = (("hbm_bytes", hbm_top), (ROWS_KEY, rows[Memory.SBUF]),
            (PSUM_ROWS_KEY, rows[Memory.PSUM]))
    if plan is not None:
        meta += ((META_KEY, plan),)
    return replace(program, tensors=tensors, meta=program.meta + meta)


def _warn_fragmented(program: Program, target: Target, failed, memory: Memory) -> None:
    """SBUF: the live bytes fit (the capacity check passed), but our packings did not.
    PSUM: they fit only in a schedule that moves evacuations up (nki/jit/reorder.py)."""
    decls = [program.tensor(t) for t, _ in failed]
    names = ", ".join(f"{d.user_name} ({d.bytes_per_partition} B/partition, created at "
                      f"{d.loc})" for d in decls[:6])
    more = f" and {len(decls) - 6} more" if len(decls) > 6 else ""
    if memory is Memory.SBUF:
        code = "nki_sbuf_fragmented"
        detail = (f"SBUF on {target.name}: the live tensors fit the "
                  f"{target.sbuf_bytes_per_partition} B/partition at every instruction, but "
                  f"first fit left no contiguous room for {len(decls)} of them: {names}"
                  f"{more}. They are simulated outside the SBUF (values stay exact); a "
                  "compiler with another packing may fit them, or fail like this one. "
                  "Allocating the largest tiles first, or fewer sizes, avoids the gaps.")
    else:
        code = "nki_psum_reordered"
        detail = (f"PSUM on {target.name}: in program order more PSUM tiles are live than "
                  f"its {target.psum_banks} banks hold; they fit when each tile is read out "
                  "right after the last instruction it depends on, as a compiler's scheduler "
                  f"may order them. {len(decls)} are simulated outside PSUM (values stay "
                  f"exact): {names}{more}. Reading each tile before accumulating the next "
                  "does not depend on the scheduler.")
    loc = decls[0].loc
    warnings.warn_explicit(str(NkiError(code, detail, loc)),
                           NkiFragmentationWarning, loc.filename if loc else "nki",
                           loc.lineno if loc else 0)


def _capacity_error(program: Program, failure: tuple[int, list[int]],
                    target: Target) -> NkiCapacityError:
    tid, live = failure
    t = program.tensor(tid)
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
              + ("\n  (Also when each PSUM tile is read out as early as its dependencies "
                 "allow, as a compiler's scheduler may.)" if mem is Memory.PSUM else "")
              + "\n  Use smaller tiles, or allocate tiles inside the loop that uses them so "
                "they are reused across iterations.")
    return fail(code, detail, t.loc, NkiCapacityError)
