"""nki.testing: the tolerance table, assert_close's verdicts and report, the factories, and
check_kernel / the pytest plugin on a tiny kernel."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.config import from_environment
from nki.testing import (
    TOLERANCES,
    assert_bitwise_equal,
    assert_close,
    check_kernel,
    compare,
    param_id,
    parametrize_dtypes,
    parametrize_shapes,
    rand,
    rand_like,
    randint,
    randn,
    randperm,
    resolve_dtype,
    run_backends,
    tolerance,
)
from nki.testing.dtypes import finfo

pytest_plugins = ["pytester"]

FLOATS = ["fp32", "bf16", "fp16", "fp8e4m3", "fp8e4m3fn", "fp8e5m2"]
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _step(x: np.ndarray, k: int) -> np.ndarray:
    """``x`` moved by ``k`` representable values (bit increments; positive x only)."""
    bits = x.view(UINT[x.dtype.itemsize])
    return (bits + np.array(k, bits.dtype)).view(x.dtype)


def _largest_at_most(bound: float, dtype) -> np.ndarray:
    """The largest value of ``dtype`` that is <= ``bound`` (bound > 0)."""
    x = np.array([bound]).astype(resolve_dtype(dtype))
    while float(x[0]) > bound:
        x = _step(x, -1)
    return x


# --- the table ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", FLOATS)
def test_table_is_in_ulps(name):
    eps = float(finfo(name).eps)
    tol = TOLERANCES[name]
    for value in (tol.rtol, tol.atol):
        ulps = value / eps
        assert ulps >= 2 and ulps == int(ulps), (name, value, eps)


def test_table_spellings_and_exact_types():
    assert tolerance("bf16") is tolerance(nl.bfloat16) is tolerance(ml_dtypes.bfloat16)
    assert tolerance("bfloat16").rtol == 2 ** -6
    assert tolerance(np.float32).rtol == 2 ** -16 and tolerance("float32").atol == 2 ** -13
    for exact in ("int32", np.uint8, nl.int16, "bool", "fp8e8m0"):
        assert tolerance(exact).exact


# --- assert_close verdicts, one representable value inside and outside ----------------------

@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("expected", [1.0, 0.0, 3.0], ids=["at1", "at0", "at3"])
def test_boundary_in_dtype(name, expected):
    tol = tolerance(name)
    inside = _largest_at_most(expected + tol.atol + tol.rtol * expected, name)
    outside = _step(inside, 1)
    assert_close(inside, np.array([expected]))
    with pytest.raises(AssertionError, match="1 of 1 elements"):
        assert_close(outside, np.array([expected]))
    # and mirrored below the expected value
    assert_close(-inside, np.array([-expected]))
    with pytest.raises(AssertionError):
        assert_close(-outside, np.array([-expected]))


def test_bf16_boundary_in_ulps():
    one_ulp = 2.0 ** -7                    # bf16 spacing in [1, 2)
    e = np.array([1.0])
    assert_close(np.array([1 + 4 * one_ulp], ml_dtypes.bfloat16), e)   # atol+rtol = 4 ulps
    with pytest.raises(AssertionError):
        assert_close(np.array([1 + 5 * one_ulp], ml_dtypes.bfloat16), e)


def test_dtype_default_is_the_coarser():
    x = np.array([1.01])
    assert compare(x.astype(ml_dtypes.bfloat16), np.array([1.0])).dtype == "bf16"
    assert compare(np.float32(1.0), np.float64(1.0)).dtype == "fp32"
    assert not compare(x, np.array([1.0])).ok                      # fp64: 1% is far out
    assert compare(x, np.array([1.0]), dtype="bf16").ok


def test_overrides_and_integers():
    assert_close(np.array([1.1]), np.array([1.0]), rtol=0.11, atol=0.0)
    with pytest.raises(AssertionError):
        assert_close(np.array([1.1]), np.array([1.0]), rtol=0.09, atol=0.0)
    assert_close(np.arange(5, dtype=np.int32), np.arange(5))
    with pytest.raises(AssertionError, match="rtol=0, atol=0"):
        assert_close(np.array([0, 1, 3], np.int32), np.array([0, 1, 2]))


def test_nan_and_inf():
    nan, inf = np.nan, np.inf
    assert_close(np.array([nan, inf, -inf]), np.array([nan, inf, -inf]))
    with pytest.raises(AssertionError, match="both NaN"):
        assert_close(np.array([nan]), np.array([nan]), equal_nan=False)
    with pytest.raises(AssertionError, match="opposite Inf"):
        assert_close(np.array([inf]), np.array([-inf]))
    with pytest.raises(AssertionError, match=r"actual NaN where expected is not: 1 element"):
        assert_close(np.array([1.0, nan]), np.array([1.0, 2.0]))
    with pytest.raises(AssertionError, match="expected NaN where actual is not"):
        assert_close(np.array([1.0]), np.array([nan]))


def test_shape_mismatch():
    with pytest.raises(AssertionError, match=r"shape mismatch: actual \(2, 3\) vs expected"):
        assert_close(np.zeros((2, 3)), np.zeros((3, 2)))


# --- the report ----------------------------------------------------------------------------

def test_report_names_errors_and_offenders():
    expected = np.linspace(-2.0, 2.0, 1000).reshape(10, 100)
    actual = expected.astype(ml_dtypes.bfloat16)
    actual[3, 4] = 7.0
    actual[5, 6] = actual[5, 6] + ml_dtypes.bfloat16(0.5)
    actual[0, 0] = np.nan
    with pytest.raises(AssertionError) as info:
        assert_close(actual, expected, msg="softmax, bf16, 10x100")
    text = str(info.value)
    assert "MISMATCH - 3 of 1000 elements (0.3%) out of tolerance; shape (10, 100)" in text
    assert "bf16: rtol=0.0156, atol=0.0156" in text
    assert "max abs error 7.78278 at (3, 4)" in text
    assert "max rel error" in text
    assert "actual NaN where expected is not: 1 element(s), first at (0, 0)" in text
    lines = text.splitlines()
    worst = lines.index("  worst offenders:")
    assert lines[worst + 2].split()[:4] == ["(3,", "4)", "7", "-0.78278278"]
    assert lines[worst + 3].split()[:2] == ["(5,", "6)"]
    assert lines[-1] == "  softmax, bf16, 10x100"


def test_report_of_a_match_and_comparison_fields():
    c = assert_close(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-14]))
    assert c.ok and c.bad == 0 and c.total == 2 and c.max_abs[1] == (1,)
    assert c.report().startswith("assert_close: OK - 0 of 2 elements")


def test_bitwise_equal():
    a = np.array([1.0, -0.0, np.nan], np.float32)
    assert_bitwise_equal(a, a.copy())
    with pytest.raises(AssertionError, match=r"1 of 3 elements differ; first at \(1,\)"):
        assert_bitwise_equal(a, np.array([1.0, 0.0, np.nan], np.float32))
    with pytest.raises(AssertionError, match="float32"):
        assert_bitwise_equal(a, a.astype(np.float64))


def test_torch_inputs():
    torch = pytest.importorskip("torch")
    t = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    assert compare(t, np.array([1.0, 2.0])).dtype == "bf16"
    with pytest.raises(AssertionError):
        assert_close(t, torch.tensor([1.0, 2.1], dtype=torch.float64))


# --- factories -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FLOATS + ["fp32"])
@pytest.mark.parametrize("make", [rand, randn], ids=["rand", "randn"])
def test_factories_deterministic_and_representable(make, name):
    a, b, c = make((64, 33), name, seed=5), make((64, 33), name, seed=5), make((64, 33), name,
                                                                                 seed=6)
    assert a.dtype == resolve_dtype(name) and a.shape == (64, 33)
    assert_bitwise_equal(a, b)
    assert not np.array_equal(a.astype(np.float64), c.astype(np.float64))
    wide = a.astype(np.float64)
    assert np.isfinite(wide).all()
    assert_bitwise_equal(wide.astype(a.dtype), a)      # every value is exactly a dtype value


def test_rand_ranges_and_distributions():
    u = rand(10000, "bf16", seed=1, low=-3.0, high=2.0).astype(np.float64)
    assert u.min() >= -3.0 and u.max() <= 2.0 and u.std() > 1.0
    big = randn(1000, "fp8e4m3", seed=1, std=1e4).astype(np.float64)
    assert np.abs(big).max() == 240.0                   # clipped to the finite range
    ints = rand((50, 50), "fp32", seed=2, low=-4, high=4, distribution="integer")
    assert set(np.unique(ints)) <= set(range(-4, 5)) and len(np.unique(ints)) == 9
    n = rand(20000, "fp32", seed=3, low=1.0, high=5.0, distribution="normal")
    assert abs(n.mean() - 3.0) < 0.05 and abs(n.std() - 2.0) < 0.05
    with pytest.raises(ValueError, match="distribution"):
        rand(3, seed=0, distribution="cauchy")


def test_generator_seed_and_like():
    g1, g2 = np.random.default_rng(9), np.random.default_rng(9)
    assert_bitwise_equal(randn(8, seed=g1), randn(8, seed=g2))
    x = rand((3, 4), "fp16", seed=0)
    y = rand_like(x, seed=1)
    assert y.shape == x.shape and y.dtype == np.float16


def test_integer_factories():
    idx = randint((128, 1), 0, 1000, "int32", seed=3)
    assert idx.dtype == np.int32 and idx.min() >= 0 and idx.max() < 1000
    assert_bitwise_equal(idx, randint((128, 1), 0, 1000, "int32", seed=3))
    p = randperm(500, "uint32", seed=4)
    assert p.dtype == np.uint32 and sorted(p.tolist()) == list(range(500))
    with pytest.raises(ValueError, match="does not fit"):
        randint(4, 0, 300, "uint8")


def test_as_torch():
    torch = pytest.importorskip("torch")
    t = rand((4, 4), "bf16", seed=2, as_torch=True)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16
    assert_bitwise_equal(t, rand((4, 4), "bf16", seed=2))
    like = rand_like(t, seed=3)
    assert isinstance(like, torch.Tensor) and like.dtype == torch.bfloat16
    with pytest.raises(TypeError, match="no dtype"):
        rand(3, "fp8e4m3", as_torch=True)


# --- ids -------------------------------------------------------------------------------------

def test_param_ids():
    assert param_id((256, 512)) == "256x512" and param_id(nl.bfloat16) == "bf16"
    assert param_id(True) == "True"
    mark = parametrize_shapes("K,M,N", [(256, 128, 512)])
    assert mark.kwargs["ids"] == ["K256-M128-N512"]
    assert parametrize_shapes("shape", [(128, 64)]).kwargs["ids"] == ["s128x64"]
    assert parametrize_dtypes("dtype", ["float32", np.float16]).kwargs["ids"] == ["fp32", "fp16"]


# --- check_kernel on a tiny kernel -----------------------------------------------------------

@nki.jit
def add_scaled(a, b, scale):
    """``a + scale * b`` for [P <= 128, F] inputs, and its fp32 row sums as a second output."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    sums = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    ta = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    y = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)     # fp32, so the sums see
    nisa.scalar_tensor_tensor(dst=y, data=tb, op0=nl.multiply, operand0=scale, op1=nl.add,
                              operand1=ta)                        # unrounded values
    s = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=s, op=nl.add, data=y, axis=1)
    res = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=y)
    nisa.dma_copy(dst=out, src=res)
    nisa.dma_copy(dst=sums, src=s)
    return out, sums


