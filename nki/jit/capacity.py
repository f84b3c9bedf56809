"""Capacity: whether the live SBUF tensors fit, apart from where we place them.

A compiler fails to place a kernel's tiles for one of two reasons. Either more bytes are live
at some instruction than a partition holds, which no allocator can get around, or its packing
leaves the free bytes in pieces too small (fragmentation), which another packing may avoid.
Only the first is a property of the program, so only the first is checked here: on exact
live ranges (first use to last use in the unrolled trace, nki/jit/liveness.py), per range of
partitions (a 32-partition tile fills 32 partitions, not 128). Our placement's packing is
nki/jit/allocate.py's business, and never raises for SBUF.

When more is live than fits, what happens depends on who allocates (docs: the memory
hierarchy overview; the NKI compile-configuration deep dive):

* neuronx-cc (the legacy ``neuronxcc.nki`` dialect, and the current one by default,
  ``CompileConfig(allocation=Allocation.COLORING)``, or ``LINEAR`` with
  ``nki_alloc_fallback=True``) "will insert the necessary spills or refills": a tensor not
  needed for a while is stored to an HBM scratch region and reloaded before its next use.
  :func:`check_capacity` chooses the spills (``spill=True``), warns with
  ``NkiSpillWarning`` naming the tensors and bytes, and returns a :class:`SpillPlan`, the
  record a cost model charges the DMAs from. The simulator keeps the values exact (a spilled
  tensor is simulated outside the SBUF capacity, see allocate.py), so results are unchanged.
* NKI's own linear allocator without fallback (``spill=False``) refuses: the error names
  the tensor that did not fit and the largest live ones.
* Tensors placed with ``address=`` (direct allocation) are the kernel's, never spilled.

Whatever the allocator, an instruction whose own operands (with the tensors that cannot be
spilled) exceed a partition cannot run: ``nki_sbuf_capacity_exceeded``.
"""

from __future__ import annotations

import bisect
import heapq
import warnings
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from nki.errors import NkiCapacityError, NkiError, NkiSpillWarning, SourceLoc, fail
from nki.ir.nodes import Program, TensorDecl
from nki.ir.target import Target
from nki.ir.types import Memory
from nki.jit.liveness import Liveness
from nki.jit.values import apply_value_liveness

META_KEY = "spills"


@dataclass(frozen=True)
class SpillPoint:
    """An instruction a spill DMA runs next to: its index in the unrolled trace (program
    order, as ``nki.jit.liveness`` counts) and its source line."""

    instr: int
    loc: SourceLoc | None


@dataclass(frozen=True)
class Spill:
    """One SBUF tensor a compiler keeps in HBM scratch between some of its uses.

    ``stores`` are the instructions after which its bytes are copied to HBM (only when it
    was written since the last store), ``reloads`` those before which they are copied back
    (before every use after a spilled gap, also one that overwrites the whole tile: an upper
    bound on the DMAs).

    Example:
        >>> s.dma_bytes == s.transfer_bytes * (len(s.stores) + len(s.reloads))  # doctest: +SKIP
        True
    """

    tensor: int
    name: str
    loc: SourceLoc | None          # where the kernel created the tensor
    partitions: int
    bytes_per_partition: int
    stores: tuple[SpillPoint, ...]
    reloads: tuple[SpillPoint, ...]

    @property
    def transfer_bytes(self) -> int:
        """Bytes one store or one reload moves."""
        return self.partitions * self.bytes_per_partition

    @property
    def dma_bytes(self) -> int:
        return self.transfer_bytes * (len(self.stores) + len(self.reloads))


