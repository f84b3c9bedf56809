"""An estimate as tables with Neuron Explorer's field names (profile schema 7.4.0, as
summarised in nki-spec.md §10.2), so scripts written for device profiles read ours.

``Instruction``: one row per executed instruction (a DMA once, its queues in
``timeline_track``); ``Summary``: one row. Times are ns, ``total_time`` in seconds.
CSV always; Parquet too when pyarrow is installed.
"""

from __future__ import annotations

import csv
import os

from nki.cost.instr import COMPUTE_ENGINES, DMA
from nki.cost.report import location, operand_shapes

INSTRUCTION_FIELDS = ("core", "start_ts", "end_ts", "duration_ns", "engine", "timeline_track",
                      "opcode", "name", "operands", "nki_source_location", "evt_wait_time_ns",
                      "hbm_read_bytes", "hbm_write_bytes", "performance_mode", "raw_flops",
                      "adjusted_flops")


def _adjusted(flops: float, dtype_name: str, target: str) -> float:
    """bf16-equivalent FLOPs as Neuron Explorer counts them: fp32 x4, fp8 x0.5 on trn2."""
    if dtype_name == "float32":
        return 4 * flops
    if dtype_name.startswith("float8") and target == "trn2":
        return 0.5 * flops
    return flops


def instruction_rows(est) -> list[dict]:
    rows = []
    for prep, tl in zip(est.preps, est.timelines):
        for i, sidx in enumerate(tl.sidx):
            st = prep.instrs[sidx]
            cost = st.cost
            stat = st.instr.operand("stationary")
            track = (",".join(f"q{q}" for q in tl.queues[i]) if cost.engine == DMA
                     else cost.engine)
            p = tl.pred[i]
            wait = max(0.0, tl.start[i] - tl.end[p]) if (p >= 0 and tl.pred_dep[i]) else 0.0
            rows.append({
                "core": tl.core, "start_ts": tl.start[i], "end_ts": tl.end[i],
                "duration_ns": tl.end[i] - tl.start[i], "engine": cost.engine,
                "timeline_track": track, "opcode": st.instr.opcode.name.lower(),
                "name": st.instr.name, "operands": operand_shapes(st.instr),
                "nki_source_location": location(st.instr), "evt_wait_time_ns": wait,
                "hbm_read_bytes": cost.hbm_read, "hbm_write_bytes": cost.hbm_write,
                "performance_mode": cost.perf_mode, "raw_flops": cost.flops,
                "adjusted_flops": _adjusted(cost.flops, stat.dtype.name if stat else "",
                                            est.target) if cost.flops else 0.0})
    return rows


def summary_row(est) -> dict:
    latency = est.latency_ns
    row = {"kernel": est.kernel, "target": est.target, "model_version": est.model_version,
           "is_simulation": True, "total_time": latency / 1e9,
           "model_flops": est.flops, "hardware_flops": est.flops,
           "mfu_estimated_percent": 100 * est.mfu,
           "mbu_estimated_percent": 100 * est.hbm_gbps / est.hbm_peak_gbps
           if est.hbm_peak_gbps else 0.0,
           "dma_active_time": est.busy_ns(DMA),
           "dma_active_time_percent": 100 * est.utilisation(DMA)}
    counts = {e: 0 for e in COMPUTE_ENGINES}
    for prep, tl in zip(est.preps, est.timelines):
        for sidx in tl.sidx:
            eng = prep.instrs[sidx].cost.engine
            if eng in counts:
                counts[eng] += 1
    for eng in COMPUTE_ENGINES:
        row[f"{eng}_engine_instruction_time"] = est.busy_ns(eng)
        row[f"{eng}_engine_active_time"] = est.busy_ns(eng)
        row[f"{eng}_engine_instruction_count"] = counts[eng]
    return row


def tables(est) -> dict[str, list[dict]]:
    return {"Instruction": instruction_rows(est), "Summary": [summary_row(est)]}


def save_tables(est, folder: str) -> list[str]:
    """Write ``Instruction.csv`` and ``Summary.csv`` (and ``.parquet`` with pyarrow)."""
    os.makedirs(folder, exist_ok=True)
    written = []
    for name, rows in tables(est).items():
        path = os.path.join(folder, f"{name}.csv")
        fields = list(rows[0]) if rows else list(INSTRUCTION_FIELDS)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)
        written.append(path)
        written.extend(_parquet(rows, os.path.join(folder, f"{name}.parquet")))
    return written


def _parquet(rows: list[dict], path: str) -> list[str]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return []
    pq.write_table(pa.Table.from_pylist(rows), path)
    return [path]
