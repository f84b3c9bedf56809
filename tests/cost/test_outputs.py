"""The estimate's outputs: the trace-event JSON checked against the trace-event format, the
event cap, the Neuron Explorer-shaped tables, the PNG, and the import rule of nki/cost."""

from __future__ import annotations

import ast
import csv
import gzip
import json
import os

import numpy as np
import pytest
from test_schedule import scale_tiles

import nki
from nki.cost import estimate

PHASES = {"X", "M", "s", "f"}


@pytest.fixture(scope="module")
def est():
    return estimate(nki.jit(scale_tiles), target="trn2")(np.zeros((1024, 1024), np.float32))


def _check_event(e: dict) -> None:
    assert e["ph"] in PHASES
    assert isinstance(e["name"], str) and e["name"]
    assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    if e["ph"] == "M":
        assert e["name"] in ("process_name", "thread_name", "thread_sort_index")
        assert isinstance(e["args"], dict)
        return
    assert isinstance(e["ts"], float | int) and e["ts"] >= 0
    if e["ph"] == "X":
        assert isinstance(e["dur"], float | int) and e["dur"] >= 0
        assert isinstance(e.get("args", {}), dict)
    else:
        assert "id" in e and e["cat"] == "dependency"


def test_trace_is_valid_trace_event_json(est, tmp_path):
    path = est.save_trace(str(tmp_path / "k.json.gz"))
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"]
    for e in events:
        _check_event(e)
    slices = [e for e in events if e["ph"] == "X"]
    # every executed instruction appears; a DMA once per queue it used
    tl, prep = est.timelines[0], est.preps[0]
    expect = sum(len(q) if prep.instrs[s].cost.engine == "dma" else 1
                 for s, q in zip(tl.sidx, tl.queues))
    assert len(slices) == expect
    assert {e["name"] for e in slices} == {"dma_copy", "tensor_scalar"}
    assert all(e["args"]["location"].startswith("test_schedule.py:") for e in slices)
    assert any("bytes" in e["args"] for e in slices if e["name"] == "dma_copy")
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"vector", "tensor", "dma queue 0", "dma queue 15"} <= names
    starts = [e for e in events if e["ph"] == "s"]
    ends = [e for e in events if e["ph"] == "f"]
    assert starts and sorted(e["id"] for e in starts) == sorted(e["id"] for e in ends)
    for s in starts:     # each flow starts inside a slice of its track (its binding point)
        assert any(x["tid"] == s["tid"] and x["ts"] <= s["ts"] <= x["ts"] + x["dur"]
                   for x in slices)
    assert data["otherData"]["model_version"] == est.model_version
    assert data["otherData"]["aggregated_instructions"] == 0


def test_event_cap_aggregates_and_says_so(est, tmp_path):
    data = json.loads(open(est.save_trace(str(tmp_path / "k.json"), max_events=40)).read())
    slices = [e for e in data["traceEvents"] if e["ph"] == "X"]
    aggregated = [e for e in slices if e["cat"] == "aggregated"]
    assert data["otherData"]["aggregated_instructions"] > 0
    assert aggregated and sum(e["args"]["instructions"] for e in aggregated) >= \
        data["otherData"]["aggregated_instructions"]
    assert len(slices) - len(aggregated) <= 40


def test_tables_use_neuron_explorer_names(est, tmp_path):
    paths = est.save_tables(str(tmp_path))
    with open(next(p for p in paths if p.endswith("Instruction.csv"))) as f:
        rows = list(csv.DictReader(f))
    for field in ("start_ts", "end_ts", "duration_ns", "engine", "opcode",
                  "nki_source_location", "hbm_read_bytes", "hbm_write_bytes"):
        assert field in rows[0]
    assert len(rows) == len(est.timelines[0])
    with open(next(p for p in paths if p.endswith("Summary.csv"))) as f:
        summary = list(csv.DictReader(f))[0]
    assert float(summary["total_time"]) == pytest.approx(est.latency_ns / 1e9)
    assert float(summary["vector_engine_active_time"]) == pytest.approx(est.busy_ns("vector"))
    assert "mfu_estimated_percent" in summary


def test_plot_writes_a_png(est, tmp_path):
    pytest.importorskip("matplotlib")
    path = est.plot(str(tmp_path / "k.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_cost_never_imports_sim_or_lang():
    root = os.path.join(os.path.dirname(nki.__file__), "cost")
    for name in os.listdir(root):
        if not name.endswith(".py"):
            continue
        tree = ast.parse(open(os.path.join(root, name)).read())
        for node in ast.walk(tree):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for m in mods:
                assert not m.startswith(("nki.sim", "nki.lang")), f"{name} imports {m}"