@dataclass(frozen=True)
class SpillPlan:
    """Every spill of one core's program (``dict(program.meta)["spills"]`` once placed).

    Example:
        >>> plan = spill_plan(spec.cores[0].program)                 # doctest: +SKIP
        >>> plan.peak > plan.capacity, plan.dma_bytes                # doctest: +SKIP
        (True, 12582912)
    """

    memory: Memory
    capacity: int                  # B/partition the target has
    peak: int                      # B/partition live at the fullest instruction, unspilled
    peak_at: SpillPoint
    spills: tuple[Spill, ...]

    @property
    def tensor_ids(self) -> frozenset[int]:
        return frozenset(s.tensor for s in self.spills)

    @property
    def dma_bytes(self) -> int:
        """Bytes all spill stores and reloads move."""
        return sum(s.dma_bytes for s in self.spills)

    @property
    def scratch_bytes(self) -> int:
        """HBM scratch bytes: one slot per spilled tensor (an upper bound)."""
        return sum(s.transfer_bytes for s in self.spills)


def spill_plan(program: Program) -> SpillPlan | None:
    """The spills recorded on a placed program, or None when everything fit."""
    return dict(program.meta).get(META_KEY)


@dataclass
class _Item:
    """One SBUF tensor as the profile sees it."""

    decl: TensorDecl
    lo: int
    hi: int
    nbytes: int                    # B/partition it adds while live
    bands: np.ndarray              # the partition bands it covers
    spillable: bool


@dataclass
class _Profile:
    """Live bytes per instruction and partition band, and the tensors behind them."""

    items: list[_Item]
    live: np.ndarray               # (instructions, bands) int64
    capacity: int

    def over(self, index: int) -> np.ndarray:
        """The bands over capacity at instruction ``index``."""
        return np.flatnonzero(self.live[index] > self.capacity)


def check_capacity(program: Program, target: Target, live: Liveness,
                   exact: dict[int, tuple[int, int]], *, spill: bool = True) -> SpillPlan | None:
    """None when the live SBUF bytes fit at every instruction; else the spills a compiler
    makes (``spill=True``, with an ``NkiSpillWarning``), or ``nki_sbuf_capacity_exceeded``
    (``spill=False``, or when not even spilling fits).

    ``exact`` are first-to-last-use ranges (``nki.jit.liveness.exact_ranges``)."""
    profile = _profile(program, target, live, exact)
    if profile is None:
        return None
    dead: dict[int, set[int]] = {}
    if spill:                      # neuronx-cc allocates values, not tiles (nki/jit/values.py)
        dead = apply_value_liveness(profile.items, profile.live, live)
        if int(profile.live.max()) <= profile.capacity:
            return None
    peak_at = int(np.argmax(profile.live.max(axis=1)))
    peak = int(profile.live[peak_at].max())
    if not spill:
        raise _refusal(program, target, profile, live)
    spills = _choose_spills(profile, live, target, dead)
    plan = SpillPlan(Memory.SBUF, profile.capacity, peak,
                     SpillPoint(peak_at, live.instrs[peak_at].loc), spills)
    _warn(plan, target)
    return plan


def _profile(program: Program, target: Target, live: Liveness,
             exact: dict[int, tuple[int, int]]) -> _Profile | None:
    """The live-bytes profile, or None when it never exceeds the capacity (the common case:
    decided with a few array operations, whatever the number of tensors)."""
    cap = target.sbuf_bytes_per_partition
    by_id = program._by_id()     # a dict, not program.tensor() per tile instance
    decls = [d for d in (by_id[t] for t in exact)
             if d.memory is Memory.SBUF and d.bytes_per_partition > 0]
    if not decls or not live.frames:
        return None
    spans = [_partitions(d) for d in decls]
    edges = sorted({0, target.pmax, *(p for span in spans for p in span)})
    band_of = {p: k for k, p in enumerate(edges)}
    first = np.array([band_of[p0] for p0, _ in spans], np.int64)
    width = np.array([band_of[p1] for _, p1 in spans], np.int64) - first
    lo = np.array([exact[d.id][0] for d in decls], np.int64)
    hi = np.array([exact[d.id][1] for d in decls], np.int64)
    # one row per (tensor, band it covers): +bytes where it starts, -bytes after its end
    rows = np.repeat(np.arange(len(decls)), width)
    cols = first[rows] + (np.arange(len(rows)) - np.repeat(np.cumsum(width) - width, width))
    n = len(live.frames)

    def live_bytes(nbytes: np.ndarray) -> np.ndarray:
        diff = np.zeros((n + 1, len(edges) - 1), np.int64)
        np.add.at(diff, (lo[rows], cols), nbytes[rows])
        np.add.at(diff, (hi[rows] + 1, cols), -nbytes[rows])
        return np.cumsum(diff[:n], axis=0)

    # every tile at its full size bounds the counted bytes from above: most programs fit
    # with it, without asking which address= tiles alias others
    full = np.array([d.bytes_per_partition for d in decls], np.int64)
    profile = live_bytes(full)
    if int(profile.max()) <= cap:
        return None
    nbytes = np.array(_counted_bytes(decls, spans, exact), np.int64)
    if not np.array_equal(nbytes, full):       # some aliased window counted once
        profile = live_bytes(nbytes)
        if int(profile.max()) <= cap:
            return None
    items = [_Item(d, int(lo[k]), int(hi[k]), int(nbytes[k]),
                   np.arange(first[k], first[k] + width[k]), not d.user_address)
             for k, d in enumerate(decls)]
    return _Profile(items, profile, cap)