def _add_scaled_ref(a, b, scale):
    y = a + scale * b
    return y, y.sum(axis=1, keepdims=True)


@parametrize_dtypes("dtype", ["float32", "bfloat16"])
def test_check_kernel_passes(dtype):
    a, b = randn((100, 70), dtype, seed=1), randn((100, 70), dtype, seed=2)
    out, sums = check_kernel(add_scaled, _add_scaled_ref, a, b, 0.5)
    assert out.dtype == resolve_dtype(dtype) and sums.shape == (100, 1)


def test_check_kernel_torch_reference():
    pytest.importorskip("torch")
    a, b = randn((64, 32), "bf16", seed=1), randn((64, 32), "bf16", seed=2)
    check_kernel(add_scaled, _add_scaled_ref, a, b, 2.0, reference_as="torch",
                 backends=("numba",))


def test_check_kernel_reports_a_wrong_reference():
    a, b = randn((16, 8), seed=1), randn((16, 8), seed=2)

    def wrong(a, b, scale):
        y, s = _add_scaled_ref(a, b, scale)
        y[2, 3] += 1.0
        return y, s

    with pytest.raises(AssertionError, match=r"(?s)1 of 128 elements.*at \(2, 3\).*"
                                             r"add_scaled output 0 vs reference"):
        check_kernel(add_scaled, wrong, a, b, 1.0)
    with pytest.raises(AssertionError, match="returned 2 output"):
        check_kernel(add_scaled, lambda a, b, s: a, a, b, 1.0)


