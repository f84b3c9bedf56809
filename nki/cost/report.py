"""Readable views of an estimate: the summary table and the time per source line."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass


def location(instr) -> str:
    """``file.py:42`` of an instruction, or ``<nki>`` when it has none."""
    return instr.loc.short if instr.loc is not None else "<nki>"


def operand_shapes(instr) -> str:
    """``dst=128x512 bfloat16; src=...``: each operand's role, dims and dtype."""
    return "; ".join(f"{role}={'x'.join(str(c) for _, c in op.dims)} {op.dtype.name}"
                     for role, op, _ in instr.accesses() if hasattr(op, "dims"))


def summary_text(est) -> str:
    """The estimate as a table: latency, engines, FLOPs, HBM traffic."""
    note = "  (target defaulted: pass target=)" if est.target_defaulted else ""
    if getattr(est, "order", "program") != "program":
        note += f"  (order={est.order!r}: instructions reordered across engine gaps)"
    per_core = ", ".join(f"core {c.core}: {c.latency_ns / 1e3:.2f} us" for c in est.cores)
    lines = [f"nki.estimate: {est.kernel} on {est.target} ({est.model_version}, a model, "
             f"not a measurement){note}",
             f"latency      {est.latency_us:10.2f} us   ({per_core})",
             f"{'engine':<12} {'busy us':>10} {'util':>7}"]
    from nki.cost.estimate import ENGINES
    for eng in ENGINES:
        busy = est.busy_ns(eng)
        if busy:
            lines.append(f"{eng:<12} {busy / 1e3:10.2f} {100 * est.utilisation(eng):6.1f}%")
    lines.append(f"bottleneck   {est.bottleneck}")
    lines.append(f"TensorE      {est.flops / 1e9:10.3f} GFLOP   MFU {100 * est.mfu:.1f}% "
                 f"of {est.facts['tensor_peak_tflops_bf16']:g} TFLOPS bf16")
    lines.append(f"HBM          {est.hbm_bytes / 1e6:10.3f} MB      {est.hbm_gbps:.1f} GB/s "
                 f"of {est.hbm_peak_gbps:.0f} GB/s "
                 f"({100 * est.hbm_gbps / est.hbm_peak_gbps:.1f}%)")
    lines.append(f"executed     {sum(c.instructions for c in est.cores):10d} instructions")
    return "\n".join(lines)


@dataclass
class LineRow:
    """One source line: its time on the critical path and its engine time (ns)."""

    location: str
    critical_ns: float
    busy_ns: float
    count: int
    opcodes: tuple[str, ...]


class LineTable(list):
    """Rows sorted by critical-path time, longest first; ``str()`` is a table."""

    def __str__(self) -> str:
        out = [f"{'line':<28} {'critical us':>12} {'busy us':>10} {'count':>8}  opcodes"]
        for r in self:
            out.append(f"{r.location:<28} {r.critical_ns / 1e3:12.2f} {r.busy_ns / 1e3:10.2f} "
                       f"{r.count:8d}  {','.join(r.opcodes)}")
        return "\n".join(out)


def critical_path(est) -> tuple[int, list[int]]:
    """(core, executed-instruction indexes) of the chain that decided the latency, last
    first: from the last instruction to finish, each one's deciding predecessor."""
    if not est.timelines or not any(len(t) for t in est.timelines):
        return 0, []
    core = max(range(len(est.timelines)),
               key=lambda c: max(est.timelines[c].end, default=0.0))
    tl = est.timelines[core]
    i = max(range(len(tl)), key=tl.end.__getitem__)
    path = []
    while i >= 0:
        path.append(i)
        i = tl.pred[i]
    return core, path


def by_line(est) -> LineTable:
    """Critical-path time per source line (it sums to the latency) and engine time."""
    crit: dict[str, float] = defaultdict(float)
    busy: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    ops: dict[str, set] = defaultdict(set)
    for prep, tl in zip(est.preps, est.timelines):
        locs = [location(st.instr) for st in prep.instrs]
        names = [st.instr.opcode.name.lower() for st in prep.instrs]
        for sidx, s, e in zip(tl.sidx, tl.start, tl.end):
            loc = locs[sidx]
            busy[loc] += e - s
            count[loc] += 1
            ops[loc].add(names[sidx])
    core, path = critical_path(est)
    if path:
        tl, prep = est.timelines[core], est.preps[core]
        for i in path:
            p = tl.pred[i]
            crit[location(prep.instrs[tl.sidx[i]].instr)] += tl.end[i] - (tl.end[p] if p >= 0
                                                                          else 0.0)
    rows = [LineRow(loc, crit.get(loc, 0.0), busy[loc], count[loc], tuple(sorted(ops[loc])))
            for loc in busy]
    rows.sort(key=lambda r: (-r.critical_ns, -r.busy_ns, r.location))
    return LineTable(rows)