def _partitions(d: TensorDecl) -> tuple[int, int]:
    """The partitions a tile fills: from its ``address=`` partition, else from 0 (where
    our placement, and as far as AWS documents theirs, puts automatic tiles)."""
    p0 = d.address[0] if d.user_address and d.address is not None else 0
    return p0, p0 + d.partitions


def _counted_bytes(decls: list[TensorDecl], spans, exact) -> list[int]:
    """B/partition each tensor adds: its size, except an ``address=`` tile lying inside
    another ``address=`` tile live at least as long (a window the kernel aliases on purpose),
    which adds nothing: the bytes are counted once. Of two identical tiles the first one
    (larger first, then lower id) is the container."""
    counted = [d.bytes_per_partition for d in decls]
    users = [k for k, d in enumerate(decls) if d.user_address]
    if len(users) < 2:
        return counted
    # one column per user-address tile: sort key, byte window, partition span, live range
    size = np.array([decls[k].bytes_per_partition for k in users], np.int64)
    ident = np.array([decls[k].id for k in users], np.int64)
    a0 = np.array([decls[k].address[1] for k in users], np.int64)
    p0 = np.array([spans[k][0] for k in users], np.int64)
    p1 = np.array([spans[k][1] for k in users], np.int64)
    lo = np.array([exact[decls[k].id][0] for k in users], np.int64)
    hi = np.array([exact[decls[k].id][1] for k in users], np.int64)
    a1 = a0 + size
    for s in range(0, len(users), _CONTAIN_CHUNK):  # rows: candidates, columns: containers
        r = slice(s, s + _CONTAIN_CHUNK)
        first = (size[None, :] > size[r, None]) | \
            ((size[None, :] == size[r, None]) & (ident[None, :] < ident[r, None]))
        inside = (first & (a0[None, :] <= a0[r, None]) & (a1[r, None] <= a1[None, :])
                  & (p0[None, :] <= p0[r, None]) & (p1[r, None] <= p1[None, :])
                  & (lo[None, :] <= lo[r, None]) & (hi[r, None] <= hi[None, :]))
        for k in np.flatnonzero(inside.any(axis=1)):
            counted[users[s + k]] = 0
    return counted


_CONTAIN_CHUNK = 512          # rows of the containment matrix at once: 512 x n booleans


# ----- spilling ------------------------------------------------------------------------------

def _uses(profile: _Profile, live: Liveness) -> tuple[dict, dict]:
    """Per spillable tensor, the sorted instruction indices using it and those writing it.
    A tensor a runtime loop touches is not spillable: its uses repeat at run time."""
    wanted = {it.decl.id for it in profile.items if it.spillable}
    uses: dict[int, list[int]] = defaultdict(list)
    writes: dict[int, set[int]] = defaultdict(set)
    for i, ins in enumerate(live.instrs):
        for _, acc, is_write in ins.accesses():
            t = acc.tensor
            if t in wanted:
                if not uses[t] or uses[t][-1] != i:
                    uses[t].append(i)
                if is_write:
                    writes[t].add(i)
    for t in [t for t, u in uses.items() if any(live.in_runtime_loop(i) for i in u)]:
        del uses[t]
    return uses, writes


