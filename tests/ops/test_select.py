"""iota, selects, predicated copies, scalar_tensor_tensor, dropout, stream shuffle, top-8 and
nl.where / nl.broadcast_to against numpy, both backends; rule violations with code and
file:line."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiValidationError
from nki.sim.emit.select import (
    reference_affine,
    reference_find_index8,
    reference_match_replace8,
    reference_max8,
    reference_range_select,
    reference_select,
    reference_shuffle,
    reference_stt,
)

BF16 = ml_dtypes.bfloat16
F32_MIN = np.finfo(np.float32).min


def _jit(kernel, **options):
    """nki.jit without the disk program cache: these kernels are closures over parameters
    that the cache key cannot tell apart (operator tokens share code, lists are not hashed)."""
    return nki.jit(kernel, cache=False, **options)


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def _exact(y, expect):
    assert y.dtype == expect.dtype and y.shape == expect.shape
    np.testing.assert_array_equal(_bits(y), _bits(expect))


def _sbuf(x):
    """Load an HBM view into a new SBUF tile of its shape."""
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _out(t, shape=None):
    """Copy an SBUF tile to a new shared-HBM output."""
    out = nl.ndarray(shape or t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def _err(code, *words):
    return "(?s)" + code + ".*" + ".*".join(words) + r".*test_select\.py:\d+"


# ----- iota --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int32, np.float32, BF16, np.int8])
def test_iota_matches_reference(backend, dtype):
    pattern = [[100, 2], [-3, 3], [1, 4]]

    def kernel(x):
        t = nl.ndarray((100, 2, 12), dtype=x.dtype, buffer=nl.sbuf)
        nisa.iota(dst=t, pattern=pattern, offset=5, channel_multiplier=7)
        return _out(t)

    y = _jit(kernel, backend=backend)(np.zeros((1, 1), dtype))
    ref = reference_affine(100, pattern, 5, 7).reshape(100, 2, 12)
    if dtype is np.int8:
        ref = np.clip(ref, -128, 127)          # int32 results saturate into narrow ints
    _exact(y, ref.astype(np.float32).astype(dtype) if dtype is BF16 else ref.astype(dtype))


def test_iota_wraps_like_int32(backend):
    def kernel(x):
        t = nl.ndarray((4, 8), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=t, pattern=[[2**30, 8]], offset=2**31 - 1, channel_multiplier=-2**30)
        return _out(t)

    y = _jit(kernel, backend=backend)(np.zeros((1, 1), np.int32))
    _exact(y, reference_affine(4, [[2**30, 8]], 2**31 - 1, -2**30).astype(np.int32))


# ----- affine_select -----------------------------------------------------------------------
def _causal_kernel(fill, on_false_dtype=None):
    def kernel(s):
        P, F = s.shape
        out = nl.ndarray(s.shape, dtype=on_false_dtype or s.dtype, buffer=nl.shared_hbm)
        for t in nl.affine_range((P + 127) // 128):
            p0, p1 = t * 128, min(P, t * 128 + 128)
            x = _sbuf(s[p0:p1, :])
            d = x if on_false_dtype is None else \
                nl.ndarray((p1 - p0, F), dtype=on_false_dtype, buffer=nl.sbuf)
            # keep key j <= query p0 + p: offset shifts the diagonal per row tile
            nisa.affine_select(dst=d, pattern=[[-1, F]], channel_multiplier=1, on_true_tile=x,
                               on_false_value=fill, cmp_op=nl.greater_equal, offset=p0)
            nisa.dma_copy(dst=out[p0:p1, :], src=d)
        return out
    return kernel


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_affine_select_causal_mask(backend, rng, dtype):
    s = rng.standard_normal((200, 160)).astype(dtype)     # one full and one partial row tile
    y = _jit(_causal_kernel(-9984.0), backend=backend)(s)
    keep = np.tril(np.ones(s.shape, bool))
    _exact(y, np.where(keep, s, np.asarray(-9984.0, dtype)))


def test_affine_select_int32_exact_and_cast(backend, rng):
    s = rng.integers(-2**31, 2**31 - 1, (64, 40)).astype(np.int32)   # beyond fp32 precision
    y = _jit(_causal_kernel(-7.0), backend=backend)(s)
    _exact(y, np.where(np.tril(np.ones(s.shape, bool)), s, np.int32(-7)))
    b = rng.standard_normal((64, 40)).astype(BF16)
    y = _jit(_causal_kernel(F32_MIN, np.float32), backend=backend)(b)   # cast via fp32
    _exact(y, reference_select(np.tril(np.ones(b.shape, bool)), b.astype(np.float32), F32_MIN))


@pytest.mark.parametrize("op,ref", [(nl.equal, np.equal), (nl.not_equal, np.not_equal),
                                    (nl.less, np.less), (nl.greater, np.greater)])
def test_affine_select_cmp_ops_multidim(backend, rng, op, ref):
    pattern = [[3, 4], [-1, 6]]

    def kernel(s):
        x = _sbuf(s)
        d = nl.ndarray(s.shape, dtype=s.dtype, buffer=nl.sbuf)
        nisa.affine_select(dst=d, pattern=pattern, channel_multiplier=-2, on_true_tile=x,
                           on_false_value=0.5, cmp_op=op, offset=4)
        return _out(d)

    s = rng.standard_normal((50, 4, 6)).astype(np.float32)
    y = _jit(kernel, backend=backend)(s)
    mask = ref(reference_affine(50, pattern, 4, -2), 0).reshape(s.shape)
    _exact(y, np.where(mask, s, np.float32(0.5)))


# ----- range_select ------------------------------------------------------------------------
def _range_kernel(dst_dtype, chain=False):
    def kernel(s, lo, hi):
        x, b0, b1 = _sbuf(s), _sbuf(lo), _sbuf(hi)
        d = nl.ndarray(s.shape, dtype=dst_dtype, buffer=nl.sbuf)
        red = nl.ndarray((s.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        if chain:   # first half resets the accumulators, second half reduces on top
            h = s.shape[1] // 2
            nisa.range_select(dst=d[:, 0:h], on_true_tile=x[:, 0:h], comp_op0=nl.greater_equal,
                              comp_op1=nl.less, bound0=b0, bound1=b1,
                              reduce_cmd=nisa.reduce_cmd.reset_reduce)
            nisa.range_select(dst=d[:, h:], on_true_tile=x[:, h:], comp_op0=nl.greater_equal,
                              comp_op1=nl.less, bound0=b0, bound1=b1, range_start=h,
                              reduce_cmd=nisa.reduce_cmd.reduce, reduce_res=red)
        else:
            nisa.range_select(dst=d, on_true_tile=x, comp_op0=nl.greater_equal,
                              comp_op1=nl.less, bound0=b0, bound1=b1, reduce_res=red)
        return _out(d), _out(red)
    return kernel


@pytest.mark.parametrize("dst_dtype,chain", [(np.float32, False), (BF16, False),
                                             (np.float32, True)])
def test_range_select_with_max_reduction(backend, rng, dst_dtype, chain):
    s = rng.standard_normal((100, 64)).astype(np.float32)
    lo = rng.integers(-4, 40, (100, 1)).astype(np.float32)
    hi = (lo + rng.integers(0, 30, (100, 1))).astype(np.float32)   # some rows select nothing
    y, red = _jit(_range_kernel(dst_dtype, chain), backend=backend)(s, lo, hi)
    ref, ref_max = reference_range_select(s, np.greater_equal, np.less, lo, hi)
    _exact(y, ref.astype(dst_dtype))
    _exact(red, ref_max)        # fp32 min survives in the fp32 reduction even for bf16 dst


# ----- select_reduce -----------------------------------------------------------------------
def _select_reduce_kernel(on_false_tile, reverse, cmd):
    def kernel(s, pred, fcol):
        x, p = _sbuf(s), _sbuf(pred)
        f = _sbuf(fcol) if on_false_tile else -1.5
        d = nl.ndarray(s.shape, dtype=s.dtype, buffer=nl.sbuf)
        red = nl.ndarray((s.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.select_reduce(dst=d, predicate=p, on_true=x, on_false=f, reduce_res=red,
                           reduce_cmd=cmd, reverse_pred=reverse)
        return _out(d), _out(red)
    return kernel


@pytest.mark.parametrize("dtype,on_false_tile,reverse,cmd", [
    (np.float32, False, False, nisa.reduce_cmd.reset_reduce),
    (BF16, True, True, nisa.reduce_cmd.reset_reduce),
    (np.int16, True, False, nisa.reduce_cmd.idle)])
def test_select_reduce_matches_numpy(backend, rng, dtype, on_false_tile, reverse, cmd):
    s = (rng.standard_normal((100, 48)) * 100).astype(dtype)
    pred = rng.integers(0, 3, (100, 48)).astype(np.uint8)
    fcol = rng.standard_normal((100, 1)).astype(np.float32)
    y, red = _jit(_select_reduce_kernel(on_false_tile, reverse, cmd), backend=backend)(
        s, pred, fcol)
    mask = (pred != 0) != reverse
    ref = reference_select(mask, s.astype(np.float32), fcol if on_false_tile else -1.5)
    _exact(y, (np.rint(ref) if dtype is np.int16 else ref).astype(dtype))   # ints: RNE
    _exact(red, ref.max(axis=1, keepdims=True))


def test_select_reduce_accumulates_across_calls(backend, rng):
    def kernel(s, pred):
        x, p = _sbuf(s), _sbuf(pred)
        d = nl.ndarray(s.shape, dtype=s.dtype, buffer=nl.sbuf)
        red = nl.ndarray((s.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        for k in range(3):
            cmd = nisa.reduce_cmd.reset_reduce if k == 0 else nisa.reduce_cmd.reduce
            nisa.select_reduce(dst=d[:, 16 * k:16 * k + 16], predicate=p[:, 16 * k:16 * k + 16],
                               on_true=x[:, 16 * k:16 * k + 16], on_false=-50.0,
                               reduce_res=red if k == 2 else None, reduce_cmd=cmd)
        return _out(red)

    s = rng.standard_normal((32, 48)).astype(np.float32)
    pred = rng.integers(0, 2, (32, 48)).astype(np.uint8)
    red = _jit(kernel, backend=backend)(s, pred)
    _exact(red, np.where(pred != 0, s, np.float32(-50.0)).max(axis=1, keepdims=True))


# ----- tensor_copy_predicated --------------------------------------------------------------
@pytest.mark.parametrize("dtype,pdtype,reverse", [(np.float32, np.uint8, False),
                                                  (BF16, np.uint16, True),
                                                  (np.int32, np.uint32, False)])
def test_tensor_copy_predicated_keeps_dst(backend, rng, dtype, pdtype, reverse):
    def kernel(a, b, pred):
        P = a.shape[0]
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for t in nl.affine_range((P + 127) // 128):
            p0, p1 = t * 128, min(P, t * 128 + 128)
            d, s, p = _sbuf(a[p0:p1, :]), _sbuf(b[p0:p1, :]), _sbuf(pred[p0:p1, :])
            nisa.tensor_copy_predicated(dst=d, src=s, predicate=p, reverse_pred=reverse)
            nisa.dma_copy(dst=out[p0:p1, :], src=d)
        return out

    if dtype is np.int32:
        a, b = (rng.integers(-2**31, 2**31 - 1, (200, 24)).astype(dtype) for _ in range(2))
    else:
        a, b = (rng.standard_normal((200, 24)).astype(dtype) for _ in range(2))
    pred = (rng.integers(0, 2, (200, 24)) * rng.integers(1, 300, (200, 24))).astype(pdtype)
    y = _jit(kernel, backend=backend)(a, b, pred)
    _exact(y, np.where((pred != 0) != reverse, b, a))


def test_tensor_copy_predicated_scalar_src(backend, rng):
    def kernel(a, pred):
        d, p = _sbuf(a), _sbuf(pred)
        nisa.tensor_copy_predicated(dst=d, src=123456789, predicate=p)
        return _out(d)

    a = rng.integers(-100, 100, (40, 16)).astype(np.int32)
    pred = rng.integers(0, 2, (40, 16)).astype(np.uint8)
    _exact(_jit(kernel, backend=backend)(a, pred), np.where(pred != 0, np.int32(123456789), a))


# ----- scalar_tensor_tensor ----------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("vector_operand0", [False, True])
@pytest.mark.parametrize("op0,op1,r0,r1,ref0,ref1", [
    (nl.subtract, nl.multiply, False, False, np.subtract, np.multiply),
    (nl.subtract, nl.subtract, True, True, np.subtract, np.subtract),
    (nl.maximum, nl.add, False, True, np.maximum, np.add)])
def test_scalar_tensor_tensor(backend, rng, dtype, vector_operand0, op0, op1, r0, r1, ref0,
                              ref1):
    def kernel(x, s0, w):
        P = x.shape[0]
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for t in nl.affine_range((P + 127) // 128):
            p0, p1 = t * 128, min(P, t * 128 + 128)
            a, u = _sbuf(x[p0:p1, :]), _sbuf(w[p0:p1, :])
            o0 = _sbuf(s0[p0:p1, :]) if vector_operand0 else 0.375
            nisa.scalar_tensor_tensor(dst=a, data=a, op0=op0, operand0=o0, op1=op1,
                                      operand1=u, reverse0=r0, reverse1=r1)
            nisa.dma_copy(dst=out[p0:p1, :], src=a)
        return out

    x, w = (rng.standard_normal((200, 32)).astype(dtype) for _ in range(2))
    s0 = rng.standard_normal((200, 1)).astype(np.float32)
    y = _jit(kernel, backend=backend)(x, s0, w)
    ref = reference_stt(x, ref0, s0 if vector_operand0 else 0.375, ref1, w, r0, r1)
    _exact(y, ref.astype(dtype))


# ----- dropout -----------------------------------------------------------------------------
def _dropout_kernel(prob_tile, twice=False):
    def kernel(x, prob):
        a = _sbuf(x)
        d = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dropout(dst=d, data=a, prob=_sbuf(prob) if prob_tile else 0.25)
        if not twice:
            return _out(d)
        e = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dropout(dst=e, data=a, prob=0.25)
        return _out(d), _out(e)
    return kernel


def test_dropout_statistics_and_determinism(backend, rng):
    x = (rng.random((128, 512)) + 1.0).astype(np.float32)          # no zeros in the data
    k = _jit(_dropout_kernel(False, twice=True), backend=backend)
    y, z = k(x, np.zeros((128, 1), np.float32))
    keep = y != 0
    assert abs(keep.mean() - 0.75) < 0.01                    # 65536 draws: sigma ~ 0.0017
    assert np.abs(keep.mean(axis=1) - 0.75).max() < 0.15     # no partition is stuck
    assert np.abs(keep.mean(axis=0) - 0.75).max() < 0.2      # no element index is stuck
    np.testing.assert_array_equal(y[keep], x[keep])          # kept values are not rescaled
    agree = (keep == (z != 0)).mean()                        # the second call draws afresh
    assert abs(agree - (0.75**2 + 0.25**2)) < 0.02
    y2, z2 = k(x, np.zeros((128, 1), np.float32))            # a new run repeats the draws
    _exact(y2, y)
    _exact(z2, z)


def test_dropout_prob_tile_and_int_exact(backend, rng):
    prob = np.linspace(0.0, 1.0, 100, dtype=np.float32).reshape(100, 1)
    x = rng.integers(2**25, 2**31 - 1, (100, 512)).astype(np.int32)
    y = _jit(_dropout_kernel(True), backend=backend)(x, prob)
    keep = y != 0
    np.testing.assert_array_equal(y[keep], x[keep])
    assert keep[0].all() and not keep[-1].any()              # prob 0 keeps, prob 1 drops all
    assert np.abs(keep.mean(axis=1) - (1 - prob[:, 0])).max() < 0.1


def test_dropout_backends_agree(rng):
    x = rng.standard_normal((64, 96)).astype(BF16)
    args = (x, np.zeros((64, 1), np.float32))
    a, b = (_jit(_dropout_kernel(False, twice=True), backend=be)(*args)
            for be in ("numba", "python"))
    for u, v in zip(a, b):
        _exact(u, v)


# ----- nc_stream_shuffle -------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [BF16, np.int32])
def test_nc_stream_shuffle_quadrants(backend, rng, dtype):
    mask = [int(v) for v in rng.integers(0, 32, 32)]
    mask[3] = mask[17] = 255

    def kernel(a, b):
        s, d = _sbuf(a), _sbuf(b)
        nisa.nc_stream_shuffle(dst=d, src=s, shuffle_mask=mask)
        return _out(d)

    a, b = (rng.integers(-2**31, 2**31 - 1, (128, 20)).astype(np.int32) for _ in range(2))
    if dtype is BF16:   # arbitrary bit patterns, NaNs included: the shuffle moves bits
        a, b = (np.ascontiguousarray(v.view(np.uint16)[:, :20]).view(BF16) for v in (a, b))
    y = _jit(kernel, backend=backend)(a, b)
    _exact(y, reference_shuffle(b, a, mask))


def test_nc_stream_shuffle_across_quadrants_in_place(backend, rng):
    mask = list(range(31, -1, -1))

    def kernel(a):
        s = _sbuf(a)
        nisa.nc_stream_shuffle(dst=s[0:32, :], src=s[64:96, :], shuffle_mask=mask)
        nisa.nc_stream_shuffle(dst=s[64:96, :], src=s[64:96, :], shuffle_mask=mask)
        return _out(s)

    a = rng.standard_normal((96, 8)).astype(np.float32)
    y = _jit(kernel, backend=backend)(a)
    expect = a.copy()
    expect[0:32] = a[64:96][::-1]
    expect[64:96] = a[64:96][::-1]
    _exact(y, expect)


# ----- max8 / nc_find_index8 / nc_match_replace8 -------------------------------------------
def _top8_data(rng, shape, dtype):
    x = rng.integers(-20, 20, shape).astype(np.float32) / 4   # many repeated values
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int16])
def test_max8_find_index8(backend, rng, dtype):
    def kernel(a):
        x = _sbuf(a)
        top = nl.ndarray((a.shape[0], 8), dtype=nl.float32, buffer=nl.sbuf)
        idx = nl.ndarray((a.shape[0], 8), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.max8(dst=top, src=x)
        nisa.nc_find_index8(dst=idx, data=x, vals=top)
        return _out(top), _out(idx)

    a = _top8_data(rng, (100, 4, 30), dtype)
    top, idx = _jit(kernel, backend=backend)(a)
    _exact(top, reference_max8(a.astype(np.float32)))
    _exact(idx, reference_find_index8(a.astype(np.float32), top).astype(np.uint32))
    flat = a.astype(np.float32).reshape(100, -1)
    np.testing.assert_array_equal(np.take_along_axis(flat, idx.astype(np.int64), 1), top)
    assert all(len(set(r)) == 8 for r in idx)        # repeated values: successive occurrences


def test_find_index8_not_found_is_all_ones(backend):
    def kernel(a, v):
        idx = nl.ndarray((a.shape[0], 8), dtype=nl.uint16, buffer=nl.sbuf)
        nisa.nc_find_index8(dst=idx, data=_sbuf(a), vals=_sbuf(v))
        return _out(idx)

    a = np.tile(np.arange(16, dtype=np.float32), (4, 1))
    v = np.tile(np.array([3, 3, 99, 0, 15, -1, 7, 7], np.float32), (4, 1))
    a[2, 5] = 3.0
    y = _jit(kernel, backend=backend)(a, v)
    expect = np.tile(np.array([3, 0xFFFF, 0xFFFF, 0, 15, 0xFFFF, 7, 0xFFFF], np.uint16), (4, 1))
    expect[2, 1] = 5
    _exact(y, expect)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_match_replace8_topk_loop(backend, rng, dtype):
    def kernel(a):
        x = _sbuf(a)
        top = nl.ndarray((a.shape[0], 8), dtype=nl.float32, buffer=nl.sbuf)
        idx = nl.ndarray((a.shape[0], 8), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.max8(dst=top, src=x)
        nisa.nc_match_replace8(dst=x, data=x, vals=top, imm=-1e9, dst_idx=idx)
        return _out(x), _out(idx)

    a = _top8_data(rng, (64, 40), dtype)
    y, idx = _jit(kernel, backend=backend)(a)
    ref, ref_idx = reference_match_replace8(a, reference_max8(a.astype(np.float32)), -1e9)
    _exact(y, ref.astype(dtype))
    _exact(idx, ref_idx.astype(np.uint32))


# ----- nl.where / nl.broadcast_to / nl.dropout / nl.device_print ---------------------------
@pytest.mark.parametrize("case", ["tiles", "scalar_y", "scalar_x", "cast"])
def test_nl_where(backend, rng, case):
    def kernel(c, a, b):
        cond, x, y = _sbuf(c), _sbuf(a), _sbuf(b)
        if case == "tiles":
            r = nl.where(cond, x, y)
        elif case == "scalar_y":
            r = nl.where(cond, x, -3.0)
        elif case == "scalar_x":
            r = nl.where(cond, 2.5, y)
        else:
            r = nl.where(cond, x, y, dtype=nl.bfloat16)
        return _out(r)

    c = (rng.random((100, 24)) > 0.5).astype(np.float32)
    a = rng.integers(-2**31, 2**31 - 1, (100, 24)).astype(np.int32)
    b = rng.integers(-2**31, 2**31 - 1, (100, 24)).astype(np.int32)
    y = _jit(kernel, backend=backend)(c, a, b)
    m = c != 0
    expect = {"tiles": np.where(m, a, b), "scalar_y": np.where(m, a, np.int32(-3)),
              "scalar_x": np.where(m, np.int32(2), b),   # 2.5 → int32 rounds to even
              "cast": np.where(m, a, b).astype(np.float32).astype(BF16)}[case]
    _exact(y, expect)


@pytest.mark.parametrize("src_shape,shape", [((1, 24), (100, 24)), ((100, 1), (100, 24)),
                                             ((1, 1, 6), (128, 4, 6))])
def test_nl_broadcast_to(backend, rng, src_shape, shape):
    def kernel(a):
        return _out(nl.broadcast_to(_sbuf(a), shape))

    a = rng.standard_normal(src_shape).astype(BF16)
    _exact(_jit(kernel, backend=backend)(a), np.broadcast_to(a, shape).copy())


def test_nl_broadcast_to_cast(backend, rng):
    def kernel(a):
        return _out(nl.broadcast_to(_sbuf(a), (40, 8), dtype=nl.float32))

    a = rng.standard_normal((1, 8)).astype(BF16)
    _exact(_jit(kernel, backend=backend)(a), np.broadcast_to(a, (40, 8)).astype(np.float32))


def test_nl_dropout_wrapper(backend, rng):
    def kernel(a):
        return _out(nl.dropout(_sbuf(a), 0.5))

    a = (rng.random((64, 128)) + 1).astype(np.float32)
    y = _jit(kernel, backend=backend)(a)
    assert abs((y != 0).mean() - 0.5) < 0.03
    np.testing.assert_array_equal(y[y != 0], a[y != 0])


# ----- rule violations ---------------------------------------------------------------------
def _raise(body, *arrays, **jit):
    def kernel(a):
        body(a)
        return a

    _jit(kernel, **jit)(*(arrays or (np.zeros((64, 32), np.float32),)))


def _iota_psum(a):
    t = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.psum)
    nisa.iota(dst=t, pattern=[[1, 32]])


def _iota_bad_pattern(a):
    nisa.iota(dst=_sbuf(a), pattern=[[1, 8], [1, 3]])


def _iota_five_dims(a):
    nisa.iota(dst=_sbuf(a), pattern=[[1, 2]] * 5)


def _affine_partitions(a):
    d = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.affine_select(dst=d, pattern=[[1, 32]], channel_multiplier=0, on_true_tile=_sbuf(a),
                       on_false_value=0.0)


def _affine_cmp(a):
    x = _sbuf(a)
    nisa.affine_select(dst=x, pattern=[[1, 32]], channel_multiplier=0, on_true_tile=x,
                       on_false_value=0.0, cmp_op=nl.add)


def _range_on_trn1(a):
    x, b = _sbuf(a), nl.zeros((64, 1), dtype=nl.float32)
    nisa.range_select(dst=x, on_true_tile=x, comp_op0=nl.less, comp_op1=nl.less, bound0=b,
                      bound1=b)


def _range_fill(a):
    x, b = _sbuf(a), nl.zeros((64, 1), dtype=nl.float32)
    nisa.range_select(dst=x, on_true_tile=x, comp_op0=nl.less, comp_op1=nl.less, bound0=b,
                      bound1=b, on_false_value=0.0)


def _select_both_psum(a):
    x = nl.zeros((64, 32), dtype=nl.float32, buffer=nl.psum)
    p = nl.zeros((64, 32), dtype=nl.uint8, buffer=nl.psum)
    nisa.select_reduce(dst=_sbuf(a), predicate=p, on_true=x, on_false=0.0)


def _select_pred_dtype(a):
    x = _sbuf(a)
    nisa.select_reduce(dst=x, predicate=x, on_true=x, on_false=0.0)


def _copy_pred_dtype_mismatch(a):
    d = nl.zeros((64, 32), dtype=nl.bfloat16)
    p = nl.zeros((64, 32), dtype=nl.uint8)
    nisa.tensor_copy_predicated(dst=d, src=_sbuf(a), predicate=p)


def _stt_bitvec(a):
    x = _sbuf(a)
    nisa.scalar_tensor_tensor(dst=x, data=x, op0=nl.bitwise_and, operand0=1.0, op1=nl.add,
                              operand1=x)


def _stt_operand0_shape(a):
    x = _sbuf(a)
    nisa.scalar_tensor_tensor(dst=x, data=x, op0=nl.add, operand0=x, op1=nl.add, operand1=x)


def _dropout_dtype(a):
    d = nl.ndarray((64, 32), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dropout(dst=d, data=_sbuf(a), prob=0.5)


def _shuffle_mask_value(a):
    x = _sbuf(a)
    nisa.nc_stream_shuffle(dst=x, src=x, shuffle_mask=[40] * 32)


def _shuffle_start(a):
    x = _sbuf(a)
    nisa.nc_stream_shuffle(dst=x[16:48, :], src=x[0:32, :], shuffle_mask=list(range(32)))


def _max8_too_small(a):
    top = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.max8(dst=top, src=_sbuf(a)[:, 0:4])


def _find_index_dtype(a):
    x = _sbuf(a)
    idx = nl.ndarray((64, 8), dtype=nl.int32, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=idx, data=x, vals=x[:, 0:8])


def _where_shape(a):
    x = _sbuf(a)
    nl.where(x, x[:, 0:16], 0.0)


def _broadcast_shape(a):
    nl.broadcast_to(_sbuf(a), (64, 64))


@pytest.mark.parametrize("body,code,words,jit", [
    (_iota_psum, "err_unsupported_memory", ("iota", "dst", "psum"), {}),
    (_iota_bad_pattern, "nki_shape_mismatch", ("pattern", "24", "32"), {}),
    (_iota_five_dims, "err_exceed_max_supported_dimension", ("5",), {}),
    (_affine_partitions, "err_num_partition_mismatch", ("32", "64"), {}),
    (_affine_cmp, "nki_invalid_argument", ("cmp_op",), {}),
    (_range_on_trn1, "nki_unsupported_on_target", ("range_select", "trn1"),
     {"target": "trn1"}),
    (_range_fill, "nki_invalid_argument", ("on_false_value", "fp32 min"), {}),
    (_select_both_psum, "err_unsupported_memory", ("on_true", "predicate", "PSUM"), {}),
    (_select_pred_dtype, "nki_dtype_mismatch", ("predicate", "float32"), {}),
    (_copy_pred_dtype_mismatch, "nki_dtype_mismatch", ("src", "dst", "same dtype"), {}),
    (_stt_bitvec, "nki_invalid_argument", ("op0", "arithmetic"), {}),
    (_stt_operand0_shape, "nki_shape_mismatch", ("operand0", r"\[64, 1\]"), {}),
    (_dropout_dtype, "nki_dtype_mismatch", ("dst", "bfloat16"), {}),
    (_shuffle_mask_value, "nki_invalid_argument", ("shuffle_mask", "255"), {}),
    (_shuffle_start, "nki_invalid_argument", ("dst", "partition 16"), {}),
    (_max8_too_small, "nki_shape_mismatch", ("src", "8 to 16384"), {}),
    (_find_index_dtype, "nki_dtype_mismatch", ("dst", "uint16", "int32"), {}),
    (_where_shape, "nki_shape_mismatch", ("x", "condition"), {}),
    (_broadcast_shape, "nki_shape_mismatch", ("broadcast", "64, 64"), {}),
])
def test_rule_violations(body, code, words, jit):
    with pytest.raises(NkiValidationError, match=_err(code, *words)):
        _raise(body, **jit)
