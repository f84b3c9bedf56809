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
    nisa.dma_copy(dst=rows, src=table.vector_select(0, _ids(idx)))   # casts bf16 -> fp32
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


def test_tensor_indirection_is_not_simulated():
    def k(table, idx):
        table.indirect(_ids(idx), 1)

    _raises(k, r"nki_not_implemented\].*indirect", TABLE, IDX)


def test_local_gather_is_not_simulated():
    def k(table, idx):
        t = nl.ndarray((P, D), dtype=table.dtype, buffer=nl.sbuf)
        nisa.local_gather(dst=t, src_buffer=t, index=_ids(idx))

    _raises(k, r"nki_not_implemented\].*local_gather", TABLE, IDX)
