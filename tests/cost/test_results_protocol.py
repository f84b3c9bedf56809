"""``Kernel.profile`` (host time) and ``nki.estimate`` (model time) share one result protocol."""

from __future__ import annotations

import gzip
import inspect
import json

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.results import HOST, MODEL, KernelResult


def _scale_then_add(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(x.shape[0] // 128):
        tile = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[t * 128:(t + 1) * 128, :])
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=2.0)
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=out[t * 128:(t + 1) * 128, :], src=tile)
    return out


def _kernel_lines() -> set[str]:
    """``file.py:N`` of every instruction line of the kernel, read from its source."""
    src, first = inspect.getsourcelines(_scale_then_add)
    return {f"test_results_protocol.py:{first + i}" for i, line in enumerate(src)
            if "nisa." in line}


def _load(path: str) -> dict:
    with gzip.open(path, "rb") as f:
        return json.loads(f.read())


@pytest.fixture(scope="module")
def results():
    x = np.random.default_rng(0).standard_normal((512, 256)).astype(np.float32)
    kernel = nki.jit(_scale_then_add)
    (host,) = kernel.profile(x)
    model = nki.estimate(kernel, target="trn2")(x)
    np.testing.assert_allclose(kernel(x), 2 * x + 1, rtol=1e-6)
    return host, model


def test_both_results_follow_the_protocol_and_say_which_kind(results):
    host, model = results
    assert isinstance(host, KernelResult) and isinstance(model, KernelResult)
    assert (host.kind, model.kind) == (HOST, MODEL)
    assert "instruction" in host.table() and "latency" in model.table()


def test_by_line_names_the_same_source_lines_in_both(results):
    host, model = results
    lines = _kernel_lines()
    assert {r.location for r in host.by_line()} == lines
    assert {r.location for r in model.by_line()} == lines
    # four iterations of the affine loop: every line's instruction ran 4 times
    assert all(r.calls == 4 for r in host.by_line())
    assert all(r.count == 4 for r in model.by_line())
    table = str(host.by_line())
    assert all(loc in table for loc in lines)


def test_host_by_line_sums_to_the_helpers_time_longest_first(results):
    host, _ = results
    rows = host.by_line()
    assert sum(r.seconds for r in rows) == pytest.approx(float(host.seconds.sum()))
    assert [r.seconds for r in rows] == sorted((r.seconds for r in rows), reverse=True)


def test_both_traces_open_as_trace_events_marked_host_or_model(results, tmp_path):
    host, model = results
    h = _load(host.save_trace(str(tmp_path / "host.json.gz")))
    m = _load(model.save_trace(str(tmp_path / "model.json.gz")))
    assert h["otherData"]["result_kind"] == HOST and m["otherData"]["result_kind"] == MODEL
    slices = [e for e in h["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == len(host.origins)   # one slice per instruction row that ran
    assert sum(e["dur"] for e in slices) == pytest.approx(host.total * 1e6)
    assert any(e["ph"] == "X" for e in m["traceEvents"])


def test_estimate_takes_a_plain_function_as_nki_jit_would(results):
    _, model = results
    x = np.random.default_rng(0).standard_normal((512, 256)).astype(np.float32)
    plain = nki.estimate(_scale_then_add, target="trn2")(x)
    assert plain.latency_us == model.latency_us


def test_estimate_of_something_else_is_a_clear_type_error():
    with pytest.raises(TypeError, match=r"nki.estimate: expected an @nki.jit kernel or a "
                                        r"Python function, got int"):
        nki.estimate(3, target="trn2")
