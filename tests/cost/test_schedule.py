"""The scheduler: engines overlap, true dependencies order them, LNC cores, runtime loops,
spills. Checked against hand-derived bounds and the timeline itself (the model reads IR only:
no backend to parametrise over)."""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import nki.lnc
from nki.cost import estimate
from nki.errors import NkiSpillWarning, NkiUnsupportedError
from nki.ir.ops import Opcode

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ops"))  # test_control, test_spill


def scale_tiles(x):
    """Each 128-row tile: load, scale on VectorE, store; tiles allocated per iteration."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(x.shape[0] // 128):
        a = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[t * 128:(t + 1) * 128, :])
        nisa.tensor_scalar(dst=a, data=a, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out[t * 128:(t + 1) * 128, :], src=a)
    return out


def _ops(est, core=0):
    prep, tl = est.preps[core], est.timelines[core]
    return [(prep.instrs[s].instr.opcode, st, en) for s, st, en in zip(tl.sidx, tl.start,
                                                                     tl.end)]


def test_engines_overlap_but_never_beat_the_busiest():
    x = np.zeros((1024, 2048), np.float32)
    est = estimate(nki.jit(scale_tiles), target="trn2")(x)
    busy = [est.busy_ns(e) for e in ("vector", "dma")]
    serial = sum(en - st for _, st, en in _ops(est))     # every instruction one after another
    assert max(busy) <= est.latency_ns < serial
    # more rotating copies of the tile never make it slower (fewer write-after-read waits)
    deeper = estimate(nki.jit(scale_tiles), target="trn2", rotation_depth=4)(x)
    assert deeper.latency_ns <= est.latency_ns
    assert est.bottleneck == "dma"


def test_reads_wait_for_the_write_they_read():
    est = estimate(nki.jit(scale_tiles), target="trn2")(np.zeros((256, 512), np.float32))
    ops = _ops(est)
    loads = [o for o in ops if o[0] is Opcode.DMA_COPY][0::2]
    scales = [o for o in ops if o[0] is Opcode.TENSOR_SCALAR]
    stores = [o for o in ops if o[0] is Opcode.DMA_COPY][1::2]
    for load, scale, store in zip(loads, scales, stores):
        assert scale[1] >= load[2]          # RAW: the scale reads the loaded tile
        assert store[1] >= scale[2]         # RAW: the store reads the scaled tile
    # the second tile's load does not wait for the first tile's compute (a new instance)
    assert loads[1][1] < scales[0][2]


def test_print_names_target_version_and_bottleneck():
    est = estimate(nki.jit(scale_tiles), target="trn1")(np.zeros((256, 512), np.float32))
    text = str(est)
    assert "on trn1" in text and est.model_version in text and "bottleneck" in text
    assert est.target == "trn1" and not est.target_defaulted


def test_default_target_warns():
    with pytest.warns(UserWarning, match="no target given"):
        est = estimate(nki.jit(scale_tiles))(np.zeros((128, 64), np.float32))
    assert est.target_defaulted


def test_by_line_sums_to_the_latency_and_names_lines():
    est = estimate(nki.jit(scale_tiles), target="trn2")(np.zeros((512, 1024), np.float32))
    rows = est.by_line()
    assert sum(r.critical_ns for r in rows) == pytest.approx(est.latency_ns)
    assert all(r.location.startswith("test_schedule.py:") for r in rows)
    assert rows[0].critical_ns >= rows[-1].critical_ns


def halves(x):
    """Each of the launch's cores scales its share of the rows."""
    me, half = nl.program_id(0), x.shape[0] // nl.num_programs(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(half // 128):
        r0 = me * half + t * 128
        a = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[r0:r0 + 128, :])
        nisa.tensor_scalar(dst=a, data=a, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out[r0:r0 + 128, :], src=a)
    return out


def test_lnc2_latency_is_the_slowest_core():
    x = np.zeros((2048, 2048), np.float32)
    k = nki.jit(halves)
    one = estimate(k, target="trn2")(x)
    two = estimate(k[2], target="trn2")(x)
    assert len(two.cores) == 2
    assert two.latency_ns == max(c.latency_ns for c in two.cores)
    assert two.latency_ns < one.latency_ns          # each core does half the work


def test_runtime_loop_over_data_is_a_clear_error():
    from test_control import scale_first_tiles
    x = np.zeros((4 * 128, 64), np.float32)
    with pytest.raises(NkiUnsupportedError, match=r"nki_cost_data_dependent(.|\n)*"
                       r"trip_counts=(.|\n)*test_control.py:\d+"):
        estimate(nki.jit(scale_first_tiles), target="trn2")(x, np.array([[1]], np.int32))


