"""nki.benchmark (both dialects) reports the model's latency in AWS's shape; the
``python -m nki.cost`` command estimates every kernel a script calls."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from test_schedule import scale_tiles

import nki
from nki.cost import estimate

X = np.ones((256, 512), np.float32)


def test_benchmark_reports_the_model_latency(tmp_path):
    trace = str(tmp_path / "b.json.gz")
    bench = nki.benchmark(target="trn2", warmup=2, iters=5, save_trace_name=trace)(
        scale_tiles)
    assert bench(X) is None                   # run=False: estimated, not simulated
    result = bench.benchmark_result
    expect = estimate(nki.jit(scale_tiles), target="trn2")(X).latency_us
    assert result.nc_latency.get_latency_percentile(50) == pytest.approx(expect)
    assert result.nc_latency.get_latency_percentile(99) == pytest.approx(expect)
    assert result.host_wall_time_us is None
    with gzip.open(trace, "rt") as f:
        assert json.load(f)["otherData"]["target"] == "trn2"


def test_benchmark_run_returns_outputs_and_names_host_time_apart():
    bench = nki.benchmark(nki.jit(scale_tiles), target="trn1", run=True)
    out = bench(X)
    np.testing.assert_array_equal(out, 2 * X)
    assert bench.benchmark_result.host_wall_time_us > 0
    assert bench.benchmark_result.estimate.target == "trn1"


def test_benchmark_rejects_unknown_keywords():
    with pytest.raises(TypeError, match="unexpected keyword"):
        nki.benchmark(target="trn2", colour="red")


def test_legacy_benchmark_is_the_model_too():
    from neuronxcc import nki as legacy
    from neuronxcc.nki import language as lnl

    @legacy.jit
    def copy(a):
        out = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
        lnl.store(out, lnl.load(a))
        return out

    bench = legacy.benchmark(warmup=1, iters=2, target="trn2")(copy)
    x = np.ones((128, 64), np.float32)
    np.testing.assert_array_equal(bench(x), x)
    est = bench.benchmark_result.estimate
    assert bench.benchmark_result.nc_latency.get_latency_percentile(50) == est.latency_us
    assert est.target == "trn2" and bench.benchmark_result.host_wall_time_us > 0


def test_command_line_writes_a_trace_per_call(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(
        "import numpy as np, nki\n"
        "from test_schedule import scale_tiles\n"
        "k = nki.jit(scale_tiles)\n"
        "k(np.ones((256, 64), np.float32)); k(np.ones((128, 64), np.float32))\n")
    env = dict(os.environ)
    here = os.path.dirname(__file__)
    env["PYTHONPATH"] = os.pathsep.join([here, env.get("PYTHONPATH", "")])
    out = tmp_path / "traces"
    r = subprocess.run([sys.executable, "-m", "nki.cost", "--target", "trn2", "--out",
                        str(out), str(script)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(out)) == ["scale_tiles_1.json.gz", "scale_tiles_2.json.gz"]
    assert "on trn2" in r.stderr and "2 kernel call(s)" in r.stderr
