"""Legacy ``nl``/``nisa`` calls one by one against numpy, both backends: operators, masks,
dtype rules, deferred results written straight into their destination, block dims."""

from __future__ import annotations

import ml_dtypes
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np

BF16 = ml_dtypes.bfloat16


def _run(kernel, backend, *args):
    return nki.jit(kernel, backend=backend)(*args)


def k_operators(a, b):
    out = nl.ndarray((128, 4, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:32]
    x, y = nl.load(a[i_p, i_f]), nl.load(b[i_p, i_f])
    acc = nl.zeros((128, 32), dtype=nl.float32)
    acc += x * y
    acc -= x / 4.0
    acc *= 2.0
    out[i_p, 0, i_f] = acc
    out[i_p, 1, i_f] = nl.copy(x - y)
    out[i_p, 2, i_f] = 3.0 - x
    z = nl.ndarray((128, 32), dtype=nl.float32)
    z[i_p, i_f] = x
    z /= y
    nl.store(out[i_p, 3, i_f], value=z)
    return out


def test_tile_operators_and_inplace(backend, rng):
    a = rng.standard_normal((128, 32)).astype(np.float32)
    b = rng.uniform(1, 2, (128, 32)).astype(np.float32)
    out = _run(k_operators, backend, a, b)
    np.testing.assert_allclose(out[:, 0], (a * b - a / 4) * 2, rtol=1e-6)
    np.testing.assert_array_equal(out[:, 1], a - b)
    np.testing.assert_array_equal(out[:, 2], 3 - a)
    np.testing.assert_allclose(out[:, 3], a / b, rtol=1e-6)


def k_broadcasting(a, col, row):
    out = nl.ndarray((2, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    x = nl.load(a[i_p, i_f])
    c = nl.load(col[i_p, nl.arange(1)[None, :]])          # [128, 1]
    r = nl.load(row[nl.arange(1)[:, None], i_f])          # [1, 64]
    nl.store(out[0, i_p, i_f], value=nl.multiply(x, c))   # per-partition scalar
    nl.store(out[1, i_p, i_f], value=nl.add(r, x))        # partition broadcast (nl only)
    return out


def test_numpy_broadcasting_of_nl_functions(backend, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    col = rng.standard_normal((128, 1)).astype(np.float32)
    row = rng.standard_normal((1, 64)).astype(np.float32)
    out = _run(k_broadcasting, backend, a, col, row)
    np.testing.assert_array_equal(out[0], a * col)
    np.testing.assert_array_equal(out[1], row + a)


def k_dtypes(a, b):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    out2 = nl.ndarray((128, 64), dtype=nl.uint8, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    x, y = nl.load(a[i_p, i_f]), nl.load(b[i_p, i_f])
    s = nl.add(x, y)                      # bf16 + fp16 -> fp32
    g = nl.greater(x, y)                  # comparisons -> bool
    assert s.dtype == nl.float32 and g.dtype == nl.bool_
    assert (x * 2.0).dtype == nl.float32  # a Python float is a weak float32 ...
    assert (x * 2).dtype == nl.bfloat16   # ... an int a weak int32, and floats win
    nl.store(out[i_p, i_f], value=s)
    nl.store(out2[i_p, i_f], value=nl.copy(g, dtype=nl.uint8))
    return out, out2


def test_old_dtype_rules(backend, rng):
    a = rng.standard_normal((128, 64)).astype(BF16)
    b = rng.standard_normal((128, 64)).astype(np.float16)
    s, g = _run(k_dtypes, backend, a, b)
    np.testing.assert_allclose(s, a.astype(np.float32) + b.astype(np.float32), rtol=1e-6)
    np.testing.assert_array_equal(g, (a.astype(np.float32) > b.astype(np.float32)))


def k_mask_rect(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    x = nl.load(a[i_p, i_f])
    y = nl.full((128, 64), -1.0, dtype=nl.float32)
    y[i_p, i_f] = nl.exp(x, mask=(i_p >= 16) & (i_p < 100) & (i_f > 7) & (2 * i_f <= 81))
    nl.store(out[i_p, i_f], value=y)
    return out


def test_mask_shrinks_to_rectangle(backend, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    out = _run(k_mask_rect, backend, a)
    expect = np.full((128, 64), -1.0, np.float32)
    expect[16:100, 8:41] = np.exp(a[16:100, 8:41])
    np.testing.assert_allclose(out, expect, rtol=1e-6)


def k_psum_direct(a, b):
    out = nl.ndarray((128, 2, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    i_k, i_m = nl.mgrid[0:128, 0:128]
    x, y = nl.load(a[i_k, i_m]), nl.load(b[i_k, i_m])
    ps = nl.ndarray((2, nl.par_dim(128), 128), dtype=nl.float32, buffer=nl.psum)
    ps[0, i_k, i_m] = nisa.nc_matmul(x, y)          # straight into PSUM block 0
    ps[1] = nl.matmul(x, y)                          # x @ y (transpose inserted)
    nl.store(out[i_k, 0, i_m], value=ps[0])          # a PSUM value: copied through SBUF
    nl.store(out[i_k, 1, i_m], value=ps[1, i_k, i_m])
    return out


def test_matmul_into_psum_blocks(backend, rng):
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 128)).astype(np.float32)
    out = _run(k_psum_direct, backend, a, b)
    np.testing.assert_allclose(out[:, 0], a.T @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out[:, 1], a @ b, rtol=1e-4, atol=1e-4)


def k_isa_vector(a):
    out = nl.ndarray((6, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    x = nl.load(a[i_p, i_f])
    nl.store(out[0, i_p, i_f], value=nisa.tensor_tensor(x, x, op=nl.multiply))
    nl.store(out[1, i_p, i_f], value=nisa.tensor_scalar(x, np.multiply, 2.0, op1=np.add,
                                                        operand1=1.0))
    nl.store(out[2, i_p, i_f], value=nisa.tensor_copy(x))
    nl.store(out[3, i_p, i_f], value=nisa.memset((128, 64), 7.0, nl.float32))
    nl.store(out[4, i_p, i_f], value=nisa.iota(i_p * 64 + i_f, dtype=nl.float32))
    nl.store(out[5, i_p, i_f], value=nisa.reciprocal(x))
    return out


def test_isa_vector_family(backend, rng):
    a = rng.uniform(0.5, 2, (128, 64)).astype(np.float32)
    out = _run(k_isa_vector, backend, a)
    np.testing.assert_array_equal(out[0], a * a)
    np.testing.assert_array_equal(out[1], a * 2 + 1)
    np.testing.assert_array_equal(out[2], a)
    np.testing.assert_array_equal(out[3], 7.0)
    np.testing.assert_array_equal(out[4], np.arange(128 * 64).reshape(128, 64))
    np.testing.assert_array_equal(out[5], 1 / a)


def k_reductions(a):
    out = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    x = nl.load(a[i_p, i_f])
    i_o = nl.arange(1)[None, :]
    out[i_p, i_o] = nl.sum(x, axis=1, keepdims=True)
    out[i_p, 1 + i_o] = nl.max(x, axis=[1], keepdims=True)
    out[i_p, 2 + i_o] = nl.mean(x, axis=[1], keepdims=True)
    out[i_p, 3 + i_o] = nl.var(x, axis=[1])
    out[i_p, 4 + i_o] = nisa.tensor_reduce(np.min, x, axis=(1,), keepdims=True)
    out[i_p, 5 + i_o] = nl.sum(x, axis=1, keepdims=True, mask=(i_f < 10))
    return out


def test_reductions(backend, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    out = _run(k_reductions, backend, a)
    np.testing.assert_allclose(out[:, 0], a.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out[:, 1], a.max(1))
    np.testing.assert_allclose(out[:, 2], a.mean(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[:, 3], a.var(1), rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(out[:, 4], a.min(1))
    np.testing.assert_allclose(out[:, 5], a[:, :10].sum(1), rtol=1e-5, atol=1e-6)


def k_transpose_where(a):
    out = nl.ndarray((3, 64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:64, 0:64]
    x = nl.load(a[i_p, i_f])
    nl.store(out[0, i_p, i_f], value=nl.transpose(x))
    nl.store(out[1, i_p, i_f], value=nl.where(x > 0.0, x, 0.0))
    nl.store(out[2, i_p, i_f], value=nl.load_transpose2d(a[i_p, i_f]))
    return out


def test_transposes_and_where(backend, rng):
    a = rng.standard_normal((64, 64)).astype(np.float32)
    out = _run(k_transpose_where, backend, a)
    np.testing.assert_array_equal(out[0], a.T)
    np.testing.assert_array_equal(out[1], np.where(a > 0, a, 0))
    np.testing.assert_array_equal(out[2], a.T)


def k_sequential(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    acc = nl.zeros((128, 64), dtype=nl.float32)
    for k in nl.sequential_range(4):
        t = nl.load(a[k * 128 + i_p, i_f])
        acc[i_p, i_f] = nl.maximum(acc, t)       # reads acc, then writes it
    nl.store(out[i_p, i_f], value=acc)
    return out


def test_sequential_accumulation(backend, rng):
    a = rng.standard_normal((512, 64)).astype(np.float32)
    out = _run(k_sequential, backend, a)
    np.testing.assert_array_equal(out, np.maximum(0, a.reshape(4, 128, 64).max(0)))


def k_deferred_order(a):
    out = nl.ndarray((2, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    t = nl.load(a[i_p, i_f])
    e = nl.multiply(t, 2.0)         # deferred: reads t
    t[i_p, i_f] = 0.0               # so e must be computed before this write
    nl.store(out[0, i_p, i_f], value=e)
    nl.store(out[1, i_p, i_f], value=t)
    return out


def test_deferred_result_keeps_program_order(backend, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    out = _run(k_deferred_order, backend, a)
    np.testing.assert_array_equal(out[0], a * 2)
    np.testing.assert_array_equal(out[1], 0)


def k_hbm_stride(x):
    out = nl.ndarray((64, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:64, 0:64]
    nl.store(out[i_p, i_f], value=nl.load(x[2 * i_p + 1, 63 - i_f]))
    return out


def test_strided_and_reversed_hbm_index(backend, rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    out = _run(k_hbm_stride, backend, x)
    np.testing.assert_array_equal(out, x[1::2, ::-1])


def k_selects(a, lo, hi):
    out = nl.ndarray((5, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    i_1 = nl.arange(1)[None, :]
    x = nl.load(a[i_p, i_f])
    b0, b1 = nl.load(lo[i_p, i_1]), nl.load(hi[i_p, i_1])
    nl.store(out[0, i_p, i_f], value=nisa.range_select(
        on_true_tile=x, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=b0, bound1=b1,
        range_start=0, on_false_value=nl.fp32.min))
    pred = nl.greater(x, 0.0, dtype=nl.uint8)
    dst = nl.ndarray((128, 64), dtype=nl.float32)
    nisa.select_reduce(dst=dst, predicate=pred, on_true=x, on_false=-1.0)
    nl.store(out[1, i_p, i_f], value=dst)
    nl.store(out[2, i_p, i_f], value=nisa.dropout(x, 0.0))
    nl.store(out[3, i_p, i_f], value=nl.softmax(x, axis=[1]))
    nl.store(out[4, nl.arange(1)[:, None], i_f], value=nisa.tensor_partition_reduce(np.add, x))
    return out


def test_selects_dropout_softmax_partition_reduce(backend, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    lo = rng.integers(0, 32, (128, 1)).astype(np.float32)
    hi = lo + rng.integers(1, 32, (128, 1)).astype(np.float32)
    out = _run(k_selects, backend, a, lo, hi)
    idx = np.arange(64)[None, :]
    fmin = np.finfo(np.float32).min
    np.testing.assert_array_equal(out[0], np.where((idx >= lo) & (idx < hi), a, fmin))
    np.testing.assert_array_equal(out[1], np.where(a > 0, a, -1.0))
    np.testing.assert_array_equal(out[2], a)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(out[3], e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out[4, 0], a.sum(0), rtol=1e-5, atol=1e-5)


def k_creation(a):
    out = nl.ndarray((6, 128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:32]
    x = nl.load(a[i_p, i_f])
    blocks = nl.ones((3, nl.par_dim(128), 32), dtype=nl.float32)
    blocks[1] = nl.full((128, 32), 5.0, dtype=nl.float32)
    blocks[2, i_p, i_f] = nl.zeros_like(x)
    for b in nl.static_range(3):
        nl.store(out[b, i_p, i_f], value=blocks[b])
    nl.store(out[3, i_p, i_f], value=nl.broadcast_to(x[i_p, 0], shape=(128, 32)))
    nl.store(out[4, i_p, i_f], value=x.astype(nl.bfloat16))
    nl.store(out[5, i_p, i_f], value=nl.prod(nl.expand_dims(x, 2), axis=2))
    return out


def test_creation_blocks_and_views(backend, rng):
    a = rng.standard_normal((128, 32)).astype(np.float32)
    out = _run(k_creation, backend, a)
    np.testing.assert_array_equal(out[0], 1.0)
    np.testing.assert_array_equal(out[1], 5.0)
    np.testing.assert_array_equal(out[2], 0.0)
    np.testing.assert_array_equal(out[3], np.repeat(a[:, :1], 32, 1))
    np.testing.assert_array_equal(out[4], a.astype(BF16).astype(np.float32))
    np.testing.assert_array_equal(out[5], a)


def k_assign_broadcast(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    x = nl.load(a[i_p, i_f])
    t = nl.ndarray((128, 64), dtype=nl.float32)
    t[i_p, i_f] = nl.max(x, axis=[1], keepdims=True)   # [128, 1] broadcast along the row
    nl.store(out[i_p, i_f], value=t)
    return out


def test_assignment_broadcasts_like_numpy(backend, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    out = _run(k_assign_broadcast, backend, a)
    np.testing.assert_array_equal(out, np.repeat(a.max(1, keepdims=True), 64, 1))
