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


# ----- all_gather_v / all_to_all_v: flat buffers, counts read from metadata at run time ----
def _reference_v(srcs, metas, dst_size, rdispls, fill):
    """Rank r's dst and recv_counts: each sender s's chunk src_s[displ_s[r]:+count_s[r]] lands
    at recv_displs_r[s] (has_rdispls) or at slot s of dst_size / n elements."""
    n = len(srcs)
    outs, recvs = [], []
    for r in range(n):
        dst, recv = np.full(dst_size, fill, srcs[0].dtype), np.zeros(n, np.uint32)
        for s in range(n):
            cnt, dsp = int(metas[s][0, r]), int(metas[s][1, r])
            start = int(metas[r][3, s]) if rdispls else s * (dst_size // n)
            dst[start:start + cnt] = srcs[s][dsp:dsp + cnt]
            recv[s] = cnt
        outs.append(dst)
        recvs.append(recv)
    return outs, recvs


def _v_kernel(api, dst_size, known, rdispls, meta_in_sbuf=False):
    def k(x, meta_in):
        me = ncc.rank_id()
        src = nl.ndarray(x.shape[1:], dtype=x.dtype, buffer=nl.private_hbm)
        nisa.dma_copy(dst=src, src=x[me])
        fill = nl.ndarray((1, dst_size), dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=fill, value=-1.0)
        dst = nl.ndarray((dst_size,), dtype=x.dtype, buffer=nl.private_hbm)
        nisa.dma_copy(dst=dst, src=fill)
        rows, n = meta_in.shape[1:]
        if meta_in_sbuf:
            meta = nl.ndarray((1, rows, n), dtype=nl.uint32, buffer=nl.sbuf)
        else:
            meta = nl.ndarray((rows, n), dtype=nl.uint32, buffer=nl.private_hbm)
        nisa.dma_copy(dst=meta, src=meta_in[me])
        api(srcs=[src], dsts=[dst], replica_group=RG, metadata_tensor=meta,
            recv_counts_known=known, has_rdispls=rdispls)
        out = nl.ndarray((2, dst_size), dtype=x.dtype, buffer=nl.shared_hbm)
        meta_out = nl.ndarray(meta_in.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[me], src=dst)
        nisa.dma_copy(dst=meta_out[me], src=meta)
        return out, meta_out

    return k


def test_all_gather_v_broadcasts_variable_chunks(backend):
    """The broadcast form: every column of rows 0/1 equal; dst = the chunks in rank order,
    each in its slot; row 2 receives the counts."""
    x = np.arange(2 * 10, dtype=np.float32).reshape(2, 10)
    meta = np.zeros((2, 3, 2), np.uint32)
    meta[0, 0], meta[0, 1] = 3, 2          # rank 0 sends x0[2:5] to both
    meta[1, 0], meta[1, 1] = 6, 4          # rank 1 sends x1[4:10] to both
    out, m = _jit(_v_kernel(ncc.all_gather_v, 16, False, False), backend=backend)[2](x, meta)
    want, recv = _reference_v([x[0], x[1]], list(meta), 16, False, -1.0)
    for r in range(2):
        np.testing.assert_array_equal(out[r], want[r])
        np.testing.assert_array_equal(m[r, 2], recv[r])
        np.testing.assert_array_equal(m[r, :2], meta[r, :2])
    np.testing.assert_array_equal(out[0][:3], x[0][2:5])
    np.testing.assert_array_equal(out[1][8:14], x[1][4:10])


def test_all_to_all_v_with_recv_displacements(backend):
    x = (np.random.default_rng(4).standard_normal((2, 12)) * 9).astype(np.int32)
    meta = np.zeros((2, 4, 2), np.uint32)
    meta[0, :2] = [[1, 5], [0, 1]]         # rank 0: 1 elem to rank 0, 5 elems to rank 1
    meta[1, :2] = [[4, 2], [6, 10]]        # rank 1: 4 elems to rank 0, 2 to rank 1
    meta[0, 3] = [7, 0]                    # rank 0 puts rank 0's chunk at 7, rank 1's at 0
    meta[1, 3] = [2, 5]
    meta[:, 2] = 99                        # recv_counts_known: row 2 left untouched
    kern = _v_kernel(ncc.all_to_all_v, 9, True, True, meta_in_sbuf=True)
    out, m = _jit(kern, backend=backend)[2](x, meta)
    want, _ = _reference_v([x[0], x[1]], list(meta), 9, True, -1)
    for r in range(2):
        np.testing.assert_array_equal(out[r], want[r])
    np.testing.assert_array_equal(m, meta)


def test_all_to_all_v_send_outside_src_faults(backend):
    x = np.zeros((2, 4), np.float32)
    meta = np.zeros((2, 3, 2), np.uint32)
    meta[1, 0, 0], meta[1, 1, 0] = 3, 2    # rank 1 sends src[2:5] of a 4-element src
    with pytest.raises(NkiRuntimeError, match=_err("nki_runtime_out_of_bounds", "core 1",
                                                   "all_to_all_v", "send_counts\\[0\\]=3")):
        _jit(_v_kernel(ncc.all_to_all_v, 8, False, False), backend=backend)[2](x, meta)


def test_all_gather_v_chunk_overflowing_its_slot_faults(backend):
    x = np.zeros((2, 8), np.float32)
    meta = np.zeros((2, 3, 2), np.uint32)
    meta[0, 0] = 5                         # 5 elements into 4-element slots
    with pytest.raises(NkiRuntimeError, match=_err("nki_runtime_out_of_bounds",
                                                   "all_gather_v", "4-element slot")):
        _jit(_v_kernel(ncc.all_gather_v, 8, False, False), backend=backend)[2](x, meta)


@pytest.mark.parametrize("meta_dtype,meta_shape,words", [
    (nl.int32, (3, 2), ("nki_dtype_mismatch", "uint32")),
    (nl.uint32, (4, 2), ("nki_shape_mismatch", "\\(3, 2\\)", "recv_counts")),
])
def test_v_collective_metadata_rules(meta_dtype, meta_shape, words):
    def k(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.private_hbm)
        meta = nl.ndarray(meta_shape, dtype=meta_dtype, buffer=nl.private_hbm)
        ncc.all_gather_v(srcs=[t], dsts=[t], replica_group=RG, metadata_tensor=meta)
        return x

    with pytest.raises(NkiValidationError, match=_err(*words)):
        _jit(k, backend="python")[2](np.ones((4, 4), np.float32))


def test_v_collective_needs_hbm():
    def k(x):
        t = _sbuf(x)
        meta = nl.ndarray((3, 2), dtype=nl.uint32, buffer=nl.private_hbm)
        ncc.all_to_all_v(srcs=[t], dsts=[t], replica_group=RG, metadata_tensor=meta)
        return x

    with pytest.raises(NkiValidationError, match=_err("err_unsupported_memory", "srcs\\[0\\]",
                                                      "HBM")):
        _jit(k, backend="python")[2](np.ones((4, 4), np.float32))


# ----- collective_permute_implicit(_reduce): ring over the rank-list ----------------------
def _ring_kernel(rg, reduce_op=None):
    def k(x):
        me = ncc.rank_id()
        a, b = _sbuf(x[me, 0]), _sbuf(x[me, 1])
        d0 = nl.ndarray(a.shape, dtype=nl.bfloat16 if reduce_op else x.dtype, buffer=nl.sbuf)
        d1 = nl.ndarray(a.shape, dtype=d0.dtype, buffer=nl.sbuf)
        if reduce_op is None:
            ncc.collective_permute_implicit([[a], [b]], [[d0], [d1]], rg, channel_ids=[0, 1])
        else:
            ncc.collective_permute_implicit_reduce([[a]], [[b]], [[d0]], rg, op=reduce_op)
            nisa.memset(dst=d1, value=0.0)
        reg = ncc.collective_permute_implicit_current_processing_rank_id(1, rg)
        who = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(who, reg)
        out = nl.ndarray((2, 2) + a.shape, dtype=d0.dtype, buffer=nl.shared_hbm)
        src = nl.ndarray((2, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[me, 0], src=d0)
        nisa.dma_copy(dst=out[me, 1], src=d1)
        nisa.dma_copy(dst=src[me:me + 1, :], src=who)
        return out, src

    return k


def test_permute_implicit_two_channels_ring_of_two(backend):
    x = np.random.default_rng(7).standard_normal((2, 2, 8, 4)).astype(np.float32)
    out, who = _jit(_ring_kernel(RG), backend=backend)[2](x)
    for r in range(2):
        np.testing.assert_array_equal(out[r], x[1 - r])     # from the predecessor
    np.testing.assert_array_equal(who[:, 0], [1, 0])       # after one step: the predecessor


def test_permute_implicit_ring_of_one_keeps_own_data(backend):
    x = np.random.default_rng(8).standard_normal((2, 2, 8, 4)).astype(np.float32)
    out, who = _jit(_ring_kernel(ncc.ReplicaGroup([[0], [1]])), backend=backend)[2](x)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(who[:, 0], [0, 1])


def _ring_ids_at_run_time(rg, steps=5):
    """Per core: the processing rank of every iteration of a runtime loop (iteration_id a
    register), the row of x that rank id selects (the documented use: a dynamic offset),
    and the rank for a register holding 7."""
    def k(x):
        me = ncc.rank_id()
        who = nl.ndarray((1, steps + 1), dtype=nl.int32, buffer=nl.sbuf)
        w = x.shape[1]
        rows = nl.ndarray((1, steps * w), dtype=x.dtype, buffer=nl.sbuf)

        def body(i):
            r = ncc.collective_permute_implicit_current_processing_rank_id(i, rg)
            nisa.register_store(who[0:1, nl.ds(i, 1)], r)
            nisa.dma_copy(dst=rows[0:1, nl.ds(i * w, w)], src=x[nl.ds(r, 1), :])

        nl.fori_loop(0, steps, body)
        seven = nisa.register_alloc(7)
        r7 = ncc.collective_permute_implicit_current_processing_rank_id(seven, rg)
        nisa.register_store(who[0:1, steps:steps + 1], r7)
        out = nl.ndarray((2, steps + 1), dtype=nl.int32, buffer=nl.shared_hbm)
        got = nl.ndarray((2, 1, steps * w), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[me:me + 1, :], src=who)
        nisa.dma_copy(dst=got[me], src=rows)
        return out, got

    return k


@pytest.mark.parametrize("lists", [[[0, 1]], [[1, 0]], [[0], [1]]])
def test_processing_rank_id_with_a_register_iteration(backend, lists):
    x = np.arange(2 * 3, dtype=np.float32).reshape(2, 3)
    who, got = _jit(_ring_ids_at_run_time(ncc.ReplicaGroup(lists)), backend=backend)[2](x)
    for core in range(2):
        group = next(g for g in lists if core in g)
        me = group.index(core)
        want = [group[(me - k) % len(group)] for k in list(range(5)) + [7]]
        np.testing.assert_array_equal(who[core], want)
        np.testing.assert_array_equal(got[core, 0], x[want[:5]].reshape(-1))


def test_processing_rank_id_rejects_a_register_expression():
    def k(x):
        def body(i):
            ncc.collective_permute_implicit_current_processing_rank_id(i + 1, RG)
        nl.fori_loop(0, 2, body)
        return x

    with pytest.raises(NkiValidationError, match=_err("nki_invalid_argument", "iteration_id",
                                                      "into a register first")):
        _jit(k, backend="python")[2](np.ones((2, 2), np.float32))


@pytest.mark.parametrize("op,fn", [(nl.add, np.add), (nl.maximum, np.maximum)])
def test_permute_implicit_reduce_sends_the_reduction(backend, op, fn):
    import ml_dtypes

    x = np.random.default_rng(9).standard_normal((2, 2, 8, 4)).astype(np.float32)
    out, _ = _jit(_ring_kernel(RG, op), backend=backend)[2](x)
    for r in range(2):
        want = fn(x[1 - r, 0], x[1 - r, 1]).astype(ml_dtypes.bfloat16)
        np.testing.assert_array_equal(out[r, 0].view(np.uint16), want.view(np.uint16))


def _plain_vs_reduce(x):
    me = ncc.rank_id()
    a = _sbuf(x)
    d = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    if me == 0:
        ncc.collective_permute_implicit([[a]], [[d]], RG)
    else:
        ncc.collective_permute_implicit_reduce([[a]], [[a]], [[d]], RG, op=nl.add)
    return x


def test_permute_implicit_against_reduce_is_a_named_deadlock(backend):
    t0 = time.monotonic()
    with pytest.raises(NkiRuntimeError, match=_err("nki_collective_deadlock",
                                                   "collective_permute_implicit",
                                                   "collective_permute_implicit_reduce")):
        _jit(_plain_vs_reduce, backend=backend)[2](np.ones((4, 4), np.float32))
    assert time.monotonic() - t0 < 60


@pytest.mark.parametrize("kw,words", [
    ({"channel_ids": [1]}, ("nki_invalid_argument", "consecutive from 0")),
    ({"channel_ids": [0, 1]}, ("nki_invalid_argument", "one tensor per channel")),
])
def test_permute_implicit_rules(kw, words):
    def k(x):
        t = _sbuf(x)
        ncc.collective_permute_implicit([[t]], [[t]], RG, **kw)
        return x

    with pytest.raises(NkiValidationError, match=_err(*words)):
        _jit(k, backend="python")[2](np.ones((4, 4), np.float32))


def test_permute_implicit_reduce_op_must_be_a_reduction():
    def k(x):
        t = _sbuf(x)
        ncc.collective_permute_implicit_reduce([[t]], [[t]], [[t]], RG, op=nl.subtract)
        return x

    with pytest.raises(NkiValidationError, match=_err("nki_invalid_argument", "subtract")):
        _jit(k, backend="python")[2](np.ones((4, 4), np.float32))
