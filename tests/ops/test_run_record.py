"""``Kernel.last_run_record``: the trip counts of runtime loops and the rows
``oob_mode.skip`` left out, as the run did them (both backends), each checked against the
count the inputs imply; the kernels' outputs are checked against numpy too."""

from __future__ import annotations

import numpy as np
import pytest
from test_control import F as TF
from test_control import T, X, _count_tile, countdown, skip_tile

import nki
import nki.isa as nisa
import nki.language as nl
from nki.ir.nodes import DYN_LOOPS, walk

F = 16


def loops_kernel(x, n):
    """out = x * 4**n: two fori_loops of n doublings (one per unrolled outer iteration)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=acc, src=x)
    _, count = _count_tile(n)
    for _ in range(2):
        nl.fori_loop(0, count, lambda i: nisa.tensor_scalar(dst=acc, data=acc,
                                                             op0=nl.multiply, operand0=2.0))
    nisa.dma_copy(dst=out, src=acc)
    return out


@pytest.mark.parametrize("n", [3, 0])
def test_runtime_loop_trips(backend, n):
    x = np.arange(128 * F, dtype=np.float32).reshape(128, F) / 64
    kern = nki.jit(loops_kernel, backend=backend)
    assert kern.last_run_record is None
    out = kern(x, np.array([[n]], np.int32))
    np.testing.assert_array_equal(out, x * np.float32(4.0 ** n))
    (record,) = kern.last_run_record
    assert record.complete and record.core == 0
    assert [(lp.api, lp.entries, lp.trips) for lp in record.loops] == \
        [("nl.fori_loop", 1, n), ("nl.fori_loop", 1, n)]
    # the record's loops are the program's runtime loops in walk order
    program = kern.specialize(x, np.array([[n]], np.int32)).cores[0].program
    assert [s.loc for s, _ in walk(program.body) if isinstance(s, DYN_LOOPS)] == \
        [lp.loc for lp in record.loops]


@pytest.mark.parametrize("n", [4, 0])
def test_while_loop_trips(backend, n):
    x = X[:128]
    kern = nki.jit(countdown, backend=backend)
    out, left, _ = kern(x, np.array([[n]], np.int32))
    np.testing.assert_array_equal(out, sum((x for _ in range(n)), np.zeros_like(x)))
    assert [(lp.api, lp.trips) for lp in kern.last_run_record[0].loops] == \
        [("nl.while_loop", n)]


def test_record_is_per_call(backend):
    x = np.ones((128, F), np.float32)
    kern = nki.jit(loops_kernel, backend=backend)
    kern(x, np.array([[5]], np.int32))
    kern(x, np.array([[1]], np.int32))
    assert [lp.trips for lp in kern.last_run_record[0].loops] == [1, 1]


P, D, V = 128, 8, 50


def embedding(table, idx):
    """out[p] = table[idx[p]]; out-of-range rows keep -1 (oob_mode.skip)."""
    out = nl.ndarray((P, D), dtype=table.dtype, buffer=nl.shared_hbm)
    ids = nl.ndarray((P, 1), dtype=idx.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=idx)
    rows = nl.ndarray((P, D), dtype=table.dtype, buffer=nl.sbuf)
    nisa.memset(dst=rows, value=-1.0)
    src = table.ap([[D, P], [1, D]], 0, vector_offset=ids, indirect_dim=0)
    nisa.dma_copy(dst=rows, src=src, oob_mode=nisa.oob_mode.skip)
    nisa.dma_copy(dst=out, src=rows)
    return out


def test_skipped_indirect_rows_are_counted(backend):
    rng = np.random.default_rng(3)
    table = rng.standard_normal((V, D)).astype(np.float32)
    idx = rng.integers(0, V, (P, 1)).astype(np.int32)
    bad = [5, 9, 77]
    idx[bad, 0] = (V, -3, V + 10)
    kern = nki.jit(embedding, backend=backend)
    out = kern(table, idx)
    ok = (idx[:, 0] >= 0) & (idx[:, 0] < V)
    expect = np.full((P, D), -1.0, np.float32)
    expect[ok] = table[idx[ok, 0]]
    np.testing.assert_array_equal(out, expect)
    assert kern.last_run_record[0].skipped_rows == len(bad)
    assert kern.last_run_record[0].loops == ()
    kern(table, np.zeros((P, 1), np.int32))
    assert kern.last_run_record[0].skipped_rows == 0


@pytest.mark.parametrize("n,skipped", [(1, 0), (T, 1)])
def test_skipped_register_moved_dma_is_counted(backend, n, skipped):
    kern = nki.jit(skip_tile, backend=backend)
    out = kern(X, np.array([[n]], np.int32))
    expect = X[128 * n:128 * (n + 1)] if not skipped else np.full((128, TF), -1, np.float32)
    np.testing.assert_array_equal(out, expect)
    assert kern.last_run_record[0].skipped_runs == skipped


def test_lnc_cores_each_have_a_record():
    def kernel(x, n):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        rows = x.shape[0] // nl.num_programs(0)
        lo = nl.program_id(0) * rows
        acc = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=acc, src=x[lo:lo + rows, :])
        _, count = _count_tile(n)
        nl.fori_loop(0, count, lambda i: nisa.tensor_scalar(dst=acc, data=acc,
                                                             op0=nl.add, operand0=1.0))
        nisa.dma_copy(dst=out[lo:lo + rows, :], src=acc)
        return out

    x = np.zeros((16, F), np.float32)
    kern = nki.jit(kernel, target="trn2")[2]
    np.testing.assert_array_equal(kern(x, np.array([[4]], np.int32)), x + 4)
    records = kern.last_run_record
    assert [(r.core, r.loops[0].trips) for r in records] == [(0, 4), (1, 4)]
