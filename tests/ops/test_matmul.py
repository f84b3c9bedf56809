"""nc_matmul / nc_transpose / dma_transpose and nl.matmul / nl.transpose / nl.load_transpose2d
against numpy, both backends; every rule of the family with its code and file:line."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import run_both

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiError, NkiUnsupportedError
from nki.sim.emit.matmul import reference_dma_transpose, reference_matmul, reference_transpose

BF16 = ml_dtypes.bfloat16
E4M3, E5M2, E4M3FN = ml_dtypes.float8_e4m3, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn
HERE = r"[\s\S]*test_matmul\.py:\d+"
U = 2.0**-24   # fp32 unit roundoff


def _fp32_bound(s64, m64, terms):
    """Worst-case error of fp32 accumulation of ``terms`` exact products per output."""
    return (terms + 2) * U * (np.abs(s64).T @ np.abs(m64)) + 1e-30


def _load(src, dtype=None):
    t = nl.ndarray(src.shape, dtype=dtype or src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src)
    return t


def _store_psum(ps, out):
    o = nl.ndarray(ps.shape, dtype=ps.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=ps)
    nisa.dma_copy(dst=out, src=o)


def _mm_kernel(dst_dtype=nl.float32, **opts):
    """stationary a [K, M...], moving b [K, N...] → HBM [M, N] through one nc_matmul."""
    def kernel(a, b):
        M = a.size // a.shape[0] // (2 if opts.get("perf_mode") else 1)
        N = b.size // b.shape[0] // (2 if opts.get("perf_mode") else 1)
        out = nl.ndarray((M, N), dtype=dst_dtype, buffer=nl.shared_hbm)
        ps = nl.ndarray((M, N), dtype=dst_dtype, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=_load(a), moving=_load(b), **opts)
        _store_psum(ps, out)
        return out
    return kernel


def _inputs(rng, shape_s, shape_m, sdt, mdt, integer=False):
    if integer:   # small integers: every dtype holds them and fp32 sums them exactly
        a, b = rng.integers(-8, 9, shape_s), rng.integers(-8, 9, shape_m)
    else:
        a, b = rng.standard_normal(shape_s), rng.standard_normal(shape_m)
    return a.astype(np.float32).astype(sdt), b.astype(np.float32).astype(mdt)


# ----- nc_matmul numerics -------------------------------------------------------------------
PAIRS = [(np.float32, np.float32), (BF16, BF16), (np.float16, np.float16), (E4M3, E4M3),
         (E5M2, E5M2), (E4M3, BF16), (E5M2, np.float16), (E4M3FN, E4M3FN)]


@pytest.mark.parametrize("sdt,mdt", PAIRS, ids=lambda d: np.dtype(d).name)
def test_nc_matmul_dtypes_within_fp32_accumulation(backend, rng, sdt, mdt):
    a, b = _inputs(rng, (100, 70), (100, 300), sdt, mdt)   # partial K, M and N
    y = nki.jit(_mm_kernel(), backend=backend)(a, b)
    err = np.abs(y.astype(np.float64) - reference_matmul(a, b))
    bound = _fp32_bound(a.astype(np.float64), b.astype(np.float64), 100)
    assert y.dtype == np.float32 and np.all(err <= bound)


@pytest.mark.parametrize("sdt,mdt", PAIRS, ids=lambda d: np.dtype(d).name)
def test_nc_matmul_exact_on_integer_valued_inputs(rng, sdt, mdt):
    a, b = _inputs(rng, (100, 70), (100, 40), sdt, mdt, integer=True)
    y = run_both(_mm_kernel(), a, b)
    np.testing.assert_array_equal(y, a.astype(np.float64).T @ b.astype(np.float64))


@pytest.mark.parametrize("k,m,n", [(128, 128, 512), (1, 1, 1), (37, 1, 200), (64, 90, 1),
                                   (128, 2, 2), (5, 128, 3)])
def test_nc_matmul_backends_agree_bit_for_bit(rng, k, m, n):
    a, b = _inputs(rng, (k, m), (k, n), np.float32, np.float32)
    y = run_both(_mm_kernel(), a, b)
    s64, m64 = a.astype(np.float64), b.astype(np.float64)
    assert np.all(np.abs(y - s64.T @ m64) <= _fp32_bound(s64, m64, k))


def test_nc_matmul_bf16_dst_on_trn3(backend, rng):
    a, b = _inputs(rng, (64, 32), (64, 48), BF16, BF16, integer=True)
    y = nki.jit(_mm_kernel(nl.bfloat16), backend=backend)(a, b)
    expect = (a.astype(np.float64).T @ b.astype(np.float64)).astype(np.float32).astype(BF16)
    np.testing.assert_array_equal(y.view(np.uint16), expect.view(np.uint16))


def test_nc_matmul_tf32_inputs(backend, rng):
    a, b = _inputs(rng, (64, 16), (64, 40), BF16, BF16)   # bf16 values are exact in tf32

    def kernel(x, y):
        out = nl.ndarray((16, 40), dtype=nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((16, 40), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=_load(x, nl.tfloat32), moving=_load(y, nl.float32))
        _store_psum(ps, out)
        return out

    y = nki.jit(kernel, backend=backend)(a.astype(np.float32), b.astype(np.float32))
    s64, m64 = a.astype(np.float64), b.astype(np.float64)
    assert np.all(np.abs(y - s64.T @ m64) <= _fp32_bound(s64, m64, 64))


def test_nc_matmul_double_row_fp8_contracts_over_both_rows(backend, rng):
    a, b = _inputs(rng, (64, 2, 24), (64, 2, 100), E4M3, E5M2, integer=True)
    kern = _mm_kernel(perf_mode=nisa.matmul_perf_mode.double_row, tile_position=(0, 0),
                      tile_size=(64, 128))
    y = nki.jit(kern, backend=backend)(a, b)
    expect = np.einsum("kjm,kjn->mn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_array_equal(y, expect)


# ----- accumulation -------------------------------------------------------------------------
def _kloop_kernel(flag, blocks=1, fresh_each_block=False):
    """K-loop of nc_matmul into one PSUM tile; ``flag(k)`` gives ``accumulate``. With
    ``blocks`` > 1 the same PSUM tile is reused for each column block after read-out."""
    def kernel(a, b):
        K, M = a.shape
        N = b.shape[1] // blocks
        out = nl.ndarray((M, N * blocks), dtype=nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
        for j in range(blocks):
            if fresh_each_block:
                ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range((K + 127) // 128):
                k0, k1 = k * 128, min(K, k * 128 + 128)
                nisa.nc_matmul(dst=ps, stationary=_load(a[k0:k1, :]),
                               moving=_load(b[k0:k1, j * N:(j + 1) * N]), accumulate=flag(k))
            _store_psum(ps, out[:, j * N:(j + 1) * N])
        return out
    return kernel


def _blocks(a, b, ks, blocks):
    s64, m64 = a.astype(np.float64), b.astype(np.float64)
    n = b.shape[1] // blocks
    return [sum(s64[k * 128:(k + 1) * 128].T @ m64[k * 128:(k + 1) * 128, j * n:(j + 1) * n]
                for k in ks) for j in range(blocks)]


@pytest.mark.parametrize("name,flag,ks", [
    ("idiom k>0", lambda k: k > 0, (0, 1, 2)),
    ("None", lambda k: None, (0, 1, 2)),
    ("False then True", lambda k: k != 0, (0, 1, 2)),
    ("always False", lambda k: False, (2,)),
])
def test_k_loop_accumulation(backend, rng, name, flag, ks):
    a, b = _inputs(rng, (300, 50), (300, 64), BF16, BF16)   # K tiles 128, 128, 44
    y = nki.jit(_kloop_kernel(flag), backend=backend)(a, b)
    expect = _blocks(a, b, ks, 1)[0]
    s64, m64 = a.astype(np.float64), b.astype(np.float64)
    assert np.all(np.abs(y - expect) <= _fp32_bound(s64, m64, 300))


def test_psum_tile_reused_after_readout(rng):
    a, b = _inputs(rng, (200, 32), (200, 80), np.float32, np.float32, integer=True)
    r0, r1 = _blocks(a, b, (0, 1), 2)
    restart = run_both(_kloop_kernel(lambda k: k > 0, blocks=2), a, b)
    np.testing.assert_array_equal(restart, np.hstack([r0, r1]))
    # accumulate=None: the reused location was written by a matmul, so block 1 adds to it
    auto = run_both(_kloop_kernel(lambda k: None, blocks=2), a, b)
    np.testing.assert_array_equal(auto, np.hstack([r0, r0 + r1]))
    fresh = run_both(_kloop_kernel(lambda k: None, blocks=2, fresh_each_block=True), a, b)
    np.testing.assert_array_equal(fresh, np.hstack([r0, r1]))


def test_accumulate_true_on_psum_zeroed_by_memset_warns_before_trn3(backend, rng):
    """NeuronCore-v2/v3 cannot accumulate a matmul onto values a non-matmul instruction
    wrote (AWS's nc_matmul note); the sum is still the one v4 computes."""
    a, b = _inputs(rng, (32, 8), (32, 16), np.float32, np.float32, integer=True)

    def kernel(x, y):
        out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        ps = nl.zeros((8, 16), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=_load(x), moving=_load(y), accumulate=True)
        _store_psum(ps, out)
        return out

    with pytest.warns(UserWarning, match=r"nki_accumulate_uninitialized.*non-matmul"
                                         r".*test_matmul\.py:\d+"):
        y = nki.jit(kernel, backend=backend, target="trn2")(a, b)
    np.testing.assert_array_equal(y, a.astype(np.float64).T @ b.astype(np.float64))


def test_accumulate_none_on_partly_matmul_written_psum_is_unsupported(rng):
    a, b = _inputs(rng, (16, 8), (16, 16), np.float32, np.float32)

    def kernel(x, y):
        ps = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)
        s, m = _load(x), _load(y)
        nisa.nc_matmul(dst=ps[:, 0:8], stationary=s, moving=m[:, 0:8])
        nisa.nc_matmul(dst=ps, stationary=s, moving=m)

    with pytest.raises(NkiUnsupportedError, match=r"nki_not_implemented.*only part" + HERE):
        nki.jit(kernel)(a, b)


