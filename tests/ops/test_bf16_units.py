"""The CPU's bf16 dot units (nki/sim/bf16.py, bf16gemm.c, bf16amx.c) and their numpy model
(bf16_model.py); AMX's own instruction numerics are in test_bf16_amx.py.

* The model against hand-worked values of AVX-512 BF16's DAZ/FTZ numerics (every machine).
* The model against the instruction itself, bit for bit (where the CPU has the unit).
* nc_matmul through each unit the CPU has: bit for bit that unit's model, both backends
  alike; and the guard's fallback: inputs a unit would round differently (subnormals,
  underflowing products, inf/NaN) give the exact sgemm path's bits, subnormal results kept.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import run_both

import nki.isa as nisa
import nki.language as nl
from nki.sim import bf16
from nki.sim import bf16_model as model

BF16 = ml_dtypes.bfloat16
needs_avx512_bf16 = pytest.mark.skipif("avx512_bf16" not in bf16.FOUND,
                                       reason="no AVX-512 BF16 unit")


@pytest.fixture(params=bf16.FOUND or ["none"])
def unit(request):
    """Each unit this CPU has, selected for the test (matmuls run on it), then restored."""
    if request.param == "none":
        pytest.skip(f"no bf16 dot unit: {bf16.STATUS}")
    was = bf16.select(request.param)
    yield request.param
    bf16.select(was)


def b16(*values) -> np.ndarray:
    """bf16 bits of exactly representable values."""
    return np.array(values, np.float32).astype(BF16).view(np.uint16)


def pair(lo, hi) -> np.uint32:
    lo_bits, hi_bits = b16(lo, hi)
    return np.uint32(lo_bits) | (np.uint32(hi_bits) << 16)


def step(acc, a, b, daz_ftz=True) -> float:
    return float(model.dot_step(np.float32(acc), pair(*a), pair(*b), daz_ftz))


# ----- the model, against worked values -------------------------------------------------
def test_model_exact_products_and_pair_sum():
    assert step(1.0, (2.0, 3.0), (5.0, 7.0)) == 1.0 + 21.0 + 10.0


def test_model_treats_subnormal_inputs_as_zero():
    sub = 2.0 ** -130                         # a bf16 subnormal
    assert step(0.0, (sub, 0.0), (2.0 ** 100, 0.0)) == 0.0               # the unit: 0
    assert step(0.0, (sub, 0.0), (2.0 ** 100, 0.0), daz_ftz=False) == 2.0 ** -30
    assert step(np.float32(2.0 ** -140), (0.0, 0.0), (0.0, 0.0)) == 0.0  # a subnormal acc


def test_model_flushes_an_underflowing_product_of_normals():
    x = 2.0 ** -70                            # normal in bf16; x * x = 2^-140 is not in fp32
    assert step(0.0, (x, 0.0), (x, 0.0)) == 0.0
    assert step(0.0, (x, 0.0), (x, 0.0), daz_ftz=False) == 2.0 ** -140


def test_model_flushes_cancellation_to_a_signed_zero():
    # acc = -(2^-126 + 2^-148) cancels against the products to -2^-148: flushed, sign kept
    acc = -np.float32(2.0 ** -126 + 2.0 ** -148)
    got = step(acc, (2.0 ** -63, 0.0), (2.0 ** -63, 0.0))
    assert got == 0.0 and np.signbit(got)
    assert step(acc, (2.0 ** -63, 0.0), (2.0 ** -63, 0.0), daz_ftz=False) == -2.0 ** -148


def test_model_rounds_each_step_and_adds_the_odd_pair_first():
    # each product 2^-24: 1 + 2^-24 ties to 1, twice (one rounding of both would give
    # 1 + 2^-23)
    assert step(1.0, (2.0 ** -12, 2.0 ** -12), (2.0 ** -12, 2.0 ** -12)) == 1.0
    # pairs (even, odd) = (-1, 3): 2^24 + 3 ties to 2^24 + 4, then - 1 → 2^24 + 3 ties to
    # 2^24 + 4; the even pair first would give 2^24 - 1 (exact), then + 3 = 2^24 + 2
    assert step(2.0 ** 24, (-1.0, 3.0), (1.0, 1.0)) == 2.0 ** 24 + 4
    assert step(2.0 ** 24, (3.0, -1.0), (1.0, 1.0)) == 2.0 ** 24 + 2


def test_model_gemm_of_integers_is_exact():
    rng = np.random.default_rng(0)
    a, b = rng.integers(-8, 9, (37, 5)), rng.integers(-8, 9, (37, 6))
    got = model.bgemm(b16(*a.ravel()).reshape(a.shape), b16(*b.ravel()).reshape(b.shape))
    np.testing.assert_array_equal(got, a.T @ b)


# ----- the model, against the instruction -----------------------------------------------
def _random_lanes(rng, n, exp_lo, exp_hi):
    def elements(count, lo, hi, mant_bits):
        e = rng.integers(lo, hi + 1, count).astype(np.uint32)
        m = rng.integers(0, 1 << mant_bits, count).astype(np.uint32)
        return e, m, rng.integers(0, 2, count).astype(np.uint32)
    e, m, s = elements(4 * n, exp_lo, exp_hi, 7)
    el = ((s << 15) | (e << 7) | m).astype(np.uint32)
    a, b = el[:n] | (el[n:2 * n] << 16), el[2 * n:3 * n] | (el[3 * n:] << 16)
    e, m, s = elements(n, max(0, exp_lo - 10), min(255, exp_hi + 10), 23)
    acc = ((s << 31) | (e << 23) | m).view(np.float32)
    return acc, a, b


@needs_avx512_bf16
@pytest.mark.parametrize("exp_lo,exp_hi", [(100, 150),     # normal values
                                           (124, 130),     # heavy cancellation
                                           (50, 75),       # products underflow fp32
                                           (0, 3),         # subnormal inputs and results
                                           (0, 255)])      # everything, inf and NaN too
def test_model_matches_the_instruction_bit_for_bit(exp_lo, exp_hi):
    acc, a, b = _random_lanes(np.random.default_rng(exp_lo), 1 << 14, exp_lo, exp_hi)
    hw = bf16.dot_lanes(acc, a, b)
    with np.errstate(invalid="ignore"):
        ours = model.dot_step(acc, a, b)
    nan = np.isnan(hw)
    np.testing.assert_array_equal(nan, np.isnan(ours))     # NaN payloads are not modelled
    np.testing.assert_array_equal(hw.view(np.uint32)[~nan], ours.view(np.uint32)[~nan])


# ----- nc_matmul on the unit, and the guard ---------------------------------------------
def _kernel(k_tiles):
    """HBM st [K, M], mv [K, N] → fp32 [M, N], K in tiles of 128 accumulating in PSUM."""
    def kernel(st, mv):
        K, M = st.shape
        N = mv.shape[1]
        out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
        for k in range(k_tiles):
            k0, k1 = k * 128, min(K, k * 128 + 128)
            a = nl.ndarray((k1 - k0, M), dtype=st.dtype, buffer=nl.sbuf)
            b = nl.ndarray((k1 - k0, N), dtype=mv.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=st[k0:k1, :])
            nisa.dma_copy(dst=b, src=mv[k0:k1, :])
            nisa.nc_matmul(dst=ps, stationary=a, moving=b, accumulate=k > 0)
        o = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=ps)
        nisa.dma_copy(dst=out, src=o)
        return out
    return kernel


def _model_chain(st, mv, unit="avx512_bf16"):
    """The model of the same K loop on ``unit``: one ``bgemm`` per 128-row tile, added in
    PSUM."""
    sb, mb = np.asarray(st).astype(BF16).view(np.uint16), np.asarray(mv).astype(BF16).view(
        np.uint16)
    acc = None
    for k0 in range(0, st.shape[0], 128):
        acc = model.bgemm(sb[k0:k0 + 128], mb[k0:k0 + 128], acc, unit=unit)
    return acc


def _unit_off(fn, *args):
    was = bf16.set_enabled(False)
    try:
        return run_both(fn, *args)
    finally:
        bf16.set_enabled(was)


@pytest.mark.parametrize("k,m,n", [(300, 70, 200), (128, 128, 512), (7, 3, 33), (1, 1, 1)])
def test_nc_matmul_on_the_unit_is_the_model_bit_for_bit(rng, unit, k, m, n):
    st = rng.standard_normal((k, m)).astype(BF16)
    mv = rng.standard_normal((k, n)).astype(BF16)
    kt = (k + 127) // 128
    y = run_both(_kernel(kt), st, mv)
    np.testing.assert_array_equal(y.view(np.uint32), _model_chain(st, mv, unit).view(np.uint32))
    exact = st.astype(np.float64).T @ mv.astype(np.float64)
    bound = (k + 2) * 2.0 ** -24 * (np.abs(st.astype(np.float64)).T @ np.abs(
        mv.astype(np.float64)))
    assert np.all(np.abs(y - exact) <= bound)          # still an fp32 accumulation


@pytest.mark.parametrize("name", ["float8_e4m3", "float8_e5m2", "float8_e4m3fn"])
def test_every_fp8_byte_widens_to_its_bf16_encoding(name):
    """The unit's fp8 operands are widened through one table per format: every byte's bf16
    encoding, against ml_dtypes' own fp8 -> bf16 conversion."""
    from nki.sim.emit.matmul import _FP8_BF16

    code = getattr(nl, name).code
    expect = np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, name))
    np.testing.assert_array_equal(_FP8_BF16[code],
                                  expect.astype(ml_dtypes.bfloat16).view(np.uint16))


