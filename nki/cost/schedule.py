"""The scheduler: engines run their streams in program order and overlap, ordered by true
dependencies between tensor instances.

Every executed instruction (rerolled loops expanded) starts at the latest of: its engine
free (each engine, and each of the 16 DMA queues, runs one instruction at a time in program
order), the end of every earlier instruction it depends on (read after write, write after
read, write after write on overlapping regions of the same tensor instance, see prep.py),
plus ``dep_overhead_cycles`` when a dependency, not the engine, decided the start. On trn1
VectorE and GpSimdE share the SBUF ports and VectorE and ScalarE the PSUM ports: an
instruction waits for the port of each of those memories it touches (``InstrCost.ports``).
On trn2/trn3 only VectorE in perf mode and GpSimdE share one (the bus perf mode uses).

A DMA instruction spreads its packets over the queues free soonest and completes at the
later of its last packet's end and ``floor_ns`` (``dma_latency_ns``) after it was ready: its
latency overlaps its streaming and does not occupy an engine (the DMA overview's throughput
figure: a transfer takes max(latency, bytes / bandwidth)). LNC cores are scheduled side by
side; a barrier (or a collective) completes on every core when the last core reaches it,
plus ``barrier_ns``, and nothing after it on that core starts before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nki.cost.facts import CostFacts
from nki.cost.gaps import Gaps, common_fit
from nki.cost.instr import DMA, shares_ports
from nki.cost.prep import LoopNode, Prepared
from nki.errors import NkiUnsupportedError, fail
from nki.ir.ops import Opcode

_SYNC_POINTS = {Opcode.CORE_BARRIER, Opcode.SENDRECV, Opcode.COLLECTIVE, Opcode.COLLECTIVE_V}


@dataclass
class Timeline:
    """One core's executed instructions, in program order (parallel lists).

    ``pred`` is the index of the instruction whose end decided this one's start (-1: none),
    ``pred_dep`` whether that was a data dependency (else the engine's previous one)."""

    core: int
    sidx: list[int] = field(default_factory=list)
    start: list[float] = field(default_factory=list)
    end: list[float] = field(default_factory=list)
    track: list[str] = field(default_factory=list)
    pred: list[int] = field(default_factory=list)
    pred_dep: list[bool] = field(default_factory=list)
    queues: list[tuple[int, ...]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.sidx)


class _Records:
    """Recent accesses per family: ``[p0, p1, b0, b1, instance, end, write, index]``.

    A write supersedes the earlier records it covers (anything later that overlaps them
    overlaps the write, which ended after them). Reads pile up until a write; beyond
    ``CAP`` records of a family the oldest reads merge into one bounding record (only ever
    later, so conservative)."""

    CAP = 24

    def __init__(self) -> None:
        self.by_family: dict[int, list[list]] = {}

    def ready(self, family: int, box, inst: int, write: bool, by_bytes: bool):
        """(time, index) of the latest end this access must wait for."""
        recs = self.by_family.get(family)
        best, who = 0.0, -1
        if not recs:
            return best, who
        p0, p1, b0, b1 = box
        for r in recs:
            if (write or r[6]) and r[5] > best and r[0] < p1 and p0 < r[1] and \
                    r[2] < b1 and b0 < r[3] and (by_bytes or r[4] == inst):
                best, who = r[5], r[7]
        return best, who

    def add(self, family: int, box, inst: int, write: bool, end: float, index: int) -> None:
        recs = self.by_family.setdefault(family, [])
        p0, p1, b0, b1 = box
        if write:
            recs[:] = [r for r in recs if not (r[4] == inst and p0 <= r[0] and r[1] <= p1
                                               and b0 <= r[2] and r[3] <= b1)]
        recs.append([p0, p1, b0, b1, inst, end, write, index])
        if len(recs) > self.CAP:
            self._merge(recs)

    @staticmethod
    def _merge(recs: list[list]) -> None:
        reads = [r for r in recs if not r[6]]
        if len(reads) < 2:
            del recs[0]          # all writes of disjoint regions: forget the oldest
            return
        # at least two, so a merge always shortens the list (2 or 3 reads halve to 1,
        # which merged nothing: the compiled loop's fixed-size table overflowed)
        half = reads[: max(2, len(reads) // 2)]
        box = [min(r[0] for r in half), max(r[1] for r in half), min(r[2] for r in half),
               max(r[3] for r in half), half[-1][4], max(r[5] for r in half), False,
               max(half, key=lambda r: r[5])[7]]
        drop = {id(r) for r in half}
        recs[:] = [box] + [r for r in recs if id(r) not in drop]


def _box(ref, env: list[int]) -> tuple[int, int, int, int]:
    off = ref.offset.const
    for s, c in ref.offset.terms:
        off += c * env[s]
    isz = ref.itemsize
    if ref.pitch:
        p0, f = divmod(off, ref.pitch)
        f -= ref.lo_shift
        return p0, p0 + ref.partitions, f * isz, (f + ref.extent) * isz
    off -= ref.lo_shift
    return 0, 1, off * isz, (off + ref.extent) * isz


class DmaEngines:
    """The core's 16 DMA engines. Each serves its 16 queues round-robin (trn2 arch guide), so
    a packet that is ready shares its engine with the others in flight: it runs in the gaps
    of its engine after it is ready, piece by piece, until its time is served (one packet
    never waits whole behind a gap too short for it). Only the last ``KEEP`` busy intervals
    per engine are kept; older ones become a floor nothing starts before (conservative)."""

    KEEP = 48

    def __init__(self, n: int) -> None:
        self.busy: list[list[tuple[float, float, int]]] = [[] for _ in range(n)]
        self.floor = [0.0] * n

    def _fill(self, q: int, ready: float, dur: float):
        """The pieces ``dur`` takes in engine q's gaps from ``ready`` on: (end, the last
        instruction that interrupted it or -1, pieces)."""
        t, who, left, pieces = max(ready, self.floor[q]), -1, dur, []
        for s, e, idx in self.busy[q]:
            if e <= t:
                continue
            if s > t:
                run = min(s - t, left)
                pieces.append((t, t + run))
                left -= run
                if left <= 0:
                    break
            t, who = max(t, e), idx
        if left > 0 or not pieces:
            pieces.append((t, t + left))
        return pieces[-1][1], who, pieces

    def place(self, ready: float, dur: float, k: int, index: int):
        """Put ``k`` equal packets on the engines that finish them soonest; returns (start
        of the first, end of the last, engines, the instruction that held the last back)."""
        fits = sorted(self._fill(q, ready, dur)[:2] + (q,) for q in range(len(self.busy)))[:k]
        start = None
        for _, _, q in fits:
            _, _, pieces = self._fill(q, ready, dur)
            start = pieces[0][0] if start is None else min(start, pieces[0][0])
            ivs = self.busy[q]
            for ps, pe in pieces:
                pos = len(ivs)
                while pos and ivs[pos - 1][0] > ps:
                    pos -= 1
                ivs.insert(pos, (ps, pe, index))
                if len(ivs) > self.KEEP:
                    self.floor[q] = max(self.floor[q], ivs.pop(0)[1])
        last = fits[-1]
        return start, last[0], tuple(q for _, _, q in fits), last[1]


class CoreScheduler:
    """Schedules one core's program; a generator so LNC cores can meet at barriers."""

    def __init__(self, prep: Prepared, facts: CostFacts, core: int,
                 reorder: bool = False) -> None:
        self.prep, self.facts = prep, facts
        self.reorder = reorder
        self.gaps: dict[str, Gaps] = {}      # reorder: busy intervals per engine and port
        self.tl = Timeline(core)
        self.free: dict[str, float] = {}
        self.last: dict[str, int] = {}
        self.dma = DmaEngines(int(facts["dma_queues"]))
        self.records = _Records()
        self.iters = [0] * max(1, prep.nloops)
        self.depth = max(1, int(facts["rotation_depth"]))
        self.ports = shares_ports(facts)
        self.dep_cycles = facts["dep_overhead_cycles"]
        self.prev_matmul = False
        self.count = 0                       # executed instructions, as capacity.py counts
        self.executions: dict[int, int] = {}  # loop id -> times a run-record loop started
        self.floor = (0.0, -1)               # (release, index) of the last barrier
        self.spill_last: dict[int, tuple[float, int]] = {}

    def run(self):
        """Yields ``(index, arrival)`` at every cross-core sync point and expects the release
        time back (``send``)."""
        env = [0] * 16
        yield from self._body(self.prep.body, env)

    def _body(self, body, env):
        for node in body:
            if isinstance(node, LoopNode):
                yield from self._loop(node, env)
            else:
                yield from self._one(node, env)

    def _loop(self, node: LoopNode, env):
        trip = node.trip.const
        for s, c in node.trip.terms:
            trip += c * env[s]
        if node.counts is not None:         # a runtime loop's counts, from a run record
            k = self.executions.get(node.id, 0)
            self.executions[node.id] = k + 1
            if k >= len(node.counts):
                raise fail("nki_cost_data_dependent", f"the run record gives "
                           f"{len(node.counts)} trip count(s) for this runtime loop, but the "
                           "program runs it more often", node.loc, NkiUnsupportedError)
            trip = node.counts[k]
        for i in range(trip):
            if node.slot >= 0:
                env[node.slot] = i
            self.iters[node.id] += 1
            yield from self._body(node.body, env)

    def _one(self, sidx: int, env):
        st = self.prep.instrs[sidx]
        cost = st.cost
        count = self.count
        self.count += 1
        if cost.engine == "none":
            return
        ready, who, boxes = 0.0, -1, []
        if count in self.prep.spill_before:
            for spill_sidx, tid in self.prep.spill_before[count]:
                t, w = self._spill(spill_sidx, tid, 0.0, -1)
                if t > ready:
                    ready, who = t, w
        for ref in st.operands:
            box = _box(ref, env)
            inst = self.iters[ref.owner] % self.depth if ref.owner >= 0 else 0
            boxes.append((ref, box, inst))
            t, w = self.records.ready(ref.family, box, inst, ref.write, ref.by_bytes)
            if t > ready:
                ready, who = t, w
        if self.floor[0] > ready:
            ready, who = self.floor
        index = len(self.tl)
        if cost.engine == DMA:
            start, end, pred, dep, queues = self._dma(cost, ready, who)
        else:
            start, end, pred, dep = self._compute(st, cost, ready, who)
            queues = ()
        if st.instr.opcode in _SYNC_POINTS:
            release = yield (index, end)
            end = max(end, release if release is not None else end)
            # nothing after a barrier starts before it is released, on any engine
            self.floor = (end, index)
        self._emit(sidx, start, end, cost.engine, pred, dep, queues)
        for ref, box, inst in boxes:
            self.records.add(ref.family, box, inst, ref.write, end, index)
        for spill_sidx, tid in self.prep.spill_after.get(count, ()):
            self._spill(spill_sidx, tid, end, index)

    def _emit(self, sidx, start, end, track, pred, dep, queues) -> None:
        tl = self.tl
        tl.sidx.append(sidx)
        tl.start.append(start)
        tl.end.append(end)
        tl.track.append(track)
        tl.pred.append(pred)
        tl.pred_dep.append(dep)
        tl.queues.append(queues)

    def _spill(self, sidx: int, tensor: int, ready: float, who: int) -> tuple[float, int]:
        """Schedule one spill DMA (after ``ready``, and after the tensor's previous spill
        DMA); returns its (end, index)."""
        last, last_index = self.spill_last.get(tensor, (0.0, -1))
        if last > ready:
            ready, who = last, last_index
        start, end, pred, dep, queues = self._dma(self.prep.instrs[sidx].cost, ready, who)
        index = len(self.tl)
        self._emit(sidx, start, end, DMA, pred, dep, queues)
        self.spill_last[tensor] = (end, index)
        return end, index

    def _compute(self, st, cost, ready: float, who: int):
        if self.reorder:
            return self._compute_reordered(cost, ready, who)
        eng = cost.engine
        clock = self.facts[f"{eng}_clock_ghz"]
        free = self.free.get(eng, 0.0)
        ports = cost.ports if self.ports else ()
        for port in ports:
            free = max(free, self.free.get(port, 0.0))
        dep = ready > free
        # the static overhead also applies to an instruction that reads the result of the
        # one just before it on its engine (ready == free: "every instruction depending on
        # the output tile of the previous instruction", trn1 arch guide, VectorE cost
        # model); not on TensorE, whose accumulating matmuls pipeline
        chained = not dep and who >= 0 and ready == free and eng != "tensor"
        start = ready + self.dep_cycles / clock if (dep or chained) else free
        ns = cost.ns + cost.fixed_ns
        if eng == "tensor" and cost.ls_ns:
            # LoadStationary runs in the background of the previous matmul when they issue
            # back to back; otherwise it comes first
            ns = max(ns, cost.ls_ns) if (self.prev_matmul and not dep) else ns + cost.ls_ns
        if eng == "tensor":
            self.prev_matmul = bool(cost.ls_ns)
        end = start + ns
        self.free[eng] = end
        for port in ports:
            self.free[port] = end
        pred = who if dep else self.last.get(eng, -1)
        self.last[eng] = len(self.tl)
        return start, end, pred, dep

    def _compute_reordered(self, cost, ready: float, who: int):
        """The earliest gap of the engine (and its ports) after the instruction is ready. The
        static overhead of a dependency is paid whenever the instruction has a producer (a
        gap found later than that hides it only in part: at most ~100 cycles too much)."""
        eng = cost.engine
        res = [self.gaps.setdefault(eng, Gaps())]
        res += [self.gaps.setdefault(p, Gaps()) for p in (cost.ports if self.ports else ())]
        earliest = ready + (self.dep_cycles / self.facts[f"{eng}_clock_ghz"]
                            if who >= 0 and eng != "tensor" else 0.0)
        ns = cost.ns + cost.fixed_ns
        start = common_fit(res, earliest, ns)
        before = res[0].ending_at(start)
        if eng == "tensor" and cost.ls_ns:
            # LoadStationary hides behind a matmul that ends where this one starts
            if before is not None and before[3]:
                ns = max(ns, cost.ls_ns)
            else:
                ns += cost.ls_ns
                start = common_fit(res, earliest, ns)
                before = res[0].ending_at(start)
        end = start + ns
        index = len(self.tl)
        for r in res:
            r.occupy(start, end, index, bool(cost.ls_ns))
        dep = start <= earliest
        blocker = next((iv[2] for iv in (r.ending_at(start) for r in res) if iv), -1)
        return start, end, (who if dep or blocker < 0 else blocker), dep or blocker < 0

    def _dma(self, cost, ready: float, who: int):
        start, end, queues, blocker = self.dma.place(ready, cost.ns, max(1, cost.packets),
                                                     len(self.tl))
        dep = blocker < 0
        end = max(end, ready + cost.floor_ns) + cost.fixed_ns
        return start, end, (who if dep else blocker), dep, queues


ORDERS = ("program", "reorder")


def schedule(preps: list[Prepared], facts: CostFacts, backend: str = "auto",
             order: str = "program") -> list[Timeline]:
    """Schedule every core; cores meet at their k-th sync point (barrier, collective).

    ``backend``: ``"python"`` (this module), ``"numba"`` (nki/cost/fast.py, for programs
    without cross-core sync points) or ``"auto"`` (numba for big programs it can take, once
    its machine code is at hand: nki/cost/loop_tier.py). ``order``: ``"program"`` (each
    engine in program order) or ``"reorder"`` (a ready instruction may take an earlier gap
    of its engine, as the compiler's scheduler may move it: nki/cost/gaps.py; Python only)."""
    from nki.cost import fast, loop_tier
    if backend not in ("auto", "numba", "python"):
        raise ValueError(f"backend must be 'auto', 'numba' or 'python', not {backend!r}")
    if order not in ORDERS:
        raise ValueError(f"order must be 'program' or 'reorder', not {order!r}")
    reorder = order == "reorder"
    if reorder and backend == "numba":
        raise ValueError("order='reorder' is scheduled in Python only; use backend='python' "
                         "or 'auto'")
    can = not reorder and not any(fast.has_sync_points(p) or fast.has_recorded_counts(p)
                                  for p in preps)
    if backend == "numba" and not can:
        raise ValueError("the numba scheduler does not take programs with cross-core sync "
                         "points (barriers, collectives) or per-execution trip counts; use "
                         "backend='python' or 'auto'")
    if can and (backend == "numba" or (backend == "auto" and loop_tier.use_compiled(
            sum(fast.count_executions(p) for p in preps)))):
        return [fast.run_fast(p, facts, p.program.core) for p in preps]
    scheds = [CoreScheduler(p, facts, p.program.core, reorder) for p in preps]
    gens = [s.run() for s in scheds]
    pending = [_advance(g, None) for g in gens]
    while any(p is not None for p in pending):
        arrivals = [p[1] for p in pending if p is not None]
        release = max(arrivals) + (facts["barrier_ns"] if len(gens) > 1 else 0.0)
        pending = [_advance(g, release) if p is not None else None
                   for g, p in zip(gens, pending)]
    return [s.tl for s in scheds]


def _advance(gen, value):
    try:
        return gen.send(value) if value is not None else next(gen)
    except StopIteration:
        return None