# ----- transposes ---------------------------------------------------------------------------
def _bits(shape, dtype, rng):
    """Random bit patterns (NaNs and infs included) of a float or int dtype."""
    width = np.dtype(dtype).itemsize
    raw = rng.integers(0, 2**(8 * width), shape, dtype=np.uint64)
    return raw.astype({1: np.uint8, 2: np.uint16, 4: np.uint32}[width]).view(dtype)


def _same_bits(x, y):
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    np.testing.assert_array_equal(x.view(np.uint8), y.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, BF16, E4M3, np.int32, np.uint8])
def test_nc_matmul_transpose_mode_is_bit_exact(backend, rng, dtype):
    x = _bits((100, 70), dtype, rng)

    def kernel(a, eye):
        out = nl.ndarray((70, 100), dtype=a.dtype, buffer=nl.shared_hbm)
        ps = nl.ndarray((70, 100), dtype=a.dtype, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=_load(a), moving=_load(eye), is_transpose=True)
        _store_psum(ps, out)
        return out

    perm = np.eye(100, dtype=BF16)[:, ::-1].copy()   # a permutation selects rows
    _same_bits(nki.jit(kernel, backend=backend)(x, np.eye(100, dtype=BF16)), x.T)
    _same_bits(nki.jit(kernel, backend=backend)(x, perm), x[::-1].T)