def test_runtime_loop_with_a_run_record():
    from test_control import scale_first_tiles
    x, n = np.zeros((4 * 128, 64), np.float32), np.array([[1]], np.int32)
    k = nki.jit(scale_first_tiles)
    with pytest.raises(NkiUnsupportedError) as info:
        estimate(k, target="trn2")(x, n)
    line = info.value.loc.short                       # the fori_loop's file:line
    runs = [estimate(k, target="trn2", trip_counts={line: c})(x, n) for c in (0, 1, 3)]
    body = runs[1].cores[0].instructions - runs[0].cores[0].instructions
    assert body == 3                                  # load, scale, store per iteration
    assert runs[2].cores[0].instructions == runs[0].cores[0].instructions + 3 * body
    assert runs[0].latency_ns < runs[1].latency_ns < runs[2].latency_ns
    per_execution = estimate(k, target="trn2", trip_counts={line: [3]})(x, n)
    assert per_execution.latency_ns == runs[2].latency_ns
    with pytest.raises(NkiUnsupportedError, match="run record gives 0 trip count"):
        estimate(k, target="trn2", trip_counts={line: []})(x, n)


def test_spills_cost_their_store_and_reload_dmas():
    from test_spill import F, rotate_pairs
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, F)).astype(np.float32)
    cs = rng.standard_normal((32, F)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NkiSpillWarning)
        est = estimate(nki.jit(rotate_pairs, cache=False), target="trn2")(x, cs, cs)
    plan = dict(est.preps[0].program.meta)["spills"]
    spill_bytes = sum(st.cost.bytes for st in est.preps[0].instrs
                      if st.cost.note.startswith("spill"))
    moved = sum(est.preps[0].instrs[s].cost.bytes for s in est.timelines[0].sidx
                if est.preps[0].instrs[s].cost.note.startswith("spill"))
    assert plan.dma_bytes > 0 and moved == plan.dma_bytes and spill_bytes == plan.dma_bytes
    io = (x.nbytes + 2 * cs.nbytes) + x.nbytes
    assert est.hbm_bytes == io + plan.dma_bytes


def barrier_after_uneven_work(x):
    """Core 0 scales its half 8 times, core 1 once; then both meet at a barrier and store."""
    me, half = nl.program_id(0), x.shape[0] // 2
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x[me * half:(me + 1) * half, :])
    for _ in range(8 if me == 0 else 1):
        nisa.tensor_scalar(dst=a, data=a, op0=nl.multiply, operand0=2.0)
    nki.lnc.core_barrier(data=a, cores=(0, 1))
    nisa.dma_copy(dst=out[me * half:(me + 1) * half, :], src=a)
    return out


def test_lnc_barrier_waits_for_the_slower_core():
    x = np.ones((256, 2048), np.float32)
    est = estimate(nki.jit(barrier_after_uneven_work)[2], target="trn2")(x)
    ends = []
    for core in (0, 1):
        prep, tl = est.preps[core], est.timelines[core]
        ends.append([e for s, e in zip(tl.sidx, tl.end)
                     if prep.instrs[s].instr.opcode is Opcode.CORE_BARRIER][0])
    assert ends[0] == ends[1]                       # the barrier ends together on both cores
    # core 1 did less work but its store still comes after the barrier
    assert est.cores[1].latency_ns > ends[1]
    with pytest.raises(ValueError, match="sync points"):
        estimate(nki.jit(barrier_after_uneven_work)[2], target="trn2", backend="numba")(x)


def test_a_ready_packet_runs_in_the_gaps_of_its_engine_piece_by_piece():
    # round-robin queues (trn2 arch guide): a packet shares its engine with the ones in
    # flight instead of waiting whole for a gap as long as itself
    from nki.cost.schedule import DmaEngines
    dma = DmaEngines(1)
    dma.place(0.0, 100.0, 1, 0)                  # busy 0-100
    dma.busy[0].append((150.0, 300.0, 1))        # and 150-300
    start, end, queues, blocker = dma.place(0.0, 100.0, 1, 2)
    assert (start, end, queues, blocker) == (100.0, 350.0, (0,), 1)   # 50 in the gap + 50
    assert [iv for iv in dma.busy[0] if iv[2] == 2] == [(100.0, 150.0, 2), (300.0, 350.0, 2)]


def test_a_dma_completes_no_sooner_than_its_latency_after_it_is_ready():
    # the DMA overview's figure: a small transfer takes the constant latency, not its bytes
    from test_instr_cost import _dma_kernel  # one load, one store
    est = estimate(nki.jit(_dma_kernel), target="trn2")(np.zeros((128, 64), np.float32))
    (_, s0, e0), (_, s1, e1) = _ops(est)
    assert (s0, e0) == (0.0, 850.0) and s1 == e0 and e1 == 1700.0