@pytest.mark.parametrize("sdt, mdt", [("float8_e4m3fn", "float8_e5m2"),
                                      ("float8_e4m3", "float8_e4m3")])
def test_fp8_operands_widen_exactly_onto_the_unit(rng, unit, sdt, mdt):
    st = rng.standard_normal((96, 40)).astype(getattr(ml_dtypes, sdt))
    mv = rng.standard_normal((96, 50)).astype(getattr(ml_dtypes, mdt))
    y = run_both(_kernel(1), st, mv)
    np.testing.assert_array_equal(y.view(np.uint32), _model_chain(st, mv, unit).view(np.uint32))


def test_fp16_operands_never_use_the_unit(rng):
    st = rng.standard_normal((64, 16)).astype(np.float16)
    mv = rng.standard_normal((64, 24)).astype(np.float16)
    on = run_both(_kernel(1), st, mv)
    np.testing.assert_array_equal(on.view(np.uint32), _unit_off(_kernel(1), st, mv).view(
        np.uint32))


def _guard_case(name):
    """bf16 st [2, 4], mv [2, 3] whose exact products the unit would lose; and the exact
    result (every value and sum below is exact in fp32)."""
    st = np.ones((2, 4), np.float32)
    mv = np.ones((2, 3), np.float32)
    if name == "subnormal operand":
        st[0, 0] = 2.0 ** -130               # times 2^100 is 2^-30: the unit would give 0
        mv[0, :] = 2.0 ** 100
        mv[1, :] = 0.0
    elif name == "underflowing product":
        st[:, :] = 2.0 ** -70                # 2^-70 * 2^-70 = 2^-140, a subnormal result
        mv[:, :] = 2.0 ** -70
    elif name == "cancellation below 2^-126":
        st[0, :], st[1, :] = 2.0 ** -63, -2.0 ** -63
        mv[0, :], mv[1, :] = 2.0 ** -63 + 2.0 ** -70, 2.0 ** -63   # sum 2^-133
    elif name == "infinity":
        st[0, 0] = np.inf
    return st.astype(BF16), mv.astype(BF16)


