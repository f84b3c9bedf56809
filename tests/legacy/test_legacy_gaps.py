"""Names of the later 2.x legacy API (issue 16 §4): ``nl.rand``, ``nl.finfo``,
``nisa.local_gather``, ``nisa.sequence_bounds``, ``nisa.tensor_scalar_cumulative`` and
``nl.mgrid`` axes read by attribute. Kernels of our own against numpy, both backends."""

from __future__ import annotations

import ml_dtypes
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest

from nki.errors import NkiError


def rand_top8():
    """Random tile and its 8 largest values per row (AWS's max8 example)."""
    r_out = nl.ndarray([32, 128], dtype=nl.float32, buffer=nl.shared_hbm)
    top_out = nl.ndarray([32, 8], dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.rand((32, 128))
    nl.store(r_out, value=r)
    nl.store(top_out, value=nisa.max8(src=r))
    return r_out, top_out


def test_rand_and_max8(backend):
    r, top = nki.jit(rand_top8, backend=backend)()
    assert r.shape == (32, 128) and np.all((r >= 0) & (r < 1)) and len(np.unique(r)) > 1000
    np.testing.assert_array_equal(top, -np.sort(-r, axis=1)[:, :8])


def fill_lowest(x):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.full(x.shape, fill_value=nl.finfo(nl.bfloat16).min, dtype=nl.float32)
    nl.store(out, value=nl.maximum(t, nl.load(x)))
    return out


def test_finfo(backend):
    assert nl.finfo(nl.bfloat16).min == ml_dtypes.finfo(ml_dtypes.bfloat16).min
    assert nl.finfo(nl.float32).eps == np.finfo(np.float32).eps
    x = np.array([[-np.inf, 1.0], [-3.0e38, 2.0]], np.float32)
    out = nki.jit(fill_lowest, backend=backend)(x)
    lowest = float(ml_dtypes.finfo(ml_dtypes.bfloat16).min)
    np.testing.assert_array_equal(out, np.maximum(x, lowest))


def gather_kernel(src, index, nv):
    out = nl.ndarray((src.shape[0], nv), dtype=src.dtype, buffer=nl.shared_hbm)
    g = nisa.local_gather(nl.load(src), nl.load(index), 1, nv)
    nl.store(out, value=g)
    return out


def test_local_gather(backend, rng):
    src = rng.standard_normal((32, 40)).astype(np.float32)
    index = rng.integers(0, 40, size=(32, 2)).astype(np.uint16)
    nv = 24
    out = nki.jit(gather_kernel, backend=backend)(src, index, nv)
    expect = np.empty((32, nv), np.float32)
    for g in range(2):          # one GpSimd core per 16 partitions, indices column-major
        idx = index[16 * g:16 * (g + 1)].flatten(order="F")[:nv]
        expect[16 * g:16 * (g + 1)] = src[16 * g:16 * (g + 1)][:, idx]
    np.testing.assert_array_equal(out, expect)


def bounds_kernel(ids):
    out = nl.ndarray([1, 2, ids.shape[1]], dtype=ids.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray([1, 2, ids.shape[1]], dtype=ids.dtype, buffer=nl.sbuf)
    ix, iy, iz = nl.mgrid[0:1, 0:2, 0:ids.shape[1]]
    t[ix, iy, iz] = nisa.sequence_bounds(segment_ids=nl.load(ids))
    nl.store(out, value=t)
    return out


def _bounds(ids: np.ndarray) -> np.ndarray:
    n = len(ids)
    lo = np.array([n if v == 0 else next(j for j in range(i, -1, -1)
                                         if j == 0 or ids[j - 1] != v) for i, v in
                   enumerate(ids)])
    hi = np.array([-1 if v == 0 else next(j + 1 for j in range(i, n)
                                          if j == n - 1 or ids[j + 1] != v) for i, v in
                   enumerate(ids)])
    return np.stack([lo, hi])[None].astype(np.float32)


def test_sequence_bounds(backend):
    ids = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3, 5, 5, 5, 5, 0, 0, 7]], np.float32)
    out = nki.jit(bounds_kernel, backend=backend)(ids)
    np.testing.assert_array_equal(out, _bounds(ids[0]))


def scan_kernel(x):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    dst = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_cumulative(src=nl.load(x), dst=dst, op0=nl.multiply, op1=nl.add,
                                  imm0=np.float32(2.0))
    nl.store(out, value=dst)
    return out


def test_tensor_scalar_cumulative(backend, rng):
    x = rng.standard_normal((8, 16)).astype(np.float32)
    out = nki.jit(scan_kernel, backend=backend)(x)
    np.testing.assert_allclose(out, np.cumsum(2.0 * x, axis=1, dtype=np.float32), rtol=1e-5)


