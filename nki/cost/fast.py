"""The scheduler's inner loop compiled with Numba: the same rules as nki/cost/schedule.py
(which stays the reference: tests compare the two timelines instruction by instruction), on
flat tables, so the model costs well under a microsecond per executed instruction (0.25-0.8
µs on the issue 15 speed cases, benchmarks/results/trace.json) instead of ~10.

Used for programs without cross-core sync points (barriers and collectives meet across cores,
which the Python scheduler handles); :func:`flatten` builds the tables from a
:class:`~nki.cost.prep.Prepared`.
"""

from __future__ import annotations

import numpy as np

from nki.cost.instr import COMPUTE_ENGINES, DMA, shares_ports
from nki.cost.prep import LoopNode, Prepared
from nki.cost.schedule import _SYNC_POINTS, Timeline

NSLOTS = 16
CAP = 24           # records per family (schedule._Records.CAP)
KEEP = 48          # busy intervals per DMA engine (schedule.DmaEngines.KEEP)
ENG_DMA = len(COMPUTE_ENGINES)


def has_sync_points(prep: Prepared) -> bool:
    return any(st.instr.opcode in _SYNC_POINTS for st in prep.instrs)


def has_recorded_counts(prep: Prepared) -> bool:
    """Whether a runtime loop takes per-execution trip counts (the Python loop's job)."""
    def walk(nodes) -> bool:
        return any(isinstance(n, LoopNode) and (n.counts is not None or walk(n.body))
                   for n in nodes)
    return walk(prep.body)


def flatten(prep: Prepared, facts) -> dict:
    """The program as arrays: instructions, operands, bytecode, spill tables."""
    n = len(prep.instrs)
    eng = np.full(n, -1, np.int64)
    f64 = {k: np.zeros(n) for k in ("ns", "fixed", "lat", "ls", "dep")}
    packets = np.zeros(n, np.int64)
    op_lo, op_hi = np.zeros(n, np.int64), np.zeros(n, np.int64)
    ports = np.zeros((n, 2), np.int64)
    rows, fam_ids = [], {}
    for s, st in enumerate(prep.instrs):
        c = st.cost
        if c.engine != "none":
            eng[s] = ENG_DMA if c.engine == DMA else COMPUTE_ENGINES.index(c.engine)
            if c.engine != DMA:
                f64["dep"][s] = facts["dep_overhead_cycles"] / facts[f"{c.engine}_clock_ghz"]
        f64["ns"][s], f64["fixed"][s], f64["ls"][s] = c.ns, c.fixed_ns, c.ls_ns
        f64["lat"][s] = c.floor_ns
        packets[s] = max(1, c.packets)
        if shares_ports(facts):   # trn1's shared ports, v3+'s perf-mode bus
            ports[s] = ("sbuf" in c.ports, "psum" in c.ports)
        op_lo[s] = len(rows)
        for r in st.operands:
            fam = fam_ids.setdefault(r.family, len(fam_ids))
            coef = [0] * NSLOTS
            for slot, k in r.offset.terms:
                coef[slot] = k
            rows.append([fam, int(r.write), r.offset.const, r.pitch, r.partitions, r.extent,
                         r.lo_shift, r.itemsize, r.owner, int(r.by_bytes), *coef])
        op_hi[s] = len(rows)
    ops = np.array(rows, np.int64).reshape(len(rows), 10 + NSLOTS)
    code, trips = _bytecode(prep.body)
    return {"eng": eng, "packets": packets, "op_lo": op_lo, "op_hi": op_hi, "ports": ports,
            "ops": ops, "code": code, "trips": trips, "nfam": max(1, len(fam_ids)),
            "spills": _spill_tables(prep), **f64}


