"""Legacy idioms of AWS's flash_paged_attn_varlen (nki-samples contributed/), each against
numpy: free-dim broadcasting in tensor_tensor and tensor_copy_predicated, a reduction over a
middle free axis, ``t.itemsize``, ``t[step[0, 0]]`` on a rank-3 HBM tensor, and
``mode=oob_mode.skip`` on nl.load / nl.store."""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
from neuronxcc.nki.isa.constants import oob_mode


def broadcast_add(a, b):
    """``a [P, G, F] + b [P, 1, F]``, b broadcast along the middle dim."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.tensor_tensor(nl.load(a), nl.load(b), nl.add))
    return out


def test_tensor_tensor_broadcasts_free_dims(backend, rng):
    a = rng.standard_normal((16, 5, 8)).astype(np.float32)
    b = rng.standard_normal((16, 1, 8)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(broadcast_add, backend=backend)(a, b), a + b)


def predicated(src, dst_init, pred_rows, pred_lead):
    """dst = src where pred_rows [P, 1] (whole partitions) and then where pred_lead [P, K]
    (over the trailing H dim)."""
    out = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    s = nl.load(src)
    d = nl.load(dst_init)
    zero = nl.zeros(src.shape, dtype=src.dtype)
    nisa.tensor_copy_predicated(src=zero, dst=d, predicate=nl.load(pred_rows))
    nisa.tensor_copy_predicated(src=s, dst=d, predicate=nl.load(pred_lead))
    nl.store(out, value=d)
    return out


def test_tensor_copy_predicated_broadcasts_the_predicate(backend, rng):
    src = rng.standard_normal((32, 4, 6)).astype(np.float32)
    init = rng.standard_normal((32, 4, 6)).astype(np.float32)
    rows = (rng.random((32, 1)) < 0.5).astype(np.uint8)
    lead = (rng.random((32, 4)) < 0.5).astype(np.uint8)
    want = np.where(rows[:, :, None] != 0, 0.0, init)
    want = np.where(lead[:, :, None] != 0, src, want).astype(np.float32)
    got = nki.jit(predicated, backend=backend)(src, init, rows, lead)
    np.testing.assert_array_equal(got, want)


def middle_max(x):
    """Max over the middle free axis of ``[P, K, Q]``: ``[P, Q]``."""
    out = nl.ndarray((x.shape[0], x.shape[2]), dtype=x.dtype, buffer=nl.shared_hbm)
    m = nl.ndarray((x.shape[0], x.shape[2]), dtype=x.dtype)
    m[:, :] = nisa.tensor_reduce(np.max, nl.load(x), axis=(1,), dtype=x.dtype)
    nl.store(out, value=m)
    return out


def test_reduce_over_a_middle_free_axis(backend, rng):
    x = rng.standard_normal((128, 8, 4)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(middle_max, backend=backend)(x), x.max(axis=1))


def step_block(tables, step):
    """``tables[step[0, 0]]`` of a ``[S, P, F]`` HBM tensor is step's ``[P, F]`` block (the
    index drops its dim like an int), loaded with oob_mode.skip; ``t.itemsize`` sizes a
    copy."""
    out = nl.ndarray(tables.shape[1:], dtype=tables.dtype, buffer=nl.shared_hbm)
    idx = nl.load(step)
    t = nl.zeros(tables.shape[1:], dtype=tables.dtype)
    assert t.itemsize == np.dtype(np.int32).itemsize
    t[...] = nl.load(tables[idx[0, 0]], mode=oob_mode.skip)
    nl.store(out, value=t)
    return out


def test_one_element_index_on_a_rank3_tensor(backend, rng):
    tables = rng.integers(0, 1000, (5, 128, 3)).astype(np.int32)
    k = nki.jit(step_block, backend=backend)
    for s in (0, 3):
        np.testing.assert_array_equal(k(tables, np.array([[s]], np.int32)), tables[s])
    # past the end: the load is skipped, the zeros stay
    np.testing.assert_array_equal(k(tables, np.array([[5]], np.int32)), 0)


def row_as_column(preds, step):
    """Row ``step[0, 0]`` of a 2-D HBM tensor DMA'd into a ``[u, 1]`` tile (as many
    elements, another shape) with oob_mode.skip, as the decode loop loads its predicates."""
    u = preds.shape[1]
    out = nl.ndarray((u, 1), dtype=preds.dtype, buffer=nl.shared_hbm)
    idx = nl.load(step)
    t = nl.zeros((u, 1), dtype=preds.dtype)
    t[...] = nl.load(preds[idx[0, 0]], mode=oob_mode.skip)
    nl.store(out, value=t)
    return out


def test_register_moved_dma_into_another_shape(backend, rng):
    preds = rng.integers(0, 2, (6, 4)).astype(np.uint8)
    k = nki.jit(row_as_column, backend=backend)
    np.testing.assert_array_equal(k(preds, np.array([[2]], np.int32)), preds[2][:, None])
    np.testing.assert_array_equal(k(preds, np.array([[6]], np.int32)), 0)
