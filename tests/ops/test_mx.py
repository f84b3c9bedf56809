"""MX formats: quantize_mx against an independent numpy quantiser (bit-exact packed data and
E8M0 scales), and an MXFP8 matmul against a float64 reference of the same quantised values;
both backends; rule errors with code and file:line."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiValidationError
from nki.sim.emit.mx import reference_matmul_mx

BF16 = ml_dtypes.bfloat16


def _jit(kernel, **options):
    return nki.jit(kernel, cache=False, **options)


def _sbuf(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _out(t):
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def ref_quantize(x, elem, emax):
    """(K, 4F) → ((K, F, 4) element codes, (K//8, F) scale bits): per group of 8 partitions x
    4 values, scale = 2**(floor(log2(amax)) - emax + 1), elements RNE-cast."""
    K, F4 = x.shape
    v = x.astype(np.float64).reshape(K, F4 // 4, 4)
    scales = np.zeros((K // 8, F4 // 4), np.int64)
    codes = np.zeros(v.shape, np.uint8)
    for g in range(K // 8):
        for j in range(F4 // 4):
            block = v[8 * g:8 * g + 8, j, :]
            amax = np.abs(block).max()
            e = int(np.floor(np.log2(amax))) - emax + 1 if amax > 0 else -127
            scales[g, j] = min(max(e + 127, 0), 254)
            q = (block / 2.0 ** (scales[g, j] - 127)).astype(np.float32).astype(elem)
            codes[8 * g:8 * g + 8, j, :] = q.view(np.uint8)
    return codes, scales


def _mx_kernel(w, x):
    K = w.shape[0]
    M, N = w.shape[1] // 4, x.shape[1] // 4
    wq = nl.ndarray((K, M), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    ws = nl.ndarray((K, M), dtype=nl.uint8, buffer=nl.sbuf)
    xq = nl.ndarray((K, N), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    xs = nl.ndarray((K, N), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
    nisa.memset(dst=ws, value=0)
    nisa.memset(dst=xs, value=0.0)
    nisa.quantize_mx(dst=wq, src=_sbuf(w), dst_scale=ws)
    nisa.quantize_mx(dst=xq, src=_sbuf(x), dst_scale=xs)
    ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=ps, stationary=wq, moving=xq, stationary_scale=ws, moving_scale=xs)
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=ps)
    return _out(res), _out(wq), _out(ws)


def test_mxfp8_matmul_against_numpy(backend):
    rng = np.random.default_rng(3)
    K, M, N = 64, 16, 32
    w = (rng.standard_normal((K, 4 * M)) * np.exp(rng.uniform(-4, 4, (K, 1)))).astype(BF16)
    x = rng.standard_normal((K, 4 * N)).astype(BF16)
    y, wq, ws = _jit(_mx_kernel, backend=backend)(w, x)
    wc, wsc = ref_quantize(w, ml_dtypes.float8_e4m3fn, 8)
    xc, xsc = ref_quantize(x, ml_dtypes.float8_e4m3fn, 8)
    # packed data, returned as the x4 host dtype: value i of element (k, m) in byte i
    assert str(wq.dtype) == "float8_e4m3fn_x4" and wq.shape == (K, M)
    np.testing.assert_array_equal(wq.view(np.uint8).reshape(K, M, 4), wc)
    g = np.arange(K // 8)
    np.testing.assert_array_equal(ws[32 * (g // 4) + g % 4], wsc)
    wv = wc.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    xv = xc.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    expect = reference_matmul_mx(wv, wsc, xv, xsc)
    np.testing.assert_allclose(y, expect, rtol=1e-5, atol=1e-5 * np.abs(expect).max())
    # and the MX result is close to the bf16 product it approximates
    exact = w.astype(np.float64).reshape(K, M, 4).transpose(0, 2, 1).reshape(4 * K, M).T @ \
        x.astype(np.float64).reshape(K, N, 4).transpose(0, 2, 1).reshape(4 * K, N)
    assert np.abs(y - exact).max() < 0.1 * np.abs(exact).max()


def test_quantize_mx_needs_trn3():
    def k(x):
        q = nl.ndarray((32, 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        s = nl.ndarray((32, 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=q, src=_sbuf(x), dst_scale=s)
        return x

    with pytest.raises(NkiValidationError, match=r"(?s)nki_unsupported_on_target.*"
                                                 r"NeuronCore-v4.*test_mx\.py:\d+"):
        _jit(k, backend="python", target="trn2")(np.ones((32, 16), BF16))


def test_quantize_mx_checks_packing():
    def k(x):
        q = nl.ndarray((32, 8), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        s = nl.ndarray((32, 8), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=q, src=_sbuf(x), dst_scale=s)
        return x

    with pytest.raises(NkiValidationError, match=r"(?s)nki_shape_mismatch.*packs 4.*"
                                                 r"test_mx\.py:\d+"):
        _jit(k, backend="python")(np.ones((32, 16), BF16))


def test_matmul_mx_scale_dtype():
    def k(x):
        q = nl.ndarray((32, 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        s = nl.ndarray((32, 4), dtype=nl.float32, buffer=nl.sbuf)
        ps = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(dst=ps, stationary=q, moving=q, stationary_scale=s, moving_scale=s)
        return x

    with pytest.raises(NkiValidationError, match=r"(?s)nki_dtype_mismatch.*e8m0.*"
                                                 r"test_mx\.py:\d+"):
        _jit(k, backend="python")(np.ones((2, 2), np.float32))


def test_sliced_scale_buffers_keep_their_neighbours(backend):
    """AWS 0.6.0: sliced MX scale views. Two quantize_mx calls fill the column halves of one
    shared scale buffer, a third fills the lower half of a taller one; the matmul reads the
    slices. Scales land only in the slice (rows 32q..32q+3 of each quadrant of it), and
    every other byte keeps what was there."""
    K, M, N = 64, 8, 16

    def kernel(w, x):
        W = _sbuf(w)
        wq = nl.ndarray((K, 2 * M), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        ws = nl.ndarray((K, 2 * M), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.memset(dst=ws, value=7)
        nisa.quantize_mx(dst=wq[:, 0:M], src=W[:, 0:4 * M], dst_scale=ws[:, 0:M])
        nisa.quantize_mx(dst=wq[:, M:2 * M], src=W[:, 4 * M:8 * M], dst_scale=ws[:, M:2 * M])
        xq = nl.ndarray((K, N), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        xs = nl.ndarray((2 * K, N), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.memset(dst=xs, value=9)
        nisa.quantize_mx(dst=xq, src=_sbuf(x), dst_scale=xs[K:2 * K, :])
        ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(dst=ps, stationary=wq[:, M:2 * M], moving=xq,
                          stationary_scale=ws[:, M:2 * M], moving_scale=xs[K:2 * K, :])
        res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=ps)
        return _out(res), _out(ws), _out(xs)

    rng = np.random.default_rng(8)
    w = rng.standard_normal((K, 8 * M)).astype(BF16)
    x = (rng.standard_normal((K, 4 * N)) * 4).astype(BF16)
    y, ws, xs = _jit(kernel, backend=backend)(w, x)
    c1, s1 = ref_quantize(w[:, :4 * M], ml_dtypes.float8_e4m3fn, 8)
    c2, s2 = ref_quantize(w[:, 4 * M:], ml_dtypes.float8_e4m3fn, 8)
    xc, xsc = ref_quantize(x, ml_dtypes.float8_e4m3fn, 8)
    g = np.arange(K // 8)
    rows = 32 * (g // 4) + g % 4
    want_ws = np.full((K, 2 * M), 7, np.uint8)
    want_ws[rows, :M], want_ws[rows, M:] = s1, s2
    np.testing.assert_array_equal(ws, want_ws)
    want_xs = np.full((2 * K, N), 9, np.uint8)
    want_xs[K + rows] = xsc
    np.testing.assert_array_equal(xs, want_xs)
    expect = reference_matmul_mx(c2.view(ml_dtypes.float8_e4m3fn).astype(np.float64), s2,
                                 xc.view(ml_dtypes.float8_e4m3fn).astype(np.float64), xsc)
    np.testing.assert_allclose(y, expect, rtol=1e-5, atol=1e-5 * np.abs(expect).max())