def test_nc_matmul_is_transpose_on_trn1_is_a_matmul(rng):
    a, b = _inputs(rng, (16, 8), (16, 16), BF16, BF16, integer=True)
    y = nki.jit(_mm_kernel(is_transpose=True), target="trn1")(a, b)
    np.testing.assert_array_equal(y, a.astype(np.float64).T @ b.astype(np.float64))


def _nc_transpose_kernel(engine, dst_buf, src_buf, shape):
    def kernel(a):
        P, F = shape[0], int(np.prod(shape[1:]))
        out = nl.ndarray((F, P), dtype=a.dtype, buffer=nl.shared_hbm)
        x = _load(a)
        if src_buf is nl.psum:
            p = nl.ndarray(shape, dtype=a.dtype, buffer=nl.psum)
            nisa.tensor_copy(dst=p, src=x)
            x = p
        t = nl.ndarray((F, P), dtype=a.dtype, buffer=dst_buf)
        nisa.nc_transpose(dst=t, data=x, engine=engine)
        if dst_buf is nl.psum:
            _store_psum(t, out)
        else:
            nisa.dma_copy(dst=out, src=t)
        return out
    return kernel


@pytest.mark.parametrize("engine,dst,src,shape", [
    (nisa.engine.unknown, nl.psum, nl.sbuf, (100, 70)),
    (nisa.engine.tensor, nl.psum, nl.sbuf, (128, 128)),
    (nisa.engine.tensor, nl.psum, nl.sbuf, (64, 4, 8)),
    (nisa.engine.unknown, nl.sbuf, nl.sbuf, (32, 20)),
    (nisa.engine.vector, nl.sbuf, nl.psum, (20, 3, 10)),
    (nisa.engine.vector, nl.psum, nl.psum, (7, 32)),
])
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32, E5M2])
def test_nc_transpose_is_bit_exact(backend, rng, engine, dst, src, shape, dtype):
    x = _bits(shape, dtype, rng)
    y = nki.jit(_nc_transpose_kernel(engine, dst, src, shape), backend=backend)(x)
    _same_bits(y, reference_transpose(x))


