"""The compiled scheduler loop (nki/cost/fast.py) gives the Python reference's timeline
exactly: same instructions, times, deciding predecessors and DMA engines."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
from nki.kernels import flash_attention, matmul_lhsT
from test_engine_sharing import act_beside_vector, chain, mamba_step
from test_ordering import exp_rows, scale_rows
from test_schedule import halves, scale_tiles

import nki
import nki.isa as nisa
import nki.language as nl
from nki.cost import estimate
from nki.errors import NkiSpillWarning

BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(0)

CASES = {
    "scale_tiles": (nki.jit(scale_tiles), (np.ones((1024, 512), np.float32),)),
    "hoist": (nki.jit(scale_rows), (np.ones((512, 256), np.float32),
                                    np.ones((128, 256), np.float32), False)),
    "tile_list": (nki.jit(exp_rows), (np.ones((1024, 256), np.float32), 2)),
    "lnc2": (nki.jit(halves)[2], (np.ones((1024, 256), np.float32),)),
    "matmul": (matmul_lhsT, (np.ones((512, 256), BF16), np.ones((512, 1024), BF16))),
    "attention": (flash_attention, (rng.random((1, 2, 512, 64)).astype(BF16),) * 3),
    # trn1 ports per memory, chained-instruction overhead, a legacy broadcast on TensorE
    "ports_psum": (nki.jit(act_beside_vector), (np.ones((128, 512), np.float32), True)),
    "ports_sbuf": (nki.jit(act_beside_vector), (np.ones((128, 512), np.float32), False)),
    "chain": (nki.jit(chain), (np.ones((128, 512), np.float32), True)),
    "broadcast": (nki.jit(mamba_step), (np.ones((128, 512), np.float32),
                                        np.ones((1, 512), np.float32))),
}


def _same(a, b):
    assert a.sidx == b.sidx
    assert a.start == b.start and a.end == b.end
    assert a.pred == b.pred and a.pred_dep == b.pred_dep
    assert [tuple(sorted(q)) for q in a.queues] == [tuple(sorted(q)) for q in b.queues]


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_numba_schedule_equals_python(case, target):
    kernel, args = CASES[case]
    kw = {"causal": True} if case == "attention" else {}
    py = estimate(kernel, target=target, backend="python")(*args, **kw)
    nb = estimate(kernel, target=target, backend="numba")(*args, **kw)
    for a, b in zip(py.timelines, nb.timelines):
        _same(a, b)
    assert py.latency_ns == nb.latency_ns


def test_numba_schedule_equals_python_with_spills():
    from test_spill import F, rotate_pairs
    x = rng.standard_normal((64, F)).astype(np.float32)
    cs = rng.standard_normal((32, F)).astype(np.float32)
    k = nki.jit(rotate_pairs, cache=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NkiSpillWarning)
        py = estimate(k, target="trn2", backend="python")(x, cs, cs)
        nb = estimate(k, target="trn2", backend="numba")(x, cs, cs)
    assert any(py.preps[0].instrs[s].cost.note.startswith("spill") for s in py.timelines[0].sidx)
    _same(py.timelines[0], nb.timelines[0])


def _hoisted_tile_lists(lhsT, rhs):
    """A tile list longer than the records' cap: 32 stationary tiles loaded once, each read
    by one matmul per moving block (the pattern that overflowed the compiled loop)."""
    k, m = lhsT.shape
    n = rhs.shape[1]
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    stationary = []
    for t in nl.affine_range(k // 128):
        s = nl.ndarray((128, m), dtype=lhsT.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=lhsT[t * 128:(t + 1) * 128, :])
        stationary.append(s)
    for j in nl.affine_range(n // 512):
        acc = nl.ndarray((m, 512), dtype=nl.float32, buffer=nl.psum)
        for t in nl.affine_range(k // 128):
            mv = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=mv, src=rhs[t * 128:(t + 1) * 128, j * 512:(j + 1) * 512])
            nisa.nc_matmul(dst=acc, stationary=stationary[t], moving=mv)
        res = nl.ndarray((m, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out[:, j * 512:(j + 1) * 512], src=res)
    return out


def test_numba_schedule_equals_python_when_a_family_outgrows_the_cap():
    args = (np.ones((4096, 128), np.float32), np.ones((4096, 1024), np.float32))
    py = estimate(nki.jit(_hoisted_tile_lists), target="trn2", backend="python")(*args)
    nb = estimate(nki.jit(_hoisted_tile_lists), target="trn2", backend="numba")(*args)
    _same(py.timelines[0], nb.timelines[0])


def test_records_never_exceed_the_cap_the_compiled_loop_allocates():
    from nki.cost.schedule import _Records
    recs = _Records()
    for i in range(3 * _Records.CAP):   # disjoint writes with a read now and then
        write = i % 10 != 0
        recs.add(0, (0, 128, 64 * i, 64 * i + 64), 1, write, float(i), i)
        assert len(recs.by_family[0]) <= _Records.CAP


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compiled_dma_placement_equals_python(seed):
    """The compiled DMA engines (sliding interval tables, back-to-back tails, cached pieces)
    place random packets as schedule.DmaEngines does: ready times that jump back and forth
    (gaps to fill), zero durations, every packet count, far more placements than the
    engines keep."""
    from nki.cost._fastloop import _dma_state, _place
    from nki.cost.schedule import DmaEngines
    r = np.random.default_rng(seed)
    nq = 16
    py, nb = DmaEngines(nq), _dma_state(nq)
    clock = 0.0
    for index in range(3000):
        clock += float(r.choice([0.0, 5.0, 40.0]))
        ready = max(0.0, clock - float(r.choice([0.0, 0.0, 30.0, 400.0])))
        dur = float(r.choice([0.0, 3.0, 17.5, 90.0]))
        k = int(r.choice([1, 2, 5, nq, nq]))
        start, end, queues, who = py.place(ready, dur, k, index)
        got = _place(nb, nq, ready, dur, k, index)
        assert (got[0], got[1], got[3]) == (start, end, who), index
        assert got[2] == sum(1 << q for q in queues), index
