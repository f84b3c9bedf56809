"""Cross-core work in LNC-2 launches: core_barrier, sendrecv, nki.collectives, and deadlock
detection (a mismatched wait raises a named error within seconds, never hangs). Both
backends; errors assert code, words and file:line."""

from __future__ import annotations

import time

import numpy as np
import pytest

import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiRuntimeError, NkiValidationError
from nki.sim.emit.collectives import reference_all_reduce

RG = ncc.ReplicaGroup([[0, 1]])


def _jit(kernel, **options):
    return nki.jit(kernel, cache=False, **options)


def _sbuf(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _write_half(out, t):
    """Each core writes its own half of a shared output (cores never write the same bytes)."""
    me, half = nl.program_id(0), t.shape[0] // 2
    nisa.dma_copy(dst=out[me * half:(me + 1) * half, :], src=t[me * half:(me + 1) * half, :])


def _err(code, *words):
    return "(?s)" + code + ".*" + ".*".join(words) + r".*test_collectives\.py:\d+"


# ----- sendrecv + core_barrier: each core computes half, the halves are exchanged ----------
def _exchange_halves(x):
    me = nl.program_id(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    half = x.shape[0] // 2
    mine = _sbuf(x[me * half:(me + 1) * half, :])
    doubled = nl.ndarray(mine.shape, dtype=mine.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=doubled, data=mine, op0=nl.multiply, operand0=2.0)
    theirs = nl.ndarray(mine.shape, dtype=mine.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=doubled, dst=theirs, send_to_rank=1 - me, recv_from_rank=1 - me,
                  pipe_id=0)
    # each core writes the *other* core's half, then both wait before returning
    nisa.dma_copy(dst=out[(1 - me) * half:(2 - me) * half, :], src=theirs)
    nisa.core_barrier(data=out, cores=(0, 1))
    return out


def test_lnc2_sendrecv_exchanges_halves(backend):
    x = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    y = _jit(_exchange_halves, backend=backend)[2](x)
    np.testing.assert_array_equal(y, x * np.float32(2.0))


def _barrier_orders_hbm(x):
    """Core 1 writes the shared tensor; after the barrier each core copies its half out."""
    me = nl.program_id(0)
    shared = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    if me == 1:
        t = _sbuf(x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=shared, src=t)
    nisa.core_barrier(data=shared, cores=(0, 1))
    half = x.shape[0] // 2
    nisa.dma_copy(dst=out[me * half:(me + 1) * half, :],
                  src=_sbuf(shared[me * half:(me + 1) * half, :]))
    return out


def test_core_barrier_orders_a_shared_write(backend):
    x = np.arange(32 * 8, dtype=np.float32).reshape(32, 8)
    y = _jit(_barrier_orders_hbm, backend=backend)[2](x)
    np.testing.assert_array_equal(y, x + 1)


# ----- nki.collectives --------------------------------------------------------------------
def _all_reduce(x, op):
    me = ncc.rank_id()
    part = _sbuf(x[me])
    total = nl.ndarray(part.shape, dtype=nl.float32, buffer=nl.sbuf)
    ncc.all_reduce(srcs=[part], dsts=[total], replica_group=RG, op=op)
    out = nl.ndarray((2,) + part.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[me], src=total)
    return out


@pytest.mark.parametrize("op", [nl.add, nl.maximum])
def test_all_reduce_two_cores(backend, op):
    x = np.random.default_rng(1).standard_normal((2, 16, 32)).astype(np.float32)
    y = _jit(lambda a: _all_reduce(a, op), backend=backend)[2](x)
    expect = reference_all_reduce({nl.add: np.add, nl.maximum: np.maximum}[op], [x[0], x[1]])
    for core in range(2):
        np.testing.assert_array_equal(y[core], expect)


def _gather_scatter(x):
    me = ncc.rank_id()
    mine = _sbuf(x[me])                                          # (8, 16)
    both = nl.ndarray((16, 16), dtype=x.dtype, buffer=nl.sbuf)
    ncc.all_gather(srcs=[mine], dsts=[both], replica_group=RG, collective_dim=0)
    wide = nl.ndarray((8, 32), dtype=x.dtype, buffer=nl.sbuf)
    ncc.all_gather(srcs=[mine], dsts=[wide], replica_group=RG, collective_dim=1)
    half = nl.ndarray((4, 16), dtype=nl.float32, buffer=nl.sbuf)
    ncc.reduce_scatter(srcs=[mine], dsts=[half], replica_group=RG, collective_dim=0,
                       op=nl.add)
    swapped = nl.ndarray((8, 16), dtype=x.dtype, buffer=nl.sbuf)
    ncc.all_to_all(srcs=[mine], dsts=[swapped], replica_group=RG, collective_dim=0)
    perm = nl.ndarray((8, 16), dtype=x.dtype, buffer=nl.sbuf)
    ncc.collective_permute(srcs=[mine], dsts=[perm], source_target_pairs=[(0, 1), (1, 0)])
    outs = [nl.ndarray((2,) + t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
            for t in (both, wide, half, swapped, perm)]
    for o, t in zip(outs, (both, wide, half, swapped, perm)):
        nisa.dma_copy(dst=o[me], src=t)
    return tuple(outs)


def test_gather_scatter_all_to_all_permute(backend):
    x = np.random.default_rng(2).standard_normal((2, 8, 16)).astype(np.float32)
    both, wide, half, swapped, perm = _jit(_gather_scatter, backend=backend)[2](x)
    total = x[0] + x[1]
    for r in range(2):
        np.testing.assert_array_equal(both[r], np.concatenate([x[0], x[1]], axis=0))
        np.testing.assert_array_equal(wide[r], np.concatenate([x[0], x[1]], axis=1))
        np.testing.assert_array_equal(half[r], total[4 * r:4 * r + 4])
        np.testing.assert_array_equal(swapped[r], np.concatenate([x[0][4 * r:4 * r + 4],
                                                                  x[1][4 * r:4 * r + 4]]))
        np.testing.assert_array_equal(perm[r], x[1 - r])


def test_replica_group_from_partition_op():
    rg = ncc.ReplicaGroup.from_partition_op(8, ncc.rg_partition_op.div, 4)
    assert rg.rank_lists == [[0, 1, 2, 3], [4, 5, 6, 7]]


# ----- deadlocks and mismatches: named errors within seconds -------------------------------
def _mismatched(x):
    me = nl.program_id(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    _write_half(out, _sbuf(x))
    if me == 0:
        nisa.core_barrier(data=out, cores=(0, 1))
    return out


def test_barrier_only_on_one_core_is_a_named_deadlock(backend):
    x = np.ones((4, 4), np.float32)
    t0 = time.monotonic()
    with pytest.raises(NkiRuntimeError, match=_err("nki_collective_deadlock", "core 0 waits",
                                                   "nisa.core_barrier", "core 1 finished")):
        _jit(_mismatched, backend=backend)[2](x)
    assert time.monotonic() - t0 < 30


def _different_calls(x):
    me = nl.program_id(0)
    t = _sbuf(x)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    if me == 0:
        nisa.core_barrier(data=out, cores=(0, 1))
    else:
        r = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=t, dst=r, send_to_rank=0, recv_from_rank=0)
    _write_half(out, t)
    return out


def test_barrier_against_sendrecv_names_both_calls(backend):
    with pytest.raises(NkiRuntimeError, match=_err("nki_collective_deadlock",
                                                   "nisa.core_barrier at test_collectives",
                                                   "nisa.sendrecv at test_collectives")):
        _jit(_different_calls, backend=backend)[2](np.ones((4, 4), np.float32))


def _barrier_vs_all_reduce(x):
    me = nl.program_id(0)
    t = _sbuf(x)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    if me == 0:
        nisa.core_barrier(data=out, cores=(0, 1))
    else:
        ncc.all_reduce(srcs=[t], dsts=[t], replica_group=RG, op=nl.add)
    _write_half(out, t)
    return out


def test_barrier_against_all_reduce_is_a_mismatch(backend):
    with pytest.raises(NkiRuntimeError, match=_err("nki_collective_mismatch", "core 0 in "
                                                   "nisa.core_barrier", "core 1 in "
                                                   "nki.collectives.all_reduce")):
        _jit(_barrier_vs_all_reduce, backend=backend)[2](np.ones((4, 4), np.float32))


# ----- rules ------------------------------------------------------------------------------
def test_barrier_needs_an_lnc2_launch():
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.core_barrier(data=out, cores=(0, 1))
        nisa.dma_copy(dst=out, src=_sbuf(x))
        return out

    with pytest.raises(NkiValidationError, match=_err("nki_invalid_argument", "cores",
                                                      "kernel\\[2\\]")):
        _jit(k, backend="python")(np.ones((4, 4), np.float32))


def test_sendrecv_sizes_must_match():
    def k(x):
        t = _sbuf(x)
        r = nl.ndarray((4, 2), dtype=x.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=t, dst=r, send_to_rank=1, recv_from_rank=1)
        return x

    with pytest.raises(NkiValidationError, match=_err("nki_shape_mismatch", "src", "dst")):
        _jit(k, backend="python")[2](np.ones((4, 4), np.float32))


def test_all_reduce_op_must_be_a_reduction():
    def k(x):
        t = _sbuf(x)
        ncc.all_reduce(srcs=[t], dsts=[t], replica_group=RG, op=nl.subtract)
        return x

    with pytest.raises(NkiValidationError, match=_err("nki_invalid_argument", "subtract")):
        _jit(k, backend="python")[2](np.ones((4, 4), np.float32))


def test_variable_collectives_are_named_not_implemented():
    def k(x):
        ncc.all_gather_v([x], [x], RG, x)
        return x

    with pytest.raises(nki.NkiUnsupportedError, match=_err("nki_not_implemented",
                                                           "all_gather_v")):
        _jit(k, backend="python")(np.ones((4, 4), np.float32))