def _bytecode(body) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``[kind, a, b, c, d]``: 0 = instruction a; 1 = loop (id a, slot b, trip row c,
    end row d), its end row ``[2, begin]``. ``trips`` rows: const, then a coefficient per
    slot."""
    code: list[list[int]] = []
    trips: list[list[int]] = []

    def emit(nodes) -> None:
        for node in nodes:
            if isinstance(node, LoopNode):
                t = [0] * NSLOTS
                for slot, k in node.trip.terms:
                    t[slot] = k
                trips.append([node.trip.const, *t])
                begin = len(code)
                code.append([1, node.id, node.slot, len(trips) - 1, 0])
                emit(node.body)
                code[begin][4] = len(code)
                code.append([2, begin, 0, 0, 0])
            else:
                code.append([0, node, 0, 0, 0])

    emit(body)
    return (np.array(code, np.int64).reshape(len(code), 5),
            np.array(trips, np.int64).reshape(len(trips), 1 + NSLOTS))


def _spill_tables(prep: Prepared) -> np.ndarray:
    """Rows ``[count, after, static index, tensor]`` sorted by count (before first)."""
    rows = [[c, 0, s, t] for c, lst in prep.spill_before.items() for s, t in lst]
    rows += [[c, 1, s, t] for c, lst in prep.spill_after.items() for s, t in lst]
    rows.sort()
    return np.array(rows, np.int64).reshape(len(rows), 4)


def count_executions(prep: Prepared) -> int:
    """Executed instructions (upper bound for the output arrays), loops expanded."""
    env = [0] * NSLOTS

    def count(nodes) -> int:
        total = 0
        for node in nodes:
            if not isinstance(node, LoopNode):
                total += 1
                continue
            trip = node.trip.const + sum(k * env[s] for s, k in node.trip.terms)
            if all(not isinstance(b, LoopNode) for b in node.body):
                total += trip * len(node.body)
                continue
            for i in range(trip):
                if node.slot >= 0:
                    env[node.slot] = i
                total += count(node.body)
        return total

    spills = sum(len(v) for v in prep.spill_before.values()) + \
        sum(len(v) for v in prep.spill_after.values())
    return count(prep.body) + spills


def run_fast(prep: Prepared, facts, core: int) -> Timeline:
    """Schedule one core with the compiled loop; the same Timeline as CoreScheduler's."""
    return run_tables(flatten(prep, facts), count_executions(prep), prep, facts, core)


def run_tables(t: dict, cap: int, prep: Prepared, facts, core: int) -> Timeline:
    """Run the compiled loop over :func:`flatten`'s tables (``cap``: executions at most)."""
    n, out_s, out_f, out_p, out_d, out_q = loop_arrays(t, cap, prep, facts)
    tl = Timeline(core)
    tl.sidx = out_s[:n].tolist()
    tl.start = out_f[:n, 0].tolist()
    tl.end = out_f[:n, 1].tolist()
    names = [*COMPUTE_ENGINES, DMA]
    engines = t["eng"]
    tl.track = [names[engines[s]] for s in tl.sidx]
    tl.pred = out_p[:n].tolist()
    tl.pred_dep = out_d[:n].tolist()
    tl.queues = [_queues(m) for m in out_q[:n].tolist()]
    return tl


def loop_arrays(t: dict, cap: int, prep: Prepared, facts) -> tuple:
    """The compiled loop alone: (executed, static index, [start, end], predecessor,
    predecessor-was-a-dependency, DMA engine bitmask) arrays."""
    from nki.cost._fastloop import schedule_loop
    out_s = np.zeros(cap, np.int64)
    out_f = np.zeros((cap, 2))
    out_p = np.zeros(cap, np.int64)
    out_d = np.zeros(cap, np.bool_)
    out_q = np.zeros(cap, np.int64)
    ntensors = max((tt.id for tt in prep.program.tensors), default=0) + 1
    params = np.array([facts["rotation_depth"], facts["dma_queues"], max(1, prep.nloops),
                       ntensors], np.int64)
    n = schedule_loop(t["code"], t["trips"], t["eng"], t["ns"], t["fixed"], t["lat"], t["ls"],
                      t["dep"],
                      t["packets"], t["op_lo"], t["op_hi"], t["ports"], t["ops"], t["nfam"],
                      t["spills"], params, out_s, out_f, out_p, out_d, out_q)
    return n, out_s, out_f, out_p, out_d, out_q


_QUEUE_CACHE: dict[int, tuple[int, ...]] = {}


def _queues(mask: int) -> tuple[int, ...]:
    """The DMA engines a bitmask names, in the order packets were placed (ascending here:
    the compiled loop records which engines, not their order)."""
    q = _QUEUE_CACHE.get(mask)
    if q is None:
        q = _QUEUE_CACHE[mask] = tuple(i for i in range(64) if mask >> i & 1)
    return q