def test_run_backends_keeps_inputs_private():
    a, b = randn((8, 8), seed=1), randn((8, 8), seed=2)
    before = a.copy()
    outs = run_backends(add_scaled, a, b, 1.0)
    assert len(outs) == 2
    assert_bitwise_equal(a, before)


# --- the pytest plugin -----------------------------------------------------------------------

PLUGIN_TESTS = '''
import numpy as np, zlib
import nki, nki.language as nl, nki.isa as nisa
from nki.testing import parametrize_shapes, randn

@nki.jit
def double(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=t)
    return out

def test_backend(nki_backend):
    assert nki_backend in ("numba", "python")
    x = np.ones((4, 4), np.float32)
    assert (nki.jit(double.fn, backend=nki_backend)(x) == 2).all()

def test_rng(nki_rng, request):
    seed = request.config.getoption("--nki-seed")
    ref = np.random.default_rng([seed, zlib.crc32(request.node.nodeid.encode())])
    assert nki_rng.integers(1 << 30) == ref.integers(1 << 30)

@parametrize_shapes("shape", [(8, 16), (3, 5)])
def test_check(nki_check, nki_rng, shape):
    nki_check(double, lambda x: 2 * x, randn(shape, "bf16", seed=nki_rng))
'''


# pytester points HOME at a temporary folder; keep nki's real cache (compiled helpers and
# programs) or every subprocess would compile the simulator's helpers from scratch
_CACHE_DIR = from_environment().cache_dir


