"""Legacy-dialect (``neuronxcc.nki``) kernels in the shapes public legacy kernels use, each
against numpy, under both backends."""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np

# ----- elementwise with a partial-tile mask ---------------------------------------------------


def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    n, f = a.shape
    i_p, i_f = nl.mgrid[0:128, 0:f]
    for t in nl.affine_range((n + 127) // 128):
        rows = t * 128 + i_p
        x = nl.load(a[rows, i_f], mask=(rows < n))
        y = nl.load(b[rows, i_f], mask=(rows < n))
        nl.store(out[rows, i_f], value=nl.add(x, y), mask=(rows < n))
    return out


def test_elementwise_add_partial_tile(backend, rng):
    a = rng.standard_normal((300, 64)).astype(np.float32)
    b = rng.standard_normal((300, 64)).astype(np.float32)
    out = nki.jit(add_kernel, backend=backend)(a, b)
    np.testing.assert_array_equal(out, a + b)


# ----- tiled matmul: block-dim SBUF tiles, PSUM accumulation over an affine K loop ------------


def matmul_kernel(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    KT = K // 128
    i_k = nl.arange(128)[:, None]
    i_m = nl.arange(128)[None, :]
    i_n = nl.arange(N)[None, :]
    lhs_tiles = nl.ndarray((KT, nl.par_dim(128), 128), dtype=lhsT.dtype, buffer=nl.sbuf)
    rhs_tiles = nl.ndarray((KT, nl.par_dim(128), N), dtype=rhs.dtype, buffer=nl.sbuf)
    for m in nl.affine_range(M // 128):
        for k in nl.affine_range(KT):
            lhs_tiles[k, i_k, i_m] = nl.load(lhsT[k * 128 + i_k, m * 128 + i_m])
            rhs_tiles[k, i_k, i_n] = nl.load(rhs[k * 128 + i_k, i_n])
        res_psum = nl.zeros((128, N), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(KT):
            res_psum += nl.matmul(lhs_tiles[k, i_k, i_m], rhs_tiles[k, i_k, i_n],
                                  transpose_x=True)
        res_sb = nl.copy(res_psum, dtype=out.dtype)
        nl.store(out[m * 128 + nl.arange(128)[:, None], i_n], value=res_sb)
    return out


def test_tiled_matmul_psum_accumulate(backend, rng):
    lhsT = rng.standard_normal((512, 256)).astype(np.float32)
    rhs = rng.standard_normal((512, 256)).astype(np.float32)
    out = nki.jit(matmul_kernel, backend=backend)(lhsT, rhs)
    np.testing.assert_allclose(out, lhsT.T @ rhs, rtol=1e-4, atol=1e-3)


def test_matmul_ir_does_not_grow_with_k():
    rng = np.random.default_rng(0)
    counts = []
    for k in (4, 16):
        lhsT = rng.standard_normal((128 * k, 128)).astype(np.float32)
        rhs = rng.standard_normal((128 * k, 128)).astype(np.float32)
        counts.append(nki.jit(matmul_kernel).specialize(lhsT, rhs).num_instructions)
    assert counts[0] == counts[1], counts


# ----- row softmax with nl.max / nl.exp / nl.sum over axis=[1] and a masked store -------------


def softmax_kernel(x):
    n, f = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(f)[None, :]
    for t in nl.affine_range((n + 127) // 128):
        rows = t * 128 + i_p
        tile = nl.load(x[rows, i_f], mask=(rows < n))
        mx = nl.max(tile, axis=[1], keepdims=True, mask=(rows < n))
        e = nl.exp(nl.subtract(tile, mx, mask=(rows < n)), mask=(rows < n))
        s = nl.sum(e, axis=[1], keepdims=True, mask=(rows < n))
        nl.store(out[rows, i_f], value=nl.divide(e, s, mask=(rows < n)), mask=(rows < n))
    return out


def test_row_softmax(backend, rng):
    x = rng.standard_normal((200, 96)).astype(np.float32) * 3
    out = nki.jit(softmax_kernel, backend=backend)(x)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=2e-5, atol=1e-7)


# ----- layernorm with the old bn_stats / bn_aggr signatures -----------------------------------


def layernorm_kernel(x, gamma, eps):
    n, d = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(d)[None, :]
    g = nl.load(gamma[nl.arange(1)[:, None], i_f])
    for t in nl.affine_range(n // 128):
        tile = nl.load(x[t * 128 + i_p, i_f])
        stats = nisa.bn_stats(tile, dtype=nl.float32)
        mv = nisa.bn_aggr(stats)
        mean = mv[i_p, 0]
        rstd = nl.rsqrt(mv[i_p, 1] + eps)
        xn = nl.multiply(nl.subtract(tile, mean), rstd)
        nl.store(out[t * 128 + i_p, i_f], value=nl.multiply(xn, g))
    return out


def test_layernorm_bn_stats(backend, rng):
    x = rng.standard_normal((256, 192)).astype(np.float32) * 2 + 1
    gamma = rng.standard_normal((1, 192)).astype(np.float32)
    out = nki.jit(layernorm_kernel, backend=backend)(x, gamma, 1e-5)
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * gamma
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


# ----- single-head causal attention: nc_matmul, nc_transpose, activation, affine_select -----


def attention_kernel(q, k, v):
    s_len, d = q.shape
    out = nl.ndarray((s_len, d), dtype=nl.float32, buffer=nl.shared_hbm)
    i_s, i_d = nl.mgrid[0:s_len, 0:d]
    q_sb, k_sb, v_sb = nl.load(q[i_s, i_d]), nl.load(k[i_s, i_d]), nl.load(v[i_s, i_d])
    q_t = nl.copy(nisa.nc_transpose(q_sb))
    k_t = nl.copy(nisa.nc_transpose(k_sb))
    scores = nl.multiply(nisa.nc_matmul(q_t, k_t), 1.0 / np.sqrt(d))
    i_q = nl.arange(s_len)[:, None]
    i_k = nl.arange(s_len)[None, :]
    masked = nisa.affine_select(i_q >= i_k, scores, -9984.0)
    neg_max = nisa.tensor_reduce(np.max, masked, axis=(1,), negate=True, keepdims=True)
    row_sum = nl.ndarray((s_len, 1), dtype=nl.float32)
    probs = nisa.activation(op=nl.exp, data=masked, bias=neg_max, scale=1.0,
                            reduce_op=nl.add, reduce_res=row_sum,
                            reduce_cmd=nisa.reduce_cmd.reset_reduce)
    inv = nisa.reciprocal(row_sum)
    p_t = nl.copy(nisa.nc_transpose(probs))
    o = nisa.nc_matmul(p_t, v_sb)
    nl.store(out[i_s, i_d], value=nl.multiply(o, inv))
    return out


def test_causal_attention(backend, rng):
    q, k, v = (rng.standard_normal((128, 64)).astype(np.float32) for _ in range(3))
    out = nki.jit(attention_kernel, backend=backend)(q, k, v)
    s = q @ k.T / np.sqrt(64)
    s = np.where(np.tril(np.ones((128, 128), bool)), s, -9984.0)
    p = np.exp(s - s.max(1, keepdims=True))
    np.testing.assert_allclose(out, (p / p.sum(1, keepdims=True)) @ v, rtol=1e-4, atol=1e-4)


# ----- SPMD grid kernel[2, 3] with nl.program_id(0/1) ---------------------------------------


def grid_kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    rows, cols = a.shape[0] // nl.num_programs(0), a.shape[1] // nl.num_programs(1)
    i_p, i_f = nl.mgrid[0:rows, 0:cols]
    tile = nl.load(a[i * rows + i_p, j * cols + i_f])
    scale = i * nl.num_programs(1) + j + 1 + nl.program_ndim() * 100
    nl.store(out[i * rows + i_p, j * cols + i_f], value=tile * scale)
    return out


def test_spmd_grid_2x3(backend, rng):
    a = rng.standard_normal((256, 192)).astype(np.float32)
    out = nki.jit(grid_kernel, backend=backend)[2, 3](a)
    scale = np.repeat(np.repeat(np.arange(6).reshape(2, 3) + 201, 128, 0), 64, 1)
    np.testing.assert_allclose(out, a * scale, rtol=1e-6)


def test_simulate_kernel_with_grid(rng):
    a = rng.standard_normal((256, 192)).astype(np.float32)
    out = nki.simulate_kernel(nki.jit(grid_kernel)[2, 3], a)
    np.testing.assert_allclose(out[128:, 128:], a[128:, 128:] * 206, rtol=1e-6)


# ----- pooling: a multi-axis index expression and nl.max over axis=[2, 4] -------------------


def pool_kernel(x):
    C, H, W = x.shape
    P = 2
    out = nl.ndarray((C, H // P, W // P), dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    i0, i1, i2, i3, i4 = nl.mgrid[0:C, 0:H // P, 0:P, 0:W // P, 0:P]
    pooled = nl.max(tile[i0, P * i1 + i2, P * i3 + i4], axis=[2, 4])
    nl.store(out, value=pooled)
    return out


def test_max_pool_multi_axis_index(backend, rng):
    x = rng.standard_normal((128, 8, 12)).astype(np.float32)
    out = nki.jit(pool_kernel, backend=backend)(x)
    np.testing.assert_array_equal(out, x.reshape(128, 4, 2, 6, 2).max(axis=(2, 4)))


def grid_copy(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    tile = nl.load(a[i * 128 + i_p, j * 64 + i_f])
    nl.store(out[i * 128 + i_p, j * 64 + i_f], value=nl.exp(tile))
    return out


def test_spmd_programs_fold_into_loops(rng):
    counts = []
    for g0, g1 in ((2, 2), (4, 6)):
        a = rng.standard_normal((128 * g0, 64 * g1)).astype(np.float32)
        kernel = nki.jit(grid_copy)[g0, g1]
        counts.append(kernel.specialize(a).num_instructions)
        np.testing.assert_allclose(kernel(a), np.exp(a), rtol=1e-6)
    assert counts[0] == counts[1] == 3, counts