def _choose_spills(profile: _Profile, live: Liveness, target: Target,
                   dead: dict[int, set[int]]) -> tuple[Spill, ...]:
    """Greedy, in program order: at each instruction still over capacity, spill the gap
    between two uses (of a tensor live there but not used by it) whose next use is farthest
    away (Belady's choice), the larger tensor first on ties, until it fits."""
    uses, writes = _uses(profile, live)
    gaps: dict[int, set[int]] = defaultdict(set)      # item index -> spilled gap numbers
    order = sorted(range(len(profile.items)), key=lambda k: profile.items[k].lo)
    ends: list[tuple[int, int]] = []
    active: set[int] = set()
    nxt = 0
    for i in np.flatnonzero(profile.live.max(axis=1) > profile.capacity):
        i = int(i)
        while nxt < len(order) and profile.items[order[nxt]].lo <= i:
            active.add(order[nxt])
            heapq.heappush(ends, (profile.items[order[nxt]].hi, order[nxt]))
            nxt += 1
        while ends and ends[0][0] < i:
            active.discard(heapq.heappop(ends)[1])
        while len(over := profile.over(i)):
            best = _best_gap(profile, active, uses, gaps, i, over, dead)
            if best is None:
                resident = [profile.items[k] for k in active
                            if not _spilled_at(profile.items[k], uses, gaps.get(k, ()), i)]
                raise _unspillable(profile, resident, i, live, target)
            k, gap, _ = best
            item, u = profile.items[k], uses[profile.items[k].decl.id]
            profile.live[u[gap - 1] + 1:u[gap], item.bands] -= item.nbytes
            gaps[k].add(gap)
    return tuple(_spill_record(profile.items[k], uses[profile.items[k].decl.id],
                               writes[profile.items[k].decl.id], sorted(g), live)
                 for k, g in sorted(gaps.items(), key=lambda kv: profile.items[kv[0]].decl.id))


def _best_gap(profile: _Profile, active: set[int], uses: dict, gaps: dict, i: int,
              over: np.ndarray, dead: dict[int, set[int]]):
    """(item, gap number, score) of the best gap to spill at instruction ``i``, or None
    (a ``dead`` gap holds no value: its bytes are already free)."""
    best = None
    for k in active:
        item = profile.items[k]
        u = uses.get(item.decl.id)
        if u is None or not np.isin(item.bands, over).any():
            continue
        gap = bisect.bisect_right(u, i)
        if gap == 0 or gap == len(u) or u[gap - 1] == i or gap in gaps.get(k, ()) or \
                gap in dead.get(item.decl.id, ()):
            continue
        score = (u[gap], item.nbytes, -item.decl.id)
        if best is None or score > best[2]:
            best = (k, gap, score)
    return best


def _spilled_at(item: _Item, uses: dict, gaps, i: int) -> bool:
    u = uses.get(item.decl.id)
    return u is not None and bisect.bisect_right(u, i) in gaps and i not in u


def _spill_record(item: _Item, u: list[int], written: set[int], spilled: list[int],
                  live: Liveness) -> Spill:
    """Stores after the use before each spilled gap (if written since the last store),
    reloads before the use after it."""
    stores, reloads, dirty = [], [], False
    gaps = set(spilled)
    for j, index in enumerate(u):
        dirty = dirty or index in written
        if j + 1 in gaps:
            if dirty:
                stores.append(SpillPoint(index, live.instrs[index].loc))
                dirty = False
            reloads.append(SpillPoint(u[j + 1], live.instrs[u[j + 1]].loc))
    d = item.decl
    return Spill(d.id, d.user_name, d.loc, d.partitions, d.bytes_per_partition,
                 tuple(stores), tuple(reloads))


# ----- messages ------------------------------------------------------------------------------

def _live_at(profile: _Profile, i: int, band: int) -> list[_Item]:
    return sorted((it for it in profile.items if it.lo <= i <= it.hi and band in it.bands
                   and it.nbytes), key=lambda it: (-it.nbytes, it.decl.id))


