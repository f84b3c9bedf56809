"""Patterns the public legacy kernels rely on (found by running AWS's tutorial and reference
kernels as a yardstick), each in a kernel of our own, against numpy, under both backends:
index tiles from a wider ``nl.mgrid`` than the tensor, masks from a narrower one, partition
broadcasts through ``tile.broadcast_to``, numbers against ``[P, 1]`` tiles, ``affine_select``
on PSUM and with compile-time ``mask=True/False``."""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest

# ----- a wider mgrid than the tensor: its size-1 positions drop out of the tile -----------


def scaled_center_kernel(a, w):
    """out = (a - rowmean(a)) * w, rows tiled by 128 with a partial last tile."""
    n, f = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_one, i_f = nl.mgrid[0:128, 0:1, 0:f]
    w_row = nl.load(w.reshape((1, f))[i_one, i_f])        # a [1, f] tile, not [1, 1, f]
    w_all = w_row.broadcast_to((128, f))                    # a partition broadcast
    for t in nl.affine_range((n + 127) // 128):
        rows = t * 128 + i_p
        x = nl.load(a[rows, i_f], mask=(rows < n))          # [128, f]; the mask is 3-D
        mean = nl.sum(x, axis=[1]) / f
        y = (x - mean) * w_all
        nl.store(out[rows, i_f], value=y, mask=(rows < n))
    return out


def test_wider_mgrid_index_and_partition_broadcast(backend, rng):
    a = rng.standard_normal((200, 96)).astype(np.float32)
    w = rng.standard_normal(96).astype(np.float32)
    out = nki.jit(scaled_center_kernel, backend=backend)(a, w)
    np.testing.assert_allclose(out, (a - a.mean(1, keepdims=True)) * w, rtol=1e-5, atol=1e-5)


# ----- a mask from a narrower mgrid bounding a free axis; bn_stats over a partial chunk ----


def chunked_stats_kernel(a):
    """Per-row (mean, var) from bn_stats over 512-wide chunks, the last one partial."""
    n, f = a.shape
    out = nl.ndarray((n, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f, _ = nl.mgrid[0:n, 0:f, 0:1]
    i_c, i_s = nl.mgrid[0:512, 0:6]                          # i_c is (512, 1): axis 0 here
    chunks = (f + 511) // 512
    x = nl.load(a[i_p, i_f])
    stats = nl.ndarray((n, 6 * chunks), dtype=nl.float32)
    for j in nl.affine_range(chunks):
        stats[i_p, j * 6 + i_s] = nisa.bn_stats(x[i_p, j * 512 + i_c],
                                                mask=(j * 512 + i_c < f), dtype=nl.float32)
    mv = nisa.bn_aggr(stats)
    nl.store(out, value=mv)
    return out


def test_narrower_mask_on_bn_stats_chunks(backend, rng):
    a = rng.standard_normal((64, 700)).astype(np.float32) + 3.0
    out = nki.jit(chunked_stats_kernel, backend=backend)(a)
    np.testing.assert_allclose(out[:, 0], a.mean(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[:, 1], a.var(1), rtol=1e-4, atol=1e-4)


# ----- numbers against [P, 1] tiles ------------------------------------------------------


def reciprocal_bias_kernel(a):
    """out = exp(a - max) * (1 / rowsum(a)) with ``-1 * max`` and ``1.0 / sum``."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    m = nisa.tensor_reduce(np.max, x, axis=(1,), keepdims=True)
    s = nisa.tensor_reduce(np.add, x, axis=(1,), keepdims=True)
    e = nisa.activation(np.exp, x, bias=-1 * m, scale=1.0)
    inv = (1.0 / s).broadcast_to((a.shape[0], a.shape[1]))
    nl.store(out, value=nl.multiply(e, inv))
    return out


def test_number_with_partition_scalar_tile(backend, rng):
    a = rng.uniform(1.0, 2.0, (32, 40)).astype(np.float32)
    out = nki.jit(reciprocal_bias_kernel, backend=backend)(a)
    ref = np.exp(a - a.max(1, keepdims=True)) / a.sum(1, keepdims=True)
    np.testing.assert_allclose(out, ref, rtol=2e-5)


# ----- affine_select reading PSUM, with compile-time masks -------------------------------


def causal_scores_kernel(q_t, k_t, keep_second):
    """Causal q @ k.T straight from PSUM; a second select under mask=keep_second."""
    d, s = q_t.shape
    out = nl.ndarray((s, s), dtype=nl.float32, buffer=nl.shared_hbm)
    i_q, i_k = nl.mgrid[0:s, 0:s]
    qs, ks = nl.load(q_t), nl.load(k_t)
    ps = nl.ndarray((s, s), dtype=nl.float32, buffer=nl.psum)
    ps[...] = nisa.nc_matmul(qs, ks)
    res = nl.ndarray((s, s), dtype=nl.float32)
    res[...] = nisa.affine_select(pred=(i_q >= i_k), on_true_tile=ps, on_false_value=-1e4,
                                  dtype=nl.float32, mask=True)
    # a band: drop keys more than 3 behind the query, only when asked to
    res[...] = nisa.affine_select(pred=(i_k > i_q - 4), on_true_tile=res, on_false_value=-1e4,
                                  dtype=nl.float32, mask=keep_second)
    nl.store(out, value=res)
    return out


def test_affine_select_on_psum_with_bool_masks(backend, rng):
    q_t = rng.standard_normal((16, 24)).astype(np.float32)
    k_t = rng.standard_normal((16, 24)).astype(np.float32)
    s = q_t.T @ k_t
    causal = np.tril(np.ones_like(s, dtype=bool))
    band = causal & ~np.tril(np.ones_like(causal), -4)
    for keep, m in ((False, causal), (True, band)):
        out = nki.jit(causal_scores_kernel, backend=backend)(q_t, k_t, keep)
        np.testing.assert_allclose(out, np.where(m, s, -1e4), rtol=1e-5, atol=1e-5)


# ----- nl.loop_reduce: acc = op(acc, x) across a loop ---------------------------------------


def blocked_k_kernel(lhsT, rhs):
    """K split in 2 blocks: a PSUM group per block, then loop_reduce(add) into an SBUF
    accumulator; a running max of every block's product under a partition mask."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    top = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((M, N), dtype=nl.float32)
    mx = nl.full((M, N), -1e30, dtype=nl.float32)
    i_k, i_m = nl.mgrid[0:128, 0:M]
    i_n = nl.arange(N)[None, :]
    i_p = nl.arange(M)[:, None]
    for kb in nl.sequential_range(K // 256):
        ps = nl.zeros((M, N), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(2):
            rows = kb * 256 + k * 128 + i_k
            ps += nisa.nc_matmul(nl.load(lhsT[rows, i_m]), nl.load(rhs[rows, i_n]))
        acc[...] = nl.loop_reduce(ps, op=np.add, loop_indices=[kb], dtype=nl.float32)
        mx[i_p, i_n] = nl.loop_reduce(ps, op=nl.maximum, loop_indices=[kb],
                                      mask=(i_p < M - 8))
    nl.store(out, value=acc)
    nl.store(top, value=mx)
    return out, top


def test_loop_reduce_accumulates_into_destination(backend, rng):
    lhsT = rng.standard_normal((768, 64)).astype(np.float32)
    rhs = rng.standard_normal((768, 48)).astype(np.float32)
    out, top = nki.jit(blocked_k_kernel, backend=backend)(lhsT, rhs)
    np.testing.assert_allclose(out, lhsT.T @ rhs, rtol=1e-4, atol=1e-4)
    blocks = [lhsT[b:b + 256].T @ rhs[b:b + 256] for b in range(0, 768, 256)]
    ref = np.max(blocks, axis=0)
    ref[-8:] = -1e30
    np.testing.assert_allclose(top, ref, rtol=1e-4, atol=1e-4)


# ----- matmul masks: mask= over the result, operand masking t[pred], compile-time bools ----


def masked_matmul_kernel(lhsT, rhs, skip_second):
    """acc = lhsT[:, :48].T @ rhs[:, :100] via nc_matmul(mask=) on a zeroed PSUM tile, then
    nl.matmul with operand masks adds lhsT[:, :48].T @ rhs[:, :100] again unless the
    compile-time bool mask (skip_second) drops it."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    i_m, i_n = nl.mgrid[0:M, 0:N]
    i_k, i_mf = nl.mgrid[0:K, 0:M]
    _, i_nf = nl.mgrid[0:K, 0:N]
    a, b = nl.load(lhsT), nl.load(rhs)
    ps = nl.zeros((M, N), dtype=nl.float32, buffer=nl.psum)
    ps[...] += nisa.nc_matmul(a, b, mask=(i_m < 48) & (i_n < 100))
    ps[...] += nl.matmul(a[i_mf < 48], b[i_nf < 100], transpose_x=True,
                         mask=not skip_second)
    nl.store(out, value=ps)
    return out


def test_matmul_masks(backend, rng):
    lhsT = rng.standard_normal((64, 80)).astype(np.float32)
    rhs = rng.standard_normal((64, 160)).astype(np.float32)
    part = np.zeros((80, 160), np.float32)
    part[:48, :100] = lhsT[:, :48].T @ rhs[:, :100]
    for skip, times in ((True, 1), (False, 2)):
        out = nki.jit(masked_matmul_kernel, backend=backend)(lhsT, rhs, skip)
        np.testing.assert_allclose(out, times * part, rtol=1e-5, atol=1e-4)


# ----- run-time indices from a 1-element tile (tensor_copy_dynamic_src / _dst) ----------------


def shuffle_columns_kernel(x, starts):
    """out[:, 2j:2j+2] = x[:, starts[j]:starts[j]+2] read with run-time offsets, then the
    pair written back at run-time column starts[j] of a zeroed tile (dynamic dst)."""
    P, F = x.shape
    n = starts.shape[1]
    out = nl.ndarray((P, 2 * n), dtype=x.dtype, buffer=nl.shared_hbm)
    back = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_c = nl.mgrid[0:P, 0:2]
    xt = nl.load(x)
    st = nl.load(starts)
    got = nl.ndarray((P, 2 * n), dtype=x.dtype)
    scat = nl.zeros((P, F), dtype=x.dtype)
    for j in nl.affine_range(n):
        got[i_p, 2 * j + i_c] = nisa.tensor_copy_dynamic_src(xt[i_p, st[0, j] + i_c])
        nisa.tensor_copy_dynamic_dst(dst=scat[i_p, st[0, j] + i_c], src=got[i_p, 2 * j + i_c])
    nl.store(out, value=got)
    nl.store(back, value=scat)
    return out, back


def test_runtime_index_from_tile(backend, rng):
    x = rng.standard_normal((32, 40)).astype(np.float32)
    starts = np.array([[7, 0, 21, 38, 12]], np.int32)
    out, back = nki.jit(shuffle_columns_kernel, backend=backend)(x, starts)
    ref = np.concatenate([x[:, s:s + 2] for s in starts[0]], axis=1)
    np.testing.assert_array_equal(out, ref)
    ref_back = np.zeros_like(x)
    for s in starts[0]:
        ref_back[:, s:s + 2] = x[:, s:s + 2]
    np.testing.assert_array_equal(back, ref_back)


def test_runtime_index_out_of_bounds_faults(backend):
    from nki.errors import NkiRuntimeError

    x = np.zeros((32, 40), np.float32)
    starts = np.array([[7, 39]], np.int32)          # 39..40 runs past the 40 columns
    with pytest.raises(NkiRuntimeError) as err:
        nki.jit(shuffle_columns_kernel, backend=backend)(x, starts)
    assert err.value.code == "nki_runtime_out_of_bounds"
    assert isinstance(err.value, IndexError)      # as AWS's simulator raised it
    assert "test_legacy_patterns.py" in str(err.value)


# ----- NKI 0.1 dtypes are numpy-compatible ----------------------------------------------------


def dtype_kernel(x):
    """Branches on ``x.dtype == np.float32`` and sizes a buffer with
    ``np.dtype(nl.bfloat16).itemsize``, as NKI 0.1 kernels do."""
    out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    assert np.dtype(nl.bfloat16).itemsize == 2 and nl.float32 == np.float32
    scale = 2.0 if x.dtype == np.float32 and x.dtype == nl.float32 else 3.0
    t = nl.load(x, dtype=np.dtype(nl.bfloat16))
    assert t.dtype == nl.bfloat16 and t.dtype != np.float32
    nl.store(out, value=nl.multiply(t, scale, dtype=t.dtype))
    return out


def test_dtypes_compare_with_numpy(backend, rng):
    import ml_dtypes

    x = rng.standard_normal((16, 8)).astype(np.float32)
    out = nki.jit(dtype_kernel, backend=backend)(x)
    assert out.dtype == ml_dtypes.bfloat16
    ref = (x.astype(ml_dtypes.bfloat16).astype(np.float32) * 2).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out, ref)
