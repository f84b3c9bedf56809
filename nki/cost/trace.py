"""An estimate as a Chrome / Perfetto trace (trace-event JSON, gzip) and as a PNG timeline.

One process per LNC core; one thread (track) per engine and per DMA queue. Each executed
instruction is a complete slice ("ph": "X") named by its opcode, with its ``file:line``,
operand shapes, bytes and FLOPs in ``args``; a DMA appears on every queue its packets used.
A flow arrow joins an instruction to the one instruction that delayed it, and only when that
was a data dependency on another track. Beyond ``max_events`` slices the rest of each track is
aggregated into spans that say how many instructions they stand for (the trace's
``otherData`` says so too). Open the file at https://ui.perfetto.dev.
"""

from __future__ import annotations

import os

from nki.cost.instr import COMPUTE_ENGINES, DMA
from nki.cost.report import location, operand_shapes
from nki.results import MODEL, write_trace

_DMA_TID0 = 100


def track_id(engine: str, queue: int = 0) -> int:
    """The trace thread id of an engine (or DMA queue)."""
    return _DMA_TID0 + queue if engine == DMA else 1 + COMPUTE_ENGINES.index(engine)


def track_name(tid: int) -> str:
    return f"dma queue {tid - _DMA_TID0}" if tid >= _DMA_TID0 else COMPUTE_ENGINES[tid - 1]


def _slice_args(st, extra=None) -> dict:
    args = {"location": location(st.instr), "shapes": operand_shapes(st.instr)}
    cost = st.cost
    if cost.bytes:
        args["bytes"] = cost.bytes
    if cost.flops:
        args["flops"] = cost.flops
    if cost.perf_mode:
        args["performance_mode"] = cost.perf_mode
    if st.instr.name:
        args["name"] = st.instr.name
    if cost.note:
        args["note"] = cost.note
    args.update(extra or {})
    return args


def _core_events(est, core: int, budget: int) -> tuple[list[dict], int]:
    """Slices and flows of one core within ``budget`` slices; returns (events, aggregated)."""
    prep, tl = est.preps[core], est.timelines[core]
    events: list[dict] = []
    where: dict[int, tuple[int, float]] = {}      # executed index -> (tid, end ts)
    used = 0
    aggregated = 0
    spans: dict[int, list] = {}
    for i, sidx in enumerate(tl.sidx):
        st = prep.instrs[sidx]
        tids = ([track_id(DMA, q) for q in tl.queues[i]] if st.cost.engine == DMA
                else [track_id(st.cost.engine)])
        start, end = tl.start[i], tl.end[i]
        dur = st.cost.ns if st.cost.engine == DMA else end - start
        if used + len(tids) > budget:
            aggregated += 1
            for tid in tids:
                span = spans.setdefault(tid, [start, start + dur, 0, 0.0])
                span[1] = max(span[1], start + dur)
                span[2] += 1
                span[3] += dur
            continue
        used += len(tids)
        name = st.instr.opcode.name.lower()
        for tid in tids:
            events.append({"name": name, "cat": st.cost.engine, "ph": "X", "pid": core,
                           "tid": tid, "ts": start / 1e3, "dur": dur / 1e3,
                           "args": _slice_args(st, {"index": i, "end_ns": end})})
        # a flow starts inside its source slice (a binding point on its end edge may fall
        # outside it), just before the source ends
        where[i] = (tids[0], max(start, start + dur - 1e-3))
        p = tl.pred[i]
        if tl.pred_dep[i] and p in where and where[p][0] not in tids:
            flow = {"name": "waits for", "cat": "dependency", "id": f"{core}.{i}", "pid": core}
            events.append({**flow, "ph": "s", "tid": where[p][0], "ts": where[p][1] / 1e3})
            events.append({**flow, "ph": "f", "bp": "e", "tid": tids[0], "ts": start / 1e3})
    for tid, (s, e, n, busy) in spans.items():
        events.append({"name": f"{n} instructions (aggregated)", "cat": "aggregated",
                       "ph": "X", "pid": core, "tid": tid, "ts": s / 1e3, "dur": (e - s) / 1e3,
                       "args": {"instructions": n, "busy_ns": busy}})
    return events, aggregated


def trace_events(est, max_events: int = 200_000) -> dict:
    """The trace as a dict (``traceEvents`` + ``otherData``, the format's metadata)."""
    events: list[dict] = []
    aggregated = 0
    per_core = max(1, max_events // max(1, len(est.timelines)))
    for core in range(len(est.timelines)):
        events.append({"name": "process_name", "ph": "M", "pid": core, "tid": 0,
                       "args": {"name": f"{est.kernel} core {core} ({est.target}, model)"}})
        tids = {track_id(e) for e in COMPUTE_ENGINES}
        tids |= {track_id(DMA, q) for q in range(int(est.facts["dma_queues"]))}
        for tid in sorted(tids):
            events.append({"name": "thread_name", "ph": "M", "pid": core, "tid": tid,
                           "args": {"name": track_name(tid)}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": core, "tid": tid,
                           "args": {"sort_index": tid}})
        evs, agg = _core_events(est, core, per_core)
        events.extend(evs)
        aggregated += agg
    meta = {"kernel": est.kernel, "target": est.target, "model_version": est.model_version,
            "kind": "model estimate, not a measurement", "result_kind": MODEL,
            "latency_ns": est.latency_ns,
            "event_cap": max_events, "aggregated_instructions": aggregated,
            "aggregation": "beyond the cap, each track's remaining instructions are one "
                           "span per track" if aggregated else "none"}
    # "otherData" is the trace-event format's place for such facts
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": meta}


def save_trace(est, path: str, max_events: int = 200_000) -> str:
    """Write the trace to ``path`` (gzip-compressed when it ends in ``.gz``)."""
    return write_trace(trace_events(est, max_events), path)


def plot(est, path: str, core: int = 0) -> str:
    """A PNG timeline of one core: a row per engine and DMA queue (needs matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:      # an optional extra
        raise ImportError("est.plot needs matplotlib (pip install matplotlib)") from e
    prep, tl = est.preps[core], est.timelines[core]
    rows: dict[int, list[tuple[float, float]]] = {}
    for i, sidx in enumerate(tl.sidx):
        cost = prep.instrs[sidx].cost
        if cost.engine == DMA:
            for q in tl.queues[i]:
                rows.setdefault(track_id(DMA, q), []).append((tl.start[i] / 1e3, cost.ns / 1e3))
        else:
            rows.setdefault(track_id(cost.engine), []).append(
                (tl.start[i] / 1e3, (tl.end[i] - tl.start[i]) / 1e3))
    tids = sorted(rows)
    fig, ax = plt.subplots(figsize=(12, 0.35 * len(tids) + 1.5))
    for y, tid in enumerate(tids):
        ax.broken_barh(rows[tid], (y - 0.4, 0.8),
                       color="tab:orange" if tid >= _DMA_TID0 else "tab:blue")
    ax.set_yticks(range(len(tids)), [track_name(t) for t in tids])
    ax.invert_yaxis()
    ax.set_xlabel("time (us)")
    ax.set_title(f"{est.kernel} on {est.target}: {est.latency_us:.2f} us "
                 f"(model {est.model_version}, core {core})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.path.abspath(path)
