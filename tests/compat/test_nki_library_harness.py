"""nki-library's simulation harness, reproduced step for step on kernels of ours written in its
idioms (CI cannot fetch the suite itself).

What the harness does (``test/utils/simulation_setup.py`` at nki-library d2ad3a5): import
``nki_cpu_simulator.nki.{builtin, compiler, isa, isa.constants, language, language.dtypes,
tensor, typing}``; alias ``sys.modules["nki"]`` and those submodules (``nki.dtype`` =
``language.dtypes``) to them; set ``builtins.builtin``; per test, set ``NKI_NC_VERSION`` to
``nisa.nc_version.genN.name`` and call ``nki.cpu_simulate(kernel)[lnc](**inputs)``, then cast
each output with ``np.asarray(out, dtype=golden.dtype)``. Inputs come from ``neuron_dtypes``.
"""

from __future__ import annotations

import builtins
import importlib
import re
import sys

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.isa.constants import oob_mode

pytest_plugins = ["pytester"]

SIM_MODULES = ["builtin", "compiler", "isa", "isa.constants", "language", "language.dtypes",
               "tensor", "typing"]
ALIASES = {"nki": "", "nki.language": "language", "nki.isa": "isa",
           "nki.isa.constants": "isa.constants", "nki.typing": "typing",
           "nki.compiler": "compiler", "nki.dtype": "language.dtypes", "nki.tensor": "tensor"}


@pytest.fixture
def harness(monkeypatch):
    """The harness's set-up, undone afterwards (monkeypatch restores sys.modules entries)."""
    sim = {name: importlib.import_module(f"nki_cpu_simulator.nki.{name}") for name in SIM_MODULES}
    sim[""] = importlib.import_module("nki_cpu_simulator").nki
    monkeypatch.setattr(builtins, "builtin", sim["builtin"], raising=False)
    for alias, name in ALIASES.items():
        monkeypatch.setitem(sys.modules, alias, sim[name])
    return sim


def test_the_simulator_package_is_nki_itself(harness):
    assert harness[""] is nki
    for name in SIM_MODULES:
        assert harness[name] is importlib.import_module(f"nki.{name}")
    assert builtins.builtin.language is nl and builtins.builtin.isa is nisa


def test_nki_dtype_module_members_are_numpy_dtypes(harness):
    import nki.dtype as nt  # the harness's alias, read as the suite reads it

    cache = np.zeros((2, 4), dtype=nt.float8_e4m3)
    assert cache.dtype == np.dtype(ml_dtypes.float8_e4m3)
    assert np.issubdtype(nt.int32, np.integer) and not np.issubdtype(nt.float32, np.integer)
    assert isinstance(nl.bfloat16, nki.dtype)


@nki.jit
def scaled_rows(x: nl.ndarray, scale: float, dtype: nki.dtype = nl.float32) -> nl.ndarray:
    """Each LNC core scales its half of the rows; trn2+ adds 1 (nki-library branches on the
    generation the same way)."""
    rows, cols = x.shape
    n_cores = nl.num_programs(axes=0)
    core = nl.program_id(0)
    per_core = rows // n_cores
    out = nl.ndarray(x.shape, dtype=dtype, buffer=nl.shared_hbm)
    bias = 1.0 if nisa.get_nc_version() >= nisa.nc_version.gen3 else 0.0
    for t in nl.affine_range(per_core // 128):
        r0 = core * per_core + t * 128
        tile = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[r0:r0 + 128, :])
        res = nl.ndarray((128, cols), dtype=dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=tile, op0=nl.multiply, operand0=scale,
                           op1=nl.add, operand1=bias)
        nisa.dma_copy(dst=out[r0:r0 + 128, :], src=res)
    return out


def _simulate(kernel, inputs: dict, lnc: int, generation: str, monkeypatch):
    """The harness's ``simulate_kernel``: the generation by name, keyword inputs, a list out."""
    monkeypatch.setenv("NKI_NC_VERSION", getattr(nisa.nc_version, generation).name)
    result = sys.modules["nki"].cpu_simulate(kernel)[lnc](**inputs)
    return list(result) if isinstance(result, (list, tuple)) else [result]