@pytest.mark.parametrize("name", ["subnormal operand", "underflowing product",
                                  "cancellation below 2^-126", "infinity"])
def test_guard_falls_back_to_the_exact_path(name):
    st, mv = _guard_case(name)
    y = run_both(_kernel(1), st, mv)
    with np.errstate(invalid="ignore"):
        exact = st.astype(np.float64).T @ mv.astype(np.float64)
    np.testing.assert_array_equal(y, exact.astype(np.float32))
    np.testing.assert_array_equal(y.view(np.uint32), _unit_off(_kernel(1), st, mv).view(
        np.uint32))
    if name != "infinity":                   # what either unit alone would have produced
        for unit in model.UNITS:
            assert not np.array_equal(_model_chain(st, mv, unit), exact.astype(np.float32))


def _at_the_bound(rng, shape):
    """Random bf16 values of magnitude 2^-56 .. 2^-49 (so every product of two is at least
    2^-112, a multiple of 2^-126), random signs, inexact sums."""
    mag = 2.0 ** rng.uniform(-56, -49, shape)
    return (mag * rng.choice([-1.0, 1.0], shape)).astype(BF16)


def test_guard_admits_products_at_its_exponent_bound(rng, unit):
    """The unit then equals plain IEEE fp32 steps, cancellation included: DAZ/FTZ never
    show, yet the order is the unit's (not sgemm's)."""
    st, mv = _at_the_bound(rng, (64, 8)), _at_the_bound(rng, (64, 12))
    st[1::2, :] = st[0::2, :]                 # columns 0..3 of mv cancel pair by pair
    mv[1::2, :4] = -mv[0::2, :4]
    mv[1::2, :4] = (mv[1::2, :4].astype(np.float32) * 1.0078125).astype(BF16)
    y = run_both(_kernel(1), st, mv)
    sb, mb = st.view(np.uint16), mv.view(np.uint16)
    np.testing.assert_array_equal(y.view(np.uint32), model.bgemm(sb, mb, unit=unit).view(
        np.uint32))
    np.testing.assert_array_equal(y.view(np.uint32), model.bgemm(
        sb, mb, daz_ftz=False, unit=unit).view(np.uint32))
    assert np.abs(y[:, :4]).min() < 2.0 ** -100          # near-total cancellation
    assert not np.array_equal(y, _unit_off(_kernel(1), st, mv))