def mgrid_attrs(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.mgrid[0:x.shape[0], 0:x.shape[1], 0:x.shape[2]]
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    t[g.p, g.x, g.y] = nl.load(x[g.p, g.x, g.y])
    nl.store(out[g.p, g.x, g.y], value=nl.multiply(t[g.p, g.x, g.y], 3.0))
    return out


def test_mgrid_axes_by_attribute(backend, rng):
    x = rng.standard_normal((16, 2, 8)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(mgrid_attrs, backend=backend)(x), 3 * x)


def mgrid_too_far(x):
    g = nl.mgrid[0:4, 0:4]
    return nl.load(x[g.p, g.y])


def test_mgrid_missing_axis_raises():
    with pytest.raises(NkiError) as info:
        nki.jit(mgrid_too_far).specialize(np.zeros((4, 4), np.float32))
    assert info.value.code == "nki_invalid_argument" and ".y" in str(info.value)


def store_scalar(x):
    """AWS's load/store example: ``nl.store(out, 100)`` is "effectively a memset"."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, 100)
    return out


def test_store_python_scalar(backend):
    x = np.zeros((200, 8), np.float32)      # more rows than partitions: stored in pieces
    np.testing.assert_array_equal(nki.jit(store_scalar, backend=backend)(x),
                                  np.full_like(x, 100))


def returns_sbuf(x):
    """AWS's range_select example returns its SBUF result tile."""
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    t[...] = nl.multiply(nl.load(x), 2.0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=t)
    return t, out, nl.add(t, 1.0)


def test_kernel_returning_sbuf_tiles(backend, rng):
    x = rng.standard_normal((128, 16)).astype(np.float32)
    t, out, t1 = nki.jit(returns_sbuf, backend=backend)(x)
    np.testing.assert_array_equal(t, 2 * x)
    np.testing.assert_array_equal(out, 2 * x)
    np.testing.assert_array_equal(t1, 2 * x + 1)


def six_dims(x):
    """Views of 6 dims: the old API folds dims that walk memory as one."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a, b, c, d, e, f = nl.mgrid[0:2, 0:3, 0:2, 0:2, 0:2, 0:4]
    t = nl.load(x[a, b, c, d, e, f])
    nl.store(out[a, b, c, d, e, f], value=nl.add(t, 1.0))
    whole = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(whole, value=nl.load(x))
    return out, whole


def test_six_dim_views_fold(backend, rng):
    x = rng.standard_normal((2, 3, 2, 2, 2, 4)).astype(np.float32)
    out, whole = nki.jit(six_dims, backend=backend)(x)
    np.testing.assert_array_equal(out, x + 1)
    np.testing.assert_array_equal(whole, x)


def and_masks(x):
    """``mask=(i_p < 64 and i_f < 32)``, as AWS's nc_match_replace8 example writes it."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.zeros(x.shape, nl.float32))
    i_p, i_f = nl.mgrid[0:x.shape[0], 0:x.shape[1]]
    t = nl.load(x[i_p, i_f], mask=(i_p < 64 and i_f < 32))
    nl.store(out[i_p, i_f], value=nl.add(t, 1.0), mask=(i_p >= 8 and i_f < 40 and 2 * i_p < 100))
    return out


def test_python_and_between_masks(backend, rng):
    x = rng.standard_normal((128, 48)).astype(np.float32)
    out = nki.jit(and_masks, backend=backend)(x)
    ip, jf = np.mgrid[0:128, 0:48]
    expect = np.where((ip >= 8) & (jf < 40) & (2 * ip < 100), x + 1, 0)
    # rows/columns the load left out hold whatever the tile held; only compare the rest
    inside = (ip < 64) & (jf < 32) | ~((ip >= 8) & (jf < 40) & (2 * ip < 100))
    np.testing.assert_array_equal(out[inside], expect[inside])


def and_of_variables(x):
    i_p, i_f = nl.mgrid[0:x.shape[0], 0:x.shape[1]]
    rows, cols = i_p < 64, i_f < 32
    return nl.load(x[i_p, i_f], mask=(rows and cols))  # variables


def test_and_of_mask_variables_raises():
    """The right operand was made before the ``and``: its bound would be lost silently."""
    with pytest.raises(NkiError) as info:
        nki.jit(and_of_variables).specialize(np.zeros((128, 48), np.float32))
    assert info.value.code == "err_control_flow_condition_depending_on_arange"
    assert "use '&'" in str(info.value)


def affine_mask(x):
    """Masks over affine index expressions in nl.load / nl.store."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.zeros(x.shape, nl.float32))
    i_p, i_f = nl.mgrid[0:x.shape[0], 0:x.shape[1]]
    m = (i_p * 2 + 1 < 100) & (3 * i_f - 2 >= 10)
    nl.store(out[i_p, i_f], value=nl.add(nl.load(x[i_p, i_f], mask=m), 1.0), mask=m)
    return out


def test_affine_masks_in_load(backend, rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    out = nki.jit(affine_mask, backend=backend)(x)
    ip, jf = np.mgrid[0:128, 0:64]
    m = (ip * 2 + 1 < 100) & (3 * jf - 2 >= 10)
    np.testing.assert_array_equal(out, np.where(m, x + 1, 0))


def masked_top8(x):
    """``mask=`` of max8 / nc_find_index8 / nc_match_replace8 bounds the data searched; the
    [P, 8] results only by partition (AWS's nc_match_replace8 mask example)."""
    top = nl.ndarray([x.shape[0], 8], dtype=x.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray([x.shape[0], 8], dtype=nl.uint32, buffer=nl.shared_hbm)
    rep = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:x.shape[0], 0:x.shape[1]]
    t = nl.load(x)
    m = nisa.max8(src=t[i_p, i_f], mask=(i_p < 64) & (i_f < 20))
    nl.store(top, value=m)
    nl.store(idx, value=nisa.nc_find_index8(data=t[i_p, i_f], vals=m,
                                            mask=(i_p < 64) & (i_f < 20)))
    r = nisa.nc_match_replace8(data=t[i_p, i_f], vals=m, imm=-1.0,
                               mask=(i_p < 64) & (i_f < 20))
    nl.store(rep, value=r)
    return top, idx, rep


def test_masked_max8_family(backend, rng):
    x = rng.permutation(128 * 48).reshape(128, 48).astype(np.float32)   # distinct values
    top, idx, rep = nki.jit(masked_top8, backend=backend)(x)
    part = x[:64, :20]
    order = np.argsort(-part, axis=1)[:, :8]
    np.testing.assert_array_equal(top[:64], np.take_along_axis(part, order, 1))
    np.testing.assert_array_equal(idx[:64], order)
    expect = part.copy()
    np.put_along_axis(expect, order, -1.0, 1)
    np.testing.assert_array_equal(rep[:64, :20], expect)


def numpy_int_operand(x):
    """Operands computed from shapes are numpy ints (nki-samples' adaptive_avg_pool2d)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    k = np.int32(x.shape[1]) // 2
    t = nl.load(x)
    nl.store(out, value=nl.add(nisa.tensor_scalar(t, np.multiply, k), np.int32(3)))
    return out


def test_numpy_and_python_int_operands(backend, rng):
    x = rng.standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_allclose(nki.jit(numpy_int_operand, backend=backend)(x), x * 4 + 3,
                               rtol=1e-6)


def masked_gather(data, idx):
    """``data[b, idx_tile, i_f]`` loaded and stored under a row mask (nki-samples'
    resize_nearest): the mask keeps the rows whose index is valid."""
    out = nl.ndarray((128, data.shape[2]), dtype=data.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(data.shape[2])[None, :]
    rows = nl.load(idx)
    t = nl.load(data[1, rows, i_f], mask=(i_p < 100))
    nl.store(out[i_p, i_f], value=t, mask=(i_p < 100))
    return out


def test_masked_indirect_rows_after_an_int(backend, rng):
    data = rng.standard_normal((2, 50, 16)).astype(np.float32)
    idx = np.concatenate([rng.integers(0, 50, 100), np.full(28, 999)]).astype(np.int32)
    out = nki.jit(masked_gather, backend=backend)(data, idx[:, None])
    np.testing.assert_array_equal(out[:100], data[1, idx[:100]])


def where_broadcast(x):
    """``nl.where(cond [P, a, b, c], iota [1, 1, b, c], number)``: numpy broadcasting."""
    out = nl.ndarray(x.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
    g = nl.mgrid[0:x.shape[0], 0:x.shape[1], 0:x.shape[2], 0:x.shape[3]]
    t = nl.load(x)
    lin = nisa.iota(3 * g.y + g.z, dtype=nl.uint32)
    nl.store(out, value=nl.where(nl.greater(t, 0.0), lin, 9, dtype=nl.uint32))
    return out


def test_where_broadcasts_its_branches(backend, rng):
    x = rng.standard_normal((16, 5, 3, 3)).astype(np.float32)
    out = nki.jit(where_broadcast, backend=backend)(x)
    lin = (3 * np.arange(3)[:, None] + np.arange(3)[None, :]).astype(np.uint32)
    np.testing.assert_array_equal(out, np.where(x > 0, lin[None, None], 9))


def psum_blocks(a, b):
    """A PSUM block tensor of 16 blocks x 2 KiB (twice the PSUM): each block is written by a
    matmul and read at once, so, as NKI 0.1 placed blocks one by one, they reuse banks
    (AWS's attention_fwd_performance v8a/v11 transposes)."""
    nb = a.shape[1] // 128
    out = nl.ndarray((nb * 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((nb, 2, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    ta, tb = nl.load(a), nl.load(b)
    for i in nl.affine_range(nb):
        row = ps[i]                      # one block index of a 2-block tensor
        for j in nl.affine_range(2):
            row[j] = nisa.nc_matmul(ta[:, nl.ds(i * 128, 128)], tb)
        s = nl.add(nl.copy(row[0]), nl.copy(row[1]))
        nl.store(out[nl.ds(i * 128, 128), :], value=s)
    return out


def test_psum_blocks_placed_one_by_one(backend, rng):
    a = rng.standard_normal((128, 8 * 128)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    out = nki.jit(psum_blocks, backend=backend)(a, b)
    ref = 2 * (a.T.astype(np.float64) @ b)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-3)


def sbuf_blocks(x):
    """``t[i]`` of an SBUF tensor with two block dims: the (P, ...) blocks under i."""
    out = nl.ndarray((4, 128, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((2, 2, nl.par_dim(128), 16), dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(2):
        half = t[i]
        for j in nl.affine_range(2):
            half[j] = nl.load(x[2 * i + j])
    for i in nl.affine_range(2):
        for j in nl.affine_range(2):
            nl.store(out[2 * i + j], value=nl.multiply(t[i, j], 2.0))
    return out


def test_block_tensor_by_one_block_index(backend, rng):
    x = rng.standard_normal((4, 128, 16)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(sbuf_blocks, backend=backend)(x), 2 * x)


def int_of_tile(x):
    t = nl.load(x[0:1, 0:1])
    return int(t)  # int


def test_int_of_a_pending_tile_raises():
    with pytest.raises(NkiError) as info:
        nki.jit(int_of_tile).specialize(np.zeros((4, 4), np.float32))
    assert info.value.code == "err_dynamic_control_flow_not_supported"
    assert "int()" in str(info.value)


def double_row(a, b):
    """``nc_matmul(perf_mode="double_row_gen3")`` over [K, 2, F] fp8 operands: [F_a, F_b]."""
    out = nl.ndarray([a.shape[2], b.shape[2]], dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.mgrid[0:a.shape[0], 0:2, 0:a.shape[2]]
    ta = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    ta[g.p, g.x, g.y] = nl.load(a)
    nl.store(out, value=nisa.nc_matmul(ta[g.p, g.x, g.y], nl.load(b),
                                       perf_mode="double_row_gen3"))
    return out


def test_double_row_matmul(backend, rng):
    a = rng.integers(-3, 4, (128, 2, 4)).astype(ml_dtypes.float8_e5m2)
    b = rng.integers(-3, 4, (128, 2, 64)).astype(ml_dtypes.float8_e5m2)
    out = nki.jit(double_row, backend=backend, platform_target="trn2")(a, b)
    ref = np.einsum("kli,klj->ij", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_array_equal(out, ref)


def partial_last_tile(x):
    """``x[256:384]`` of a 288-row tensor under a mask keeping rows < 288 (nki-samples'
    adaptive_avg_pool2d): slices past the end are legal under such a mask."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(3):
        i_p = nl.arange(128)[:, None] + t * 128
        buf = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=x[t * 128:(t + 1) * 128, :], dst=buf, mask=(i_p < x.shape[0]))
        nl.store(out[t * 128:(t + 1) * 128, :], value=nl.multiply(buf, 2.0),
                 mask=(i_p < x.shape[0]))
    return out


def test_slices_past_the_end_under_a_mask(backend, rng):
    x = rng.standard_normal((288, 8)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(partial_last_tile, backend=backend)(x), 2 * x)


def partial_last_ds_tile(x):
    """AWS's tiled transposes: ``x[nl.ds(t * 128, 128)]`` (trailing dims left out) of a
    200-row 3-d tensor, loaded and stored under a mask keeping rows < 200."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(2):
        i_p, i_a, i_b = nl.mgrid[0:128, 0:x.shape[1], 0:x.shape[2]]
        rows = t * 128 + i_p < x.shape[0]
        tile = nl.load(x[nl.ds(t * 128, 128), :, :], mask=rows)
        nl.store(out[nl.ds(t * 128, 128)], value=nl.multiply(tile, 3.0), mask=rows)
    return out


def test_ds_slices_past_the_end_under_a_mask(backend, rng):
    x = rng.standard_normal((200, 3, 5)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(partial_last_ds_tile, backend=backend)(x),
                                  3 * x)


def unmasked_past_the_end(x):
    return nl.load(x[256:384, :])  # unmasked


def test_slices_past_the_end_without_a_mask_raise():
    with pytest.raises(NkiError) as info:
        nki.jit(unmasked_past_the_end).specialize(np.zeros((288, 8), np.float32))
    assert info.value.code == "err_tensor_access_out_of_bound"