@pytest.mark.parametrize("generation,bias", [("gen2", 0.0), ("gen3", 1.0), ("gen4", 1.0)])
@pytest.mark.parametrize("lnc", [1, 2])
def test_cpu_simulate_by_keyword_per_generation(harness, monkeypatch, generation, bias, lnc):
    import neuron_dtypes as dt

    x = dt.static_cast(np.random.default_rng(0).uniform(-2, 2, (512, 64)), dt.bfloat16)
    golden = x.astype(np.float32) * 0.5 + bias
    (out,) = _simulate(scaled_rows, {"x": x, "scale": 0.5}, lnc, generation, monkeypatch)
    np.testing.assert_allclose(np.asarray(out, dtype=golden.dtype), golden, rtol=1e-6)


@nki.jit
def gather_rows(table: nl.ndarray, index: nl.ndarray) -> nl.ndarray:
    """Indirect row gather with out-of-bounds rows skipped (nki-library's oob_mode idiom)."""
    n, d = index.shape[0], table.shape[1]
    out = nl.ndarray((n, d), dtype=table.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((n, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=index)
    rows = nl.ndarray((n, d), dtype=table.dtype, buffer=nl.sbuf)
    nisa.memset(dst=rows, value=0.0)
    nisa.dma_copy(dst=rows, src=table.ap([[d, n], [1, d]], 0, vector_offset=idx, indirect_dim=0),
                  oob_mode=oob_mode.skip)
    nisa.dma_copy(dst=out, src=rows)
    return out


def test_indirect_gather_with_skipped_rows(harness, monkeypatch):
    rng = np.random.default_rng(1)
    table = rng.standard_normal((32, 16)).astype(np.float32)
    index = rng.integers(0, 40, (64, 1)).astype(np.int32)   # some rows past the table
    golden = np.where(index < 32, table[np.minimum(index[:, 0], 31)], 0.0).astype(np.float32)
    (out,) = _simulate(gather_rows, {"table": table, "index": index}, 1, "gen3", monkeypatch)
    np.testing.assert_array_equal(out, golden)


def test_nki_nc_version_wins_over_the_compiler_override(monkeypatch):
    from nki.config import from_environment

    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    monkeypatch.setenv("NKI_NC_VERSION", "gen2")
    assert from_environment().target == "gen2"
    monkeypatch.delenv("NKI_NC_VERSION")
    assert from_environment().target == "trn3"


# The suite runs each file's hundreds of tests in one process under a memory limit; pytest
# keeps the last failure's traceback (sys.last_traceback, for post-mortem debugging), and with
# it the failed test's frames and arrays; a frame holding its own exception (the suite's
# negative-test checks do) is a reference cycle, left to a collector that counts objects, not
# bytes: one large failure made the next tests fail with MemoryError (output_proj_cte). The
# plugin drops that record and collects after a failed test. Automatic collection is off in
# the run below, as it (in effect) was across those tests.
ONE_FAILURE_THEN_A_CHECK = """
import gc
import weakref

import numpy as np

gc.disable()
held = []


def test_a_failure_holding_a_large_array():
    golden = np.ones(1 << 20)
    held.append(weakref.ref(golden))
    try:
        raise ValueError("output mismatch")
    except ValueError as e:
        caught = e          # this frame now holds its own exception: a reference cycle
    assert caught is None


def test_the_next_test_finds_it_freed():
    assert held[0]() is None
"""


@pytest.mark.parametrize("plugin, passed", [(["-p", "nki.testing.nki_library"], 1), ([], 0)])
def test_a_failed_tests_arrays_are_freed_before_the_next_test(pytester, plugin, passed):
    pytester.makepyfile(test_sequence=ONE_FAILURE_THEN_A_CHECK)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *plugin)
    result.assert_outcomes(failed=2 - passed, passed=passed)


TEN_TESTS = """
import pytest


@pytest.mark.parametrize("i", range(10))
def test_numbered(i):
    print("RAN", i)
"""


@pytest.mark.parametrize("spec, ran", [("3", [0, 3, 6, 9]), ("4:1", [1, 5, 9]),
                                       ("1", list(range(10)))])
def test_nki_sample_runs_every_kth_test_from_an_offset(pytester, spec, ran):
    pytester.makepyfile(test_ten=TEN_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p",
                                           "nki.testing.nki_library", "--nki-sample", spec, "-s")
    result.assert_outcomes(passed=len(ran), deselected=10 - len(ran) or None)
    assert [int(i) for i in re.findall(r"RAN (\d+)", result.stdout.str())] == ran


def test_nki_sample_refuses_a_bad_offset(pytester):
    pytester.makepyfile(test_ten=TEN_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p",
                                           "nki.testing.nki_library", "--nki-sample", "3:3")
    assert "--nki-sample 3:3: need K >= 1 and 0 <= OFFSET < K" in result.stderr.str()