def _dma_transpose_kernel(out_shape, via_sbuf=False):
    def kernel(a):
        out = nl.ndarray(out_shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(out_shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t, src=_load(a) if via_sbuf else a)
        nisa.dma_copy(dst=out, src=t)
        return out
    return kernel


@pytest.mark.parametrize("shape,axes,via_sbuf", [
    ((70, 100), (1, 0), False), ((100, 70), (1, 0), True), ((4, 6, 8), (2, 1, 0), False),
    ((5, 3, 4, 16), (3, 1, 2, 0), False),
    # big enough for the blocked gather's 32x32 tiles, with partial tiles at the edges
    ((120, 128), (1, 0), False), ((40, 33, 70), (2, 1, 0), False)])
@pytest.mark.parametrize("dtype", [BF16, np.float32, np.int8])
def test_dma_transpose_permutes_exactly(backend, rng, shape, axes, via_sbuf, dtype):
    x = _bits(shape, dtype, rng)
    expect = reference_dma_transpose(x, axes)
    y = nki.jit(_dma_transpose_kernel(expect.shape, via_sbuf), backend=backend)(x)
    _same_bits(y, expect)


# ----- nl wrappers --------------------------------------------------------------------------
@pytest.mark.parametrize("transpose_x", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_nl_matmul(backend, rng, transpose_x, dtype):
    a, b = _inputs(rng, (96, 80), (80 if not transpose_x else 96, 200), dtype, dtype)

    def kernel(x, y):
        res = nl.matmul(_load(x), _load(y), transpose_x=transpose_x)
        out = nl.ndarray(res.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        _store_psum(res, out)
        return out

    y = nki.jit(kernel, backend=backend)(a, b)
    s64 = a.astype(np.float64) if transpose_x else a.astype(np.float64).T
    m64 = b.astype(np.float64)
    assert np.all(np.abs(y - s64.T @ m64) <= _fp32_bound(s64, m64, s64.shape[0]))


@pytest.mark.parametrize("dtype,cast", [(BF16, None), (np.float32, nl.bfloat16),
                                        (np.int16, None)])
def test_nl_transpose_and_load_transpose2d(backend, rng, dtype, cast):
    x = _inputs(rng, (100, 60), (1, 1), dtype, dtype)[0]

    def kernel(a):
        t1 = nl.transpose(_load(a), dtype=cast)
        t2 = nl.load_transpose2d(a, dtype=cast)
        o1 = nl.ndarray(t1.shape, dtype=t1.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray(t2.shape, dtype=t2.dtype, buffer=nl.shared_hbm)
        _store_psum(t1, o1)
        nisa.dma_copy(dst=o2, src=t2)
        return o1, o2

    y1, y2 = nki.jit(kernel, backend=backend)(x)
    expect = x.T if cast is None else x.T.astype(BF16)
    _same_bits(y1, expect)
    _same_bits(y2, expect)


# ----- rules --------------------------------------------------------------------------------
def _mm_rule(k=64, m=32, n=64, sdt=nl.bfloat16, mdt=nl.bfloat16, ddt=nl.float32,
             bufs=(nl.sbuf, nl.sbuf, nl.psum), km=None, dshape=None, sshape=None, mshape=None,
             **opts):
    """A kernel issuing one nc_matmul on fresh tiles (the rule fires while tracing)."""
    def kernel():
        s = nl.ndarray(sshape or (k, m), dtype=sdt, buffer=bufs[0])
        mv = nl.ndarray(mshape or (km or k, n), dtype=mdt, buffer=bufs[1])
        d = nl.ndarray(dshape or (m, n), dtype=ddt, buffer=bufs[2])
        nisa.nc_matmul(dst=d, stationary=s, moving=mv, **opts)
    return kernel


@pytest.mark.parametrize("target,kw,code,words", [
    ("trn3", dict(bufs=(nl.psum, nl.sbuf, nl.psum)), "err_unsupported_memory", "stationary"),
    ("trn3", dict(bufs=(nl.sbuf, nl.sbuf, nl.sbuf)), "err_unsupported_memory", "'dst'"),
    ("trn3", dict(km=32), "err_num_partition_mismatch", "64 partitions"),
    ("trn3", dict(m=129, dshape=(128, 64)), "nki_matmul_free_size_exceeded",
     "stationary free size 129"),
    ("trn2", dict(n=600), "nki_matmul_free_size_exceeded", "limit of 512 on trn2"),
    ("trn3", dict(n=4100), "nki_matmul_free_size_exceeded", "limit of 4096 on trn3"),
    ("trn3", dict(n=8200, ddt=nl.bfloat16), "nki_matmul_free_size_exceeded", "8192"),
    ("trn3", dict(sdt=nl.int8), "nki_dtype_mismatch", "int8"),
    ("trn3", dict(sdt=nl.float32), "nki_dtype_mismatch", "pair only"),
    ("trn2", dict(sdt=nl.float8_e4m3fn, mdt=nl.float8_e4m3fn), "nki_dtype_mismatch",
     "TensorE inputs on trn2"),
    ("trn3", dict(sdt=nl.float8_e4m3fn, mdt=nl.float8_e4m3), "nki_dtype_mismatch", "mixed"),
    ("trn2", dict(ddt=nl.bfloat16), "nki_dtype_mismatch", "float32 PSUM on trn2"),
    ("trn3", dict(ddt=nl.float16), "nki_dtype_mismatch", "float32 or bfloat16"),
    ("trn3", dict(dshape=(32, 32)), "nki_shape_mismatch", r"\[32, 64\]"),
    ("trn3", dict(tile_position=(0, 0)), "nki_invalid_argument", "both"),
    ("trn1", dict(tile_position=(0, 0), tile_size=(32, 128)), "nki_invalid_argument",
     "one of"),
    ("trn3", dict(tile_position=(32, 0), tile_size=(64, 128)), "nki_invalid_argument",
     "multiple"),
    ("trn3", dict(tile_position=(0, 0), tile_size=(32, 128)),
     "err_num_partition_exceed_arch_limit", "row tile size 32"),
    ("trn3", dict(m=48, tile_position=(0, 0), tile_size=(64, 32)),
     "nki_matmul_free_size_exceeded", "column tile size 32"),
    ("trn3", dict(perf_mode=nisa.matmul_perf_mode.double_row), "nki_dtype_mismatch",
     "fp8 inputs"),
    ("trn1", dict(perf_mode="double_row"), "nki_invalid_argument", "NeuronCore-v3"),
    ("trn3", dict(perf_mode="fast"), "nki_invalid_argument", "not a matmul_perf_mode"),
    ("trn3", dict(perf_mode="double_row", sdt=nl.float8_e4m3, mdt=nl.float8_e4m3),
     "nki_shape_mismatch", "first free dim of 2"),
    ("trn2", dict(perf_mode="double_row", sdt=nl.float8_e4m3, mdt=nl.float8_e5m2,
                  sshape=(64, 2, 16), mshape=(64, 2, 32), dshape=(16, 32),
                  tile_position=(0, 0), tile_size=(64, 64)),
     "nki_invalid_argument", "column tiling"),
    ("trn3", dict(is_transpose=True), "nki_dtype_mismatch", "stationary dtype"),
    ("trn3", dict(is_transpose=True, ddt=nl.bfloat16, accumulate=True),
     "nki_invalid_argument", "cannot accumulate"),
])
def test_nc_matmul_rules(target, kw, code, words):
    with pytest.raises(NkiError, match=rf"{code}.*{words}" + HERE):
        nki.jit(_mm_rule(**kw), target=target)()


def test_moving_limit_differs_between_trn2_and_trn3(rng):
    a, b = _inputs(rng, (32, 8), (32, 600), BF16, BF16, integer=True)
    y = nki.jit(_mm_kernel())(a, b)   # default target trn3
    np.testing.assert_array_equal(y, a.astype(np.float64).T @ b.astype(np.float64))
    with pytest.raises(NkiError, match=r"nki_matmul_free_size_exceeded.*600" + HERE):
        nki.jit(_mm_kernel(), target="trn2")(a, b)


def test_trn2_dst_must_stay_in_one_psum_bank():
    def kernel():
        s = nl.ndarray((64, 32), dtype=nl.bfloat16, buffer=nl.sbuf)
        mv = nl.ndarray((64, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
        ps = nl.ndarray((32, 1024), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps[:, 256:768], stationary=s, moving=mv)

    with pytest.raises(NkiError, match=r"nki_psum_free_size_exceeded.*crossing" + HERE):
        nki.jit(kernel, target="trn2")()


def _t_rule(dshape, xshape, dbuf=nl.psum, xbuf=nl.sbuf, ddt=nl.float32, engine=None):
    def kernel():
        x = nl.ndarray(xshape, dtype=nl.float32, buffer=xbuf)
        d = nl.ndarray(dshape, dtype=ddt, buffer=dbuf)
        nisa.nc_transpose(dst=d, data=x, engine=engine or nisa.engine.unknown)
    return kernel


@pytest.mark.parametrize("kw,code,words", [
    (dict(dshape=(8, 8), xshape=(8, 8), xbuf=nl.psum), "err_unsupported_memory", "'data'"),
    (dict(dshape=(8, 8), xshape=(8, 8), dbuf=nl.sbuf, engine=nisa.engine.tensor),
     "err_unsupported_memory", "'dst'"),
    (dict(dshape=(40, 40), xshape=(40, 40), dbuf=nl.sbuf),
     "err_size_of_dimension_exceed_arch_limit", r"vector engine transpose limit \[32, 32\]"),
    (dict(dshape=(8, 200), xshape=(8, 200)), "err_size_of_dimension_exceed_arch_limit",
     r"\[128, 128\]"),
    (dict(dshape=(8, 16), xshape=(8, 16)), "nki_shape_mismatch", r"\[16, 8\]"),
    (dict(dshape=(16, 8), xshape=(8, 16), ddt=nl.bfloat16), "nki_dtype_mismatch", "float32"),
    (dict(dshape=(8, 8), xshape=(8, 8), engine=nisa.engine.gpsimd), "nki_invalid_argument",
     "gpsimd"),
])
def test_nc_transpose_rules(kw, code, words):
    with pytest.raises(NkiError, match=rf"{code}.*{words}" + HERE):
        nki.jit(_t_rule(**kw))()


@pytest.mark.parametrize("dshape,dbuf,ddt,opts,code,words", [
    ((16, 8), nl.psum, nl.bfloat16, {}, "err_unsupported_memory", "'dst'"),
    ((16, 8), nl.sbuf, nl.float32, {}, "nki_dtype_mismatch", "same dtype"),
    ((8, 16), nl.sbuf, nl.bfloat16, {}, "nki_shape_mismatch", r"\(16, 8\)"),
    ((16, 8), nl.sbuf, nl.bfloat16, dict(axes=(0, 1)), "nki_invalid_argument", "axes"),
    ((16, 8), nl.sbuf, nl.bfloat16, dict(dge_mode="swdge"), "nki_invalid_argument", "hwdge"),
    ((16, 8), nl.sbuf, nl.bfloat16, dict(oob_mode="skip"), "nki_invalid_argument",
     "indirect"),
])
def test_dma_transpose_rules(dshape, dbuf, ddt, opts, code, words):
    def kernel(a):
        d = nl.ndarray(dshape, dtype=ddt, buffer=dbuf)
        nisa.dma_transpose(dst=d, src=a, **opts)

    with pytest.raises(NkiError, match=rf"{code}.*{words}" + HERE):
        nki.jit(kernel)(np.zeros((8, 16), BF16))


@pytest.mark.parametrize("target,opts,src_buf,code,words", [
    ("trn1", dict(dge_mode="hwdge"), nl.sbuf, "nki_invalid_argument", "NeuronCore-v3"),
    ("trn3", dict(priority=7), nl.sbuf, "nki_invalid_argument", "0-3"),
    ("trn3", {}, nl.psum, "err_unsupported_memory", "'src'"),
])
def test_dma_transpose_option_rules(target, opts, src_buf, code, words):
    def kernel():
        s = nl.ndarray((8, 16), dtype=nl.bfloat16, buffer=src_buf)
        nisa.dma_transpose(dst=nl.ndarray((16, 8), dtype=nl.bfloat16, buffer=nl.sbuf), src=s,
                           **opts)

    with pytest.raises(NkiError, match=rf"{code}.*{words}" + HERE):
        nki.jit(kernel, target=target)()


def test_dma_transpose_rank_and_hwdge_dtype():
    def kernel(a, b):
        nisa.dma_transpose(dst=nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf), src=b,
                           dge_mode="hwdge")

    with pytest.raises(NkiError, match=r"nki_dtype_mismatch.*2-byte" + HERE):
        nki.jit(kernel)(np.zeros((2,) * 5, np.float32), np.zeros((8, 4), np.float32))

    def kernel5(a, b):
        nisa.dma_transpose(dst=nl.ndarray((2, 2), dtype=nl.float32, buffer=nl.sbuf), src=a)

    with pytest.raises(NkiError, match=r"err_exceed_max_supported_dimension.*5 dims" + HERE):
        nki.jit(kernel5)(np.zeros((2,) * 5, np.float32), np.zeros((8, 4), np.float32))


@pytest.mark.parametrize("api,shape,buffer,code,words", [
    ("transpose", (8, 4, 4), nl.sbuf, "err_exceed_max_supported_dimension", "2-D"),
    ("transpose", (64, 200), nl.sbuf, "err_size_of_dimension_exceed_arch_limit", "128"),
    ("matmul", (64, 64), nl.private_hbm, "err_unsupported_memory", "'x'"),
    ("matmul_k", (64, 200), nl.sbuf, "err_size_of_dimension_exceed_arch_limit", "128"),
])
def test_nl_rules(api, shape, buffer, code, words):
    def kernel():
        x = nl.ndarray(shape, dtype=nl.float32, buffer=buffer)
        if api == "transpose":
            nl.transpose(x)
        else:
            nl.matmul(x, nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.sbuf))

    with pytest.raises(NkiError, match=rf"{code}.*{words}" + HERE):
        nki.jit(kernel)()


def test_nl_matmul_contraction_mismatch():
    def kernel():
        x = nl.ndarray((64, 32), dtype=nl.bfloat16, buffer=nl.sbuf)
        nl.matmul(x, nl.ndarray((48, 8), dtype=nl.bfloat16, buffer=nl.sbuf), transpose_x=True)

    with pytest.raises(NkiError, match=r"err_num_partition_mismatch.*contraction" + HERE):
        nki.jit(kernel)()


def test_load_transpose2d_rules():
    def kernel(a):
        nl.load_transpose2d(a)

    def from_sbuf():
        nl.load_transpose2d(nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf))

    with pytest.raises(NkiError, match=r"err_unsupported_memory.*'src'" + HERE):
        nki.jit(from_sbuf)()

    with pytest.raises(NkiError, match=r"err_num_partition_exceed_arch_limit.*200" + HERE):
        nki.jit(kernel)(np.zeros((64, 200), np.float32))
    with pytest.raises(NkiError, match=r"err_exceed_max_supported_dimension.*3 dims" + HERE):
        nki.jit(kernel)(np.zeros((4, 4, 4), np.float32))


# ----- K loops run as one row (nki/sim/emit/matmul.py fold_k_loop) ---------------------------
def _k_loop_kernel(breaker: bool):
    """st [8 x 128, M], mv [8 x 128, N] → fp32 [M, N]: one PSUM tile over 8 K tiles, all
    resident in SBUF; ``breaker`` puts an unrelated memset in the loop body, so the loop
    runs one instruction at a time (the reference for the folded row)."""
    def kernel(st, mv):
        KT, M, N = st.shape[0] // 128, st.shape[1], mv.shape[1]
        out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((128, KT, M), dtype=st.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, KT, N), dtype=mv.dtype, buffer=nl.sbuf)
        for t, src, F in ((a, st, M), (b, mv, N)):      # row kt * 128 + p → [p, kt, :]
            rs, cs = src.strides
            nisa.dma_copy(dst=t, src=src.ap([[rs, 128], [128 * rs, KT], [cs, F]]))
        junk = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.sbuf)
        ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
        for kt in range(KT):      # the library's idiom: the first one stores
            nisa.nc_matmul(dst=ps, stationary=a[:, kt, :], moving=b[:, kt, :], accumulate=kt > 0)
            if breaker:
                nisa.memset(dst=junk, value=float(kt))
        _store_psum(ps, out)
        return out
    return kernel


@pytest.mark.parametrize("dtype", [BF16, E4M3, np.float32, np.float16])
def test_a_k_loop_folded_into_one_row_gives_the_instructions_bits(rng, dtype):
    st = rng.standard_normal((1024, 96)).astype(dtype)
    mv = rng.standard_normal((1024, 200)).astype(dtype)
    folded = run_both(_k_loop_kernel(False), st, mv)
    one_by_one = run_both(_k_loop_kernel(True), st, mv)
    np.testing.assert_array_equal(folded.view(np.uint32), one_by_one.view(np.uint32))
    s64, m64 = st.astype(np.float64), mv.astype(np.float64)
    assert np.all(np.abs(folded - s64.T @ m64) <= _fp32_bound(s64, m64, 1024))
    # the folded program has one matmul row standing for all 8 instructions (the first, which
    # stores, and the 7 accumulating ones); with the breaker, 8 rows, none folded
    for breaker, expect in ((False, [8]), (True, [0] * 8)):
        gen = nki.jit(_k_loop_kernel(breaker)).specialize(st, mv).cores[0].generated
        trips = [int(r[9]) for r, h in zip(gen.int_table, gen.helpers) if h == "nc_matmul"]
        assert sorted(trips) == expect