def test_without_the_unit_symbol_answers_no_unit():
    from nki.sim.blas import _no_bf16_unit
    assert _no_bf16_unit.ctypes(1, 1, 1, 1, None, 1, 0, None, 1, 0, None, 1, 0) == bf16.NO_UNIT


def test_folded_segments_equal_the_instructions_one_at_a_time(rng, unit):
    """``nki_bgemm`` with ``nseg`` > 1 (a folded K loop): each segment's dot is added to C
    as its own instruction's would be, so the bits are those of the unfolded chain."""
    from nki.sim.blas import nki_bgemm_py

    nseg, k, m, n, pitch = 3, 50, 20, 70, 96
    st = rng.standard_normal((nseg * k, pitch)).astype(BF16)
    mv = rng.standard_normal((nseg * k, pitch)).astype(BF16)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    c = c0.copy()
    status = nki_bgemm_py(m, n, k, nseg, st.ctypes.data, pitch, k * pitch, mv.ctypes.data,
                          pitch, k * pitch, c.ctypes.data, n, 1)
    expect = c0
    sb, mb = st.view(np.uint16), mv.view(np.uint16)
    for s in range(nseg):
        expect = model.bgemm(sb[s * k:(s + 1) * k, :m], mb[s * k:(s + 1) * k, :n], expect,
                             unit=unit)
    assert status == bf16.DONE
    np.testing.assert_array_equal(c.view(np.uint32), expect.view(np.uint32))


def test_a_refusal_found_late_leaves_c_untouched(rng, unit):
    """The guard can find a subnormal in the last columns only after C's first columns were
    computed (AMX scans the moving operand while it packs it): C must come back as it was."""
    from nki.sim.blas import nki_bgemm_py

    nseg, k, m, n = 3, 64, 40, 700
    st = rng.standard_normal((nseg * k, m)).astype(BF16)
    mv = rng.standard_normal((nseg * k, n)).astype(BF16)
    mv[nseg * k - 1, n - 1] = np.float32(2.0 ** -130)     # a bf16 subnormal, last row/column
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    c = c0.copy()
    status = nki_bgemm_py(m, n, k, nseg, st.ctypes.data, m, k * m, mv.ctypes.data, n, k * n,
                          c.ctypes.data, n, 1)
    assert status == bf16.REFUSED
    np.testing.assert_array_equal(c.view(np.uint32), c0.view(np.uint32))