def _listing(items: list[_Item]) -> str:
    return "\n".join(f"  {it.decl.user_name}: {it.nbytes} B/partition, created at "
                     f"{it.decl.loc}" for it in items[:6])


def _refusal(program: Program, target: Target, profile: _Profile,
             live: Liveness) -> NkiError:
    """The allocator that does not spill: the tensor whose first use went over, and the
    largest live tensors."""
    i = int(np.flatnonzero(profile.live.max(axis=1) > profile.capacity)[0])
    band = int(profile.over(i)[0])
    here = _live_at(profile, i, band)
    new = max((it for it in here if it.lo == i), key=lambda it: it.nbytes, default=here[0])
    others = [it for it in here if it is not new]
    used = sum(it.nbytes for it in others)
    cap = profile.capacity
    detail = (f"SBUF overflow on {target.name}: tensor {new.decl.user_name!r} needs "
              f"{new.nbytes} B/partition while {used} of {cap} B/partition are live (short by "
              f"{used + new.nbytes - cap} B), at {live.instrs[i].loc}; this allocator does "
              "not spill. Largest live tensors:\n" + _listing(others) +
              "\n  Use smaller tiles, free tiles sooner (allocate them inside the loop that "
              "uses them), or let neuronx-cc allocate, which spills.")
    return fail("nki_sbuf_capacity_exceeded", detail, new.decl.loc, NkiCapacityError)


def _unspillable(profile: _Profile, resident: list[_Item], i: int, live: Liveness,
                 target: Target) -> NkiError:
    """An instruction whose operands (and the tensors that cannot be spilled) do not fit."""
    band = int(profile.over(i)[0])
    here = sorted((it for it in resident if band in it.bands and it.nbytes and
                   it.lo <= i <= it.hi),
                  key=lambda it: (-it.nbytes, it.decl.id))
    need = int(profile.live[i, band])
    ins = live.instrs[i]
    detail = (f"SBUF overflow on {target.name}: the instruction at {ins.loc} needs {need} of "
              f"{profile.capacity} B/partition at once (its operands, and tensors placed with "
              "address= or used in a runtime loop, which are never spilled); no allocator "
              "fits it, even spilling everything else to HBM. Largest of them:\n"
              + _listing(here) + "\n  Use smaller tiles.")
    return fail("nki_sbuf_capacity_exceeded", detail, ins.loc, NkiCapacityError)


def _warn(plan: SpillPlan, target: Target) -> None:
    """One ``NkiSpillWarning`` per program, tensors grouped by where they were created."""
    groups: dict = defaultdict(list)
    for s in plan.spills:
        groups[(s.name, s.loc)].append(s)
    parts = []
    for (name, loc), ss in sorted(groups.items(), key=lambda kv: -sum(s.dma_bytes
                                                                     for s in kv[1])):
        many = f" x{len(ss)} tiles" if len(ss) > 1 else ""
        parts.append(f"  {name} (created at {loc}){many}: {ss[0].bytes_per_partition} "
                     f"B/partition x {ss[0].partitions} partitions, "
                     f"{sum(len(s.stores) for s in ss)} stores and "
                     f"{sum(len(s.reloads) for s in ss)} reloads")
    detail = (f"SBUF on {target.name}: {plan.peak} B/partition are live at "
              f"{plan.peak_at.loc}, over the {plan.capacity} it has. Like neuronx-cc, the "
              f"simulation spills {len(plan.spills)} tensor(s) to an HBM scratch region "
              f"between uses and reloads them ({_mib(plan.dma_bytes)} of spill DMA; values "
              "stay exact):\n" + "\n".join(parts[:8]) +
              (f"\n  ... and {len(parts) - 8} more" if len(parts) > 8 else "") +
              "\n  Smaller tiles, or fusing the loops that use them, avoid it.")
    loc = plan.peak_at.loc
    text = str(NkiError("nki_sbuf_spill", detail, loc))
    warnings.warn_explicit(text, NkiSpillWarning, loc.filename if loc else "nki",
                           loc.lineno if loc else 0)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB"