def _plugin_project(pytester, monkeypatch) -> None:
    monkeypatch.setenv("NKI_CACHE_DIR", _CACHE_DIR)
    pytester.makeconftest('pytest_plugins = ["nki.testing.pytest_plugin"]')
    pytester.makepyfile(test_plugin_use=PLUGIN_TESTS)


# subprocesses: an in-process run restores sys.modules afterwards, and Numba's extension
# registries do not survive their modules being imported twice in one process
def test_plugin_fixtures(pytester, monkeypatch):
    _plugin_project(pytester, monkeypatch)
    result = pytester.runpytest_subprocess("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["nki.testing: seed 0, backends numba,python",
                                 "*test_backend[[]numba[]] PASSED*",
                                 "*test_backend[[]python[]] PASSED*",
                                 "*test_check[[]s8x16[]] PASSED*"])


def test_plugin_options(pytester, monkeypatch):
    _plugin_project(pytester, monkeypatch)
    result = pytester.runpytest_subprocess("-v", "-p", "no:cacheprovider",
                                           "--nki-backends=numba", "--nki-seed=7",
                                           "-k", "backend or rng")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["nki.testing: seed 7, backends numba"])
    bad = pytester.runpytest_subprocess("--nki-backends=cuda", "-p", "no:cacheprovider")
    assert bad.ret != 0
    bad.stderr.fnmatch_lines(["*--nki-backends: choose from numba, python*"])
