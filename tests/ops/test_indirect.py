"""Indirect access: embedding gathers, scatters, dma_compute scatter-add, nc_n_gather and
gather_flattened against numpy, both backends; runtime out-of-bounds (error and skip) and
misuse errors name code, rule and file:line."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiError, NkiRuntimeError

V, D, P = 50, 32, 128
BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(11)


def _ids(idx):
    ids = nl.ndarray((P, 1), dtype=idx.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=idx)
    return ids


def embedding(table, idx):
    """out[p] = table[idx[p]]; out-of-range rows keep -1 (oob_mode.skip)."""
    out = nl.ndarray((P, D), dtype=table.dtype, buffer=nl.shared_hbm)
    rows = nl.ndarray((P, D), dtype=table.dtype, buffer=nl.sbuf)
    nisa.memset(dst=rows, value=-1.0)
    src = table.ap([[D, P], [1, D]], 0, vector_offset=_ids(idx), indirect_dim=0)
    nisa.dma_copy(dst=rows, src=src, oob_mode=nisa.oob_mode.skip)
    nisa.dma_copy(dst=out, src=rows)
    return out


def embedding_strict(table, idx):
    out = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.shared_hbm)
    rows = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
    # the keyword is AWS's parameter name (NkiTensor.vector_select(dim, vector_offset))
    nisa.dma_copy(dst=rows, src=table.vector_select(0, vector_offset=_ids(idx)))  # bf16 -> fp32
    nisa.dma_copy(dst=out, src=rows)
    return out


def _gather_ref(table, idx, fill=-1.0):
    out = np.full((P, D), fill, np.float32).astype(table.dtype)
    ok = (idx[:, 0] >= 0) & (idx[:, 0] < len(table))
    out[ok] = table[idx[ok, 0]]
    return out


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_embedding_gather_skips_out_of_range_rows(backend, dtype):
    table = RNG.standard_normal((V, D)).astype(dtype)
    idx = RNG.integers(0, V, (P, 1)).astype(np.int32)
    idx[5, 0], idx[9, 0] = V, -3
    out = nki.jit(embedding, backend=backend)(table, idx)
    np.testing.assert_array_equal(out.view(np.uint8), _gather_ref(table, idx).view(np.uint8))


def picked(table, idx):
    """out[p] = table.flat[idx[p]]: one element per row (cross_entropy's target logit)."""
    out = nl.ndarray((P, 1), dtype=table.dtype, buffer=nl.shared_hbm)
    one = nl.ndarray((P, 1), dtype=table.dtype, buffer=nl.sbuf)
    flat = table.reshape((V * D, 1))
    nisa.dma_copy(dst=one, src=flat.ap([[1, P], [1, 1]], 0, vector_offset=_ids(idx),
                                       indirect_dim=0))
    nisa.dma_copy(dst=out, src=one)
    return out


def embedding_every_other(table, idx):
    """out[p] = table[idx[p], ::2]: rows that are not one contiguous run (the per-row
    ``copy_raw`` path, where contiguous rows between arenas are plain byte copies)."""
    out = nl.ndarray((P, D // 2), dtype=table.dtype, buffer=nl.shared_hbm)
    rows = nl.ndarray((P, D // 2), dtype=table.dtype, buffer=nl.sbuf)
    src = table.ap([[D, P], [2, D // 2]], 0, vector_offset=_ids(idx), indirect_dim=0)
    nisa.dma_copy(dst=rows, src=src)
    nisa.dma_copy(dst=out, src=rows)
    return out


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_one_element_gather_and_strided_rows(backend, dtype):
    """The contiguous-row byte copy and the general path against numpy, bit for bit."""
    table = RNG.standard_normal((V, D)).astype(dtype)
    flat_idx = RNG.integers(0, V * D, (P, 1)).astype(np.int32)
    out = nki.jit(picked, backend=backend)(table, flat_idx)
    np.testing.assert_array_equal(out.view(np.uint8), table.reshape(-1, 1)[flat_idx[:, 0]]
                                  .view(np.uint8))
    idx = RNG.integers(0, V, (P, 1)).astype(np.int32)
    strided = nki.jit(embedding_every_other, backend=backend)(table, idx)
    full = nki.jit(embedding, backend=backend)(table, idx)
    np.testing.assert_array_equal(strided.view(np.uint8),
                                  np.ascontiguousarray(table[idx[:, 0], ::2]).view(np.uint8))
    np.testing.assert_array_equal(strided.view(np.uint8),
                                  np.ascontiguousarray(full[:, ::2]).view(np.uint8))


def test_vector_select_gather_casts(backend):
    table = RNG.standard_normal((V, D)).astype(BF16)
    idx = RNG.integers(0, V, (P, 1)).astype(np.int32)
    out = nki.jit(embedding_strict, backend=backend)(table, idx)
    np.testing.assert_array_equal(out, table[idx[:, 0]].astype(np.float32))


def test_gather_out_of_range_raises_with_oob_mode_and_line(backend):
    table = RNG.standard_normal((V, D)).astype(BF16)
    idx = RNG.integers(0, V, (P, 1)).astype(np.int32)
    idx[17, 0] = V + 4
    with pytest.raises(NkiRuntimeError, match=r"nki_runtime_out_of_bounds.*oob_mode=error.*"
                                              r"index 54 in row 17.*test_indirect.py:\d+"):
        nki.jit(embedding_strict, backend=backend)(table, idx)


def scatter_rows(base, upd, idx):
    """out = base, then out[idx[p]] = upd[p] (out-of-range rows skipped)."""
    out = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.shared_hbm)
    b = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=base)
    nisa.dma_copy(dst=out, src=b)
    u = nl.ndarray((P, D), dtype=upd.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=upd)
    dst = out.ap([[D, P], [1, D]], 0, vector_offset=_ids(idx), indirect_dim=0)
    nisa.dma_copy(dst=dst, src=u, oob_mode=nisa.oob_mode.skip)
    return out


def test_scatter_rows_with_skip(backend):
    base = RNG.standard_normal((V, D)).astype(np.float32)
    upd = RNG.standard_normal((P, D)).astype(np.float32)
    idx = RNG.permutation(P)[:, None].astype(np.int32)    # rows >= V are out of range
    out = nki.jit(scatter_rows, backend=backend)(base, upd, idx)
    expect = base.copy()
    for p in range(P):
        if idx[p, 0] < V:
            expect[idx[p, 0]] = upd[p]
    np.testing.assert_array_equal(out, expect)


def scatter_add(base, upd, idx):
    """out = base; out[idx[p]] += upd[p] with dma_compute (repeated indices accumulate)."""
    out = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.shared_hbm)
    b = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=base)
    nisa.dma_copy(dst=out, src=b)
    u = nl.ndarray((P, D), dtype=upd.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=upd)
    rows = out.ap([[D, P], [1, D]], 0, vector_offset=_ids(idx), indirect_dim=0)
    nisa.dma_compute(dst=rows, srcs=[rows, u], reduce_op=nl.add)
    return out


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_dma_compute_scatter_add(backend, dtype):
    base = RNG.standard_normal((V, D)).astype(dtype)
    upd = RNG.standard_normal((P, D)).astype(dtype)
    idx = RNG.integers(0, 8, (P, 1)).astype(np.int32)     # many duplicates
    out = nki.jit(scatter_add, backend=backend)(base, upd, idx)
    expect = base.copy()
    for p in range(P):    # fp32 read-modify-write per row, rounded to the dtype each time
        r = idx[p, 0]
        expect[r] = (expect[r].astype(np.float32) + upd[p].astype(np.float32)).astype(dtype)
    np.testing.assert_array_equal(out.view(np.uint8), expect.view(np.uint8))


def gathers(data, idx):
    """nc_n_gather and nl.gather_flattened over each partition's flattened [4, 16] row."""
    out1 = nl.ndarray(idx.shape, dtype=data.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray(idx.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=data)
    i = nl.ndarray(idx.shape, dtype=idx.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=i, src=idx)
    g = nl.ndarray(idx.shape, dtype=data.dtype, buffer=nl.sbuf)
    nisa.nc_n_gather(dst=g, data=x, indices=i)
    nisa.dma_copy(dst=out1, src=g)
    nisa.dma_copy(dst=out2, src=nl.gather_flattened(x, i, dtype=nl.float32))
    return out1, out2


def test_nc_n_gather_and_gather_flattened(backend):
    data = RNG.standard_normal((64, 4, 16)).astype(BF16)
    idx = RNG.integers(0, 64, (64, 24)).astype(np.uint32)
    out1, out2 = nki.jit(gathers, backend=backend)(data, idx)
    expect = np.take_along_axis(data.reshape(64, 64), idx.astype(np.int64), axis=1)
    np.testing.assert_array_equal(out1.view(np.uint16), expect.view(np.uint16))
    np.testing.assert_array_equal(out2, expect.astype(np.float32))


def test_nc_n_gather_out_of_range_raises(backend):
    data = RNG.standard_normal((64, 4, 16)).astype(np.float32)
    idx = RNG.integers(0, 64, (64, 24)).astype(np.uint32)
    idx[3, 7] = 64
    with pytest.raises(NkiRuntimeError, match=r"gather index is out of bounds: index 64 in "
                                              r"partition 3.*test_indirect.py:\d+"):
        nki.jit(gathers, backend=backend)(data, idx)


def paged_rows(table, idx, n):
    """A realistic mix: n (read at run time) tiles of 128 gathered rows each."""
    out = nl.ndarray((4 * P, D), dtype=table.dtype, buffer=nl.shared_hbm)
    zero = nl.ndarray((P, D), dtype=table.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0.0)
    for t in range(4):
        nisa.dma_copy(dst=out[t * P:(t + 1) * P, :], src=zero)
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n_sb, src=n)
    count = nisa.register_alloc(n_sb)

    def body(i):
        ids = nl.ndarray((P, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ids, src=idx[nl.ds(i * P, P), :])
        rows = nl.ndarray((P, D), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=rows, src=table.ap([[D, P], [1, D]], 0, vector_offset=ids,
                                             indirect_dim=0))
        nisa.dma_copy(dst=out[nl.ds(i * P, P), :], src=rows)

    nl.fori_loop(0, count, body)
    return out


def test_gather_inside_runtime_loop(backend):
    table = RNG.standard_normal((V, D)).astype(np.float32)
    idx = RNG.integers(0, V, (4 * P, 1)).astype(np.int32)
    out = nki.jit(paged_rows, backend=backend)(table, idx, np.array([[3]], np.int32))
    expect = np.zeros((4 * P, D), np.float32)
    expect[:3 * P] = table[idx[:3 * P, 0]]
    np.testing.assert_array_equal(out, expect)


# ----- misuse: trace-time errors (no compile) ------------------------------------------------
def _raises(fn, code, *args):
    with pytest.raises(NkiError, match=r"(?s)" + code + r".*test_indirect.py:\d+"):
        nki.jit(fn, backend="python")(*args)


TABLE = RNG.standard_normal((V, D)).astype(np.float32)
IDX = RNG.integers(0, V, (P, 1)).astype(np.int32)


def test_vector_offset_needs_hbm():
    def k(table, idx):
        t = nl.ndarray((P, D), dtype=table.dtype, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0.0)
        t.ap([[D, P], [1, D]], 0, vector_offset=_ids(idx), indirect_dim=1)

    _raises(k, r"err_unsupported_memory\].*vector_offset.*HBM", TABLE, IDX)


def test_vector_offset_needs_integer_p_by_1_tile():
    def k(table, idx):
        f = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=f, value=0.0)
        table.ap([[D, P], [1, D]], 0, vector_offset=f, indirect_dim=0)

    _raises(k, r"nki_dtype_mismatch\].*vector_offset must be an integer", TABLE, IDX)


def test_dma_compute_only_adds():
    def k(table, idx):
        rows = table.ap([[D, P], [1, D]], 0, vector_offset=_ids(idx), indirect_dim=0)
        u = nl.ndarray((P, D), dtype=table.dtype, buffer=nl.sbuf)
        nisa.memset(dst=u, value=0.0)
        nisa.dma_compute(dst=rows, srcs=[rows, u], reduce_op=nl.multiply)

    _raises(k, r"nki_invalid_argument\].*reduce_op=nl.add only", TABLE, IDX)


def test_indirect_view_cannot_be_sliced():
    def k(table, idx):
        table.ap([[D, P], [1, D]], 0, vector_offset=_ids(idx), indirect_dim=0)[:, 0:4]

    _raises(k, r"nki_invalid_view\].*indirect", TABLE, IDX)


# ----- local_gather: per 16-partition group, partition-first offsets ----------------------
def _local_gather(src, idx, ne, nv):
    s_sb, i_sb = _sbuf_like(src), _sbuf_like(idx)
    out = nl.ndarray((src.shape[0], nv * ne), dtype=src.dtype, buffer=nl.shared_hbm)
    g = nl.ndarray((src.shape[0], nv * ne), dtype=src.dtype, buffer=nl.sbuf)
    nisa.local_gather(dst=g, src_buffer=s_sb, index=i_sb, num_elem_per_idx=ne,
                      num_valid_indices=nv)
    nisa.dma_copy(dst=out, src=g)
    return out


def _sbuf_like(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def test_local_gather_matches_aws_numpy_semantics(backend):
    """AWS's own example: src (128, 512, 4), 16x4 indices replicated to 8 groups, E=4,
    nv=64; the kernel gets index*E and must equal np.take(src, index, axis=1) per group."""
    rng = np.random.default_rng(3)
    src = rng.standard_normal((128, 512, 4)).astype(np.float32)
    per_core = rng.integers(0, 512, (16, 4)).astype(np.uint16)
    index = np.tile(per_core, (8, 1))
    out = nki.jit(_local_gather, backend=backend)(src, index * 4, 4, 64)
    want = np.empty((128, 64, 4), np.float32)
    for c in range(8):
        rows = slice(16 * c, 16 * c + 16)
        want[rows] = np.take(src[rows], index[rows].flatten(order="F")[:64], axis=1)
    np.testing.assert_array_equal(out, want.reshape(128, 256))


@pytest.mark.parametrize("dtype,ne,nv", [(BF16, 1, 37), (np.int32, 2, 48), (np.uint8, 32, 3)])
def test_local_gather_groups_differ_and_bits_are_kept(backend, dtype, ne, nv):
    from nki.sim.emit.indirect import reference_local_gather

    rng = np.random.default_rng(ne)
    src = (rng.standard_normal((32, 2, 40)) * 50).astype(dtype)
    idx = rng.integers(0, 80 - ne + 1, (32, 3)).astype(np.uint16)   # different per group
    out = nki.jit(_local_gather, backend=backend)(src, idx, ne, nv)
    want = reference_local_gather(src, idx, ne, nv)
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
    # the oracle itself, by hand: group 1, index 0 is idx[16, 0]
    assert out[20, 0] == src.reshape(32, -1)[20, idx[16, 0]] or dtype == BF16


def test_local_gather_out_of_row_index_faults(backend):
    src = np.ones((16, 8), np.float32)
    idx = np.zeros((16, 1), np.uint16)
    idx[3, 0] = 7      # reads elements 7 and 8 of an 8-element row
    with pytest.raises(NkiRuntimeError, match=r"(?s)nki_runtime_out_of_bounds.*index 7.*"
                       r"test_indirect\.py:\d+"):
        nki.jit(_local_gather, backend=backend)(src, idx, 2, 16)


@pytest.mark.parametrize("kw,code", [
    ({"P": 24}, r"nki_shape_mismatch\].*groups of 16"),
    ({"idx_dtype": np.int32}, r"nki_dtype_mismatch\].*uint16"),
    ({"ne": 3}, r"nki_invalid_argument\].*num_elem_per_idx=3"),
    ({"nv": 17}, r"nki_invalid_argument\].*num_valid_indices=17.*1\.\.16"),
    ({"dst_free": 5}, r"nki_shape_mismatch\].*16 indices x 1 elements need 16"),
    ({"dst_dtype": nl.bfloat16}, r"nki_dtype_mismatch\].*does not cast"),
])
def test_local_gather_rules(kw, code):
    P_, ne = kw.get("P", 16), kw.get("ne", 1)

    def k(src, idx):
        s, i = _sbuf_like(src), _sbuf_like(idx)
        d = nl.ndarray((P_, kw.get("dst_free", 16)), dtype=kw.get("dst_dtype", nl.float32),
                       buffer=nl.sbuf)
        nisa.local_gather(dst=d, src_buffer=s, index=i, num_elem_per_idx=ne,
                          num_valid_indices=kw.get("nv"))

    _raises(k, code, np.ones((P_, 8), np.float32),
            np.zeros((P_, 1), kw.get("idx_dtype", np.uint16)))


def test_local_gather_rejects_a_view_straddling_two_cores():
    def k(src, idx):
        s, i = _sbuf_like(src), _sbuf_like(idx)
        d = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.local_gather(dst=d[8:24, :], src_buffer=s[8:24, :], index=i[8:24, :])

    _raises(k, r"nki_shape_mismatch\].*starts at partition 8", np.ones((32, 8), np.float32),
            np.zeros((32, 1), np.uint16))


# ----- trn3 tensor indirection: t.indirect(index, num_elem) --------------------------------
def _ti_copy(data, idx, num):
    d, i = _sbuf_like(data), _sbuf_like(idx)
    g = nl.ndarray((data.shape[0], num), dtype=data.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=g, src=d.indirect(i, num_elem=num), engine=nisa.engine.vector)
    out = nl.ndarray(g.shape, dtype=data.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=g)
    return out


def test_tensor_indirection_gathers_columns_like_aws_tutorial(backend):
    """AWS's TI tutorial: the same 16-partition offset tile replicated to every group gives
    out = data[:, offsets], with offset i at index[i % 16, i // 16]."""
    rng = np.random.default_rng(5)
    data = rng.standard_normal((64, 100)).astype(np.float32)
    offsets = rng.integers(0, 100, 48).astype(np.uint16)
    tile16 = offsets.reshape(3, 16).T                      # [i % 16, i // 16]
    idx = np.tile(tile16, (4, 1))
    out = nki.jit(_ti_copy, backend=backend, target="trn3")(data, idx, 48)
    np.testing.assert_array_equal(out, data[:, offsets])


def test_tensor_indirection_feeds_arithmetic_per_group(backend):
    from nki.sim.emit.indirect import reference_tensor_gather

    def k(data, idx):
        d, i = _sbuf_like(data), _sbuf_like(idx)
        r = nl.ndarray((32, 20), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=r, data=d.indirect(i, 20), op0=nl.multiply, operand0=2.0)
        out = nl.ndarray(r.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=r)
        return out

    rng = np.random.default_rng(6)
    data = rng.standard_normal((32, 4, 6)).astype(BF16)
    idx = rng.integers(0, 24, (32, 2)).astype(np.uint16)   # groups use different offsets
    out = nki.jit(k, backend=backend, target="trn3")(data, idx)
    want = reference_tensor_gather(data, idx, 20).astype(np.float32) * np.float32(2.0)
    np.testing.assert_array_equal(out, want)


def test_tensor_indirection_offset_outside_the_row_faults(backend):
    idx = np.zeros((16, 1), np.uint16)
    idx[2, 0] = 10
    with pytest.raises(NkiRuntimeError, match=r"(?s)nki_runtime_out_of_bounds.*offset 10.*"
                       r"test_indirect\.py:\d+"):
        nki.jit(_ti_copy, backend=backend, target="trn3")(np.ones((16, 10), np.float32),
                                                          idx, 16)


def _ti_raises(fn, code, *args, target="trn3"):
    with pytest.raises(NkiError, match=r"(?s)" + code + r".*test_indirect.py:\d+"):
        nki.jit(fn, backend="python", target=target)(*args)


def test_tensor_indirection_needs_trn3():
    _ti_raises(_ti_copy, r"nki_unsupported_on_target\].*NeuronCore-v4", np.ones((16, 4),
               np.float32), np.zeros((16, 1), np.uint16), 4, target="trn2")


def test_tensor_indirection_rules():
    def too_many(data, idx):
        d, i = _sbuf_like(data), _sbuf_like(idx)
        g = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=g, src=d.indirect(i))      # default num_elem = index.size = 64

    _ti_raises(too_many, r"nki_shape_mismatch\].*num_elem=64.*holds 32",
               np.ones((32, 8), np.float32), np.zeros((32, 2), np.uint16))

    def bad_dtype(data, idx):
        _sbuf_like(data).indirect(_sbuf_like(idx), 4)

    _ti_raises(bad_dtype, r"nki_dtype_mismatch\].*uint16 or uint32",
               np.ones((16, 8), np.float32), np.zeros((16, 1), np.int32))


# ----- tensor indirection as a destination (scatter) and the group-size rule ----------------
def _snake(idx, s, group, num):
    """Offsets of the group of partitions starting at s: offset i = idx[s + i % G, i // G]."""
    return [int(idx[s + i % group, i // group]) for i in range(num)]


def _ti_gather_np(data, idx, num, group):
    flat = data.reshape(data.shape[0], -1)
    out = np.empty((data.shape[0], num), data.dtype)
    for s in range(0, data.shape[0], group):
        out[s:s + group] = flat[s:s + group][:, _snake(idx, s, group, num)]
    return out


def _ti_scatter_np(data, src, idx, group):
    out = data.reshape(data.shape[0], -1).copy()
    for s in range(0, data.shape[0], group):
        for i, off in enumerate(_snake(idx, s, group, src.shape[1])):
            out[s:s + group, off] = src[s:s + group, i]     # in column order: last wins
    return out.reshape(data.shape)


def _distinct_offsets(rng, rows, cols, limit, num, group=16):
    """Index tiles whose every group's first ``num`` snake offsets are distinct."""
    idx = rng.integers(0, limit, (rows, cols)).astype(np.uint16)
    for s in range(0, rows, group):
        for i, off in enumerate(rng.permutation(limit)[:num]):
            idx[s + i % group, i // group] = off
    return idx


def _to_hbm(t):
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    if t.buffer == nl.psum:
        sb = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=sb, src=t)
        t = sb
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_tensor_indirection_destination_scatters_columns(backend, dtype):
    def k(data, src, idx):
        d, s = _sbuf_like(data), _sbuf_like(src)
        nisa.tensor_copy(dst=d.indirect(_sbuf_like(idx), src.shape[1]), src=s)
        return _to_hbm(d)

    rng = np.random.default_rng(21)
    data = rng.standard_normal((32, 4, 6)).astype(dtype)
    src = rng.standard_normal((32, 20)).astype(dtype)
    idx = _distinct_offsets(rng, 32, 2, 24, 20)
    out = nki.jit(k, backend=backend, target="trn3")(data, src, idx)
    want = _ti_scatter_np(data, src, idx, 16)
    assert not np.array_equal(want, data)
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))


def test_tensor_indirection_destination_repeated_offsets_last_column_wins(backend):
    def k(data, src, idx):
        d = _sbuf_like(data)
        nisa.tensor_copy(dst=d.indirect(_sbuf_like(idx), 32), src=_sbuf_like(src))
        return _to_hbm(d)

    data = np.zeros((16, 8), np.float32)
    src = np.arange(16 * 32, dtype=np.float32).reshape(16, 32)
    idx = np.full((16, 2), 3, np.uint16)            # all 32 columns land on element 3
    idx[5, 1] = 6                                   # column 21 alone on element 6
    out = nki.jit(k, backend=backend, target="trn3")(data, src, idx)
    want = np.zeros((16, 8), np.float32)
    want[:, 3], want[:, 6] = src[:, 31], src[:, 21]
    np.testing.assert_array_equal(out, want)


def test_tensor_indirection_read_modify_write_in_place(backend):
    def k(data, idx):
        d = _sbuf_like(data)
        v = d.indirect(_sbuf_like(idx), 24)
        nisa.tensor_scalar(dst=v, data=v, op0=nl.multiply, operand0=-3.0)
        return _to_hbm(d)

    rng = np.random.default_rng(22)
    data = rng.standard_normal((48, 30)).astype(np.float32)
    idx = _distinct_offsets(rng, 48, 2, 30, 24)
    out = nki.jit(k, backend=backend, target="trn3")(data, idx)
    cols = _ti_gather_np(data, idx, 24, 16) * np.float32(-3.0)
    np.testing.assert_array_equal(out, _ti_scatter_np(data, cols, idx, 16))


def test_tensor_indirection_dma_copy_destination_in_sbuf(backend):
    def k(data, src, idx):
        d = _sbuf_like(data)
        nisa.dma_copy(dst=d.indirect(_sbuf_like(idx), 16), src=src)   # HBM -> SBUF columns
        return _to_hbm(d)

    rng = np.random.default_rng(23)
    data = rng.standard_normal((32, 40)).astype(np.float32)
    src = rng.standard_normal((32, 16)).astype(np.float32)
    idx = _distinct_offsets(rng, 32, 1, 40, 16)
    out = nki.jit(k, backend=backend, target="trn3")(data, src, idx)
    np.testing.assert_array_equal(out, _ti_scatter_np(data, src, idx, 16))


def test_tensor_indirection_matmul_operand_uses_groups_of_32(backend):
    """The spec's G is 32 for the Tensor engine: the moving operand's offsets come from
    index[i % 32, i // 32] (with G = 16 the columns would differ)."""
    def k(st, mv, idx):
        ps = nl.ndarray((8, 32), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=_sbuf_like(st),
                       moving=_sbuf_like(mv).indirect(_sbuf_like(idx), 32))
        return _to_hbm(ps)

    rng = np.random.default_rng(24)
    st = rng.integers(-3, 4, (32, 8)).astype(np.float32)
    mv = rng.integers(-3, 4, (32, 60)).astype(np.float32)
    idx = rng.integers(0, 60, (32, 2)).astype(np.uint16)
    out = nki.jit(k, backend=backend, target="trn3")(st, mv, idx)
    want = st.T @ _ti_gather_np(mv, idx, 32, 32)
    assert not np.array_equal(want, st.T @ _ti_gather_np(mv, idx, 32, 16))
    np.testing.assert_array_equal(out, want)


# accumulate=True warns that the hidden tile was never written by a matmul (it was memset)
@pytest.mark.filterwarnings("ignore:.*nki_accumulate_uninitialized")
@pytest.mark.parametrize("accumulate", [False, True])
def test_tensor_indirection_matmul_destination_in_psum(backend, accumulate):
    def k(st, mv, idx):
        ps = nl.ndarray((32, 40), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=ps, value=1.0)
        nisa.nc_matmul(dst=ps.indirect(_sbuf_like(idx), 16), stationary=_sbuf_like(st),
                       moving=_sbuf_like(mv), accumulate=accumulate)
        return _to_hbm(ps)

    rng = np.random.default_rng(25)
    st = rng.integers(-3, 4, (16, 32)).astype(np.float32)
    mv = rng.integers(-3, 4, (16, 16)).astype(np.float32)
    idx = _distinct_offsets(rng, 32, 1, 40, 16, group=32)
    out = nki.jit(k, backend=backend, target="trn3")(st, mv, idx)
    ones = np.ones((32, 40), np.float32)
    cols = st.T @ mv + (1.0 if accumulate else 0.0)
    np.testing.assert_array_equal(out, _ti_scatter_np(ones, cols, idx, 32))


def test_tensor_indirection_destination_offset_outside_the_row_faults(backend):
    def k(data, idx):
        d = _sbuf_like(data)
        nisa.memset(dst=d.indirect(_sbuf_like(idx), 16), value=0.0)
        return _to_hbm(d)

    idx = np.zeros((16, 1), np.uint16)
    idx[7, 0] = 12
    with pytest.raises(NkiRuntimeError, match=r"(?s)nki_runtime_out_of_bounds.*offset 12.*"
                       r"column 7.*test_indirect\.py:\d+"):
        nki.jit(k, backend=backend, target="trn3")(np.ones((16, 12), np.float32), idx)


def test_tensor_indirection_group_size_follows_the_consuming_engine():
    """16 partitions are a whole group for the Vector engine but not for the Tensor engine:
    the same view passes tensor_copy and is rejected by nc_matmul, at the matmul's line."""
    def k(mv, idx):
        m, i = _sbuf_like(mv), _sbuf_like(idx)
        g = nl.ndarray((16, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=g, src=m.indirect(i, 16))
        ps = nl.ndarray((16, 16), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=g, moving=m.indirect(i, 16))

    _ti_raises(k, r"nki_shape_mismatch\].*nc_matmul: tensor indirection reads offsets per "
               r"group of 32 partitions", np.ones((16, 16), np.float32),
               np.zeros((16, 1), np.uint16))


def test_tensor_indirection_of_hbm_points_to_vector_offset():
    def k(data, idx):
        nisa.dma_copy(dst=data.indirect(_sbuf_like(idx), 4), src=_sbuf_like(data[:, 0:4]))

    _ti_raises(k, r"nki_invalid_view\].*SBUF/PSUM view.*vector_offset=idx",
               np.ones((16, 8), np.float32), np.zeros((16, 1), np.uint16))
