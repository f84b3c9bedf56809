"""What engines share, hand-computed from the docs: NeuronCore-v2's on-chip RAM ports (trn1
arch guide, "Concurrent SBUF/PSUM accesses by engines": VectorE and GpSimdE cannot access
SBUF in parallel, VectorE and ScalarE cannot access PSUM in parallel), the ~100-cycle static
overhead of an instruction that reads the previous one's result (VectorE cost model), and
partition broadcasts costed as the TensorE matmul NKI makes of them."""

from __future__ import annotations

import neuronxcc.nki.isa as lisa
import neuronxcc.nki.language as lnl
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.cost import estimate
from nki.ir.ops import Opcode

VECTOR_GHZ, SCALAR_GHZ = 1.12, 1.4      # trn1


def _timeline(est):
    prep, tl = est.preps[0], est.timelines[0]
    return [(prep.instrs[s].instr.opcode, prep.instrs[s].cost.engine, st, en)
            for s, st, en in zip(tl.sidx, tl.start, tl.end)]


def act_beside_vector(x, psum_act):
    """An activation on ScalarE and an unrelated tensor_scalar on VectorE; the activation
    reads SBUF, or PSUM when ``psum_act`` (VectorE's tensor_scalar then writes PSUM too)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum if psum_act else nl.sbuf)
    c = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    d = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum if psum_act else nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    nisa.tensor_copy(dst=b, src=a, engine=nisa.vector_engine)
    nisa.tensor_scalar(dst=d, data=a, op0=nl.multiply, operand0=2.0)
    nisa.activation(dst=c, op=nl.exp, data=b)
    nisa.dma_copy(dst=out, src=c)
    return out


@pytest.mark.parametrize("psum", [False, True])
def test_trn1_scalar_and_vector_share_only_the_psum_port(psum):
    x = np.zeros((128, 512), np.float32)
    est = estimate(nki.jit(act_beside_vector), target="trn1")(x, psum)
    ops = _timeline(est)
    (_, _, v0, v1), = [o for o in ops if o[0] is Opcode.TENSOR_SCALAR]
    (_, _, a0, a1), = [o for o in ops if o[0] is Opcode.ACTIVATION]
    assert v1 - v0 == pytest.approx(512 / VECTOR_GHZ)
    assert a1 - a0 == pytest.approx(512 / SCALAR_GHZ)
    if psum:    # both touch PSUM: the activation waits for VectorE's port
        assert a0 >= v1
    else:       # SBUF only on ScalarE: it runs beside VectorE's tensor_scalar
        assert a0 < v1
    # trn2 lifts the restriction either way
    est2 = estimate(nki.jit(act_beside_vector), target="trn2")(x, psum)
    ops2 = _timeline(est2)
    (_, _, v0, v1), = [o for o in ops2 if o[0] is Opcode.TENSOR_SCALAR]
    (_, _, a0, _), = [o for o in ops2 if o[0] is Opcode.ACTIVATION]
    assert a0 < v1


def chain(x, dependent):
    """Two VectorE instructions back to back: the second reads the first's result, or not."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    c = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    nisa.tensor_scalar(dst=b, data=a, op0=nl.multiply, operand0=2.0)
    nisa.tensor_scalar(dst=c, data=b if dependent else a, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=out, src=c)
    return out


@pytest.mark.parametrize("dependent", [False, True])
def test_reading_the_previous_result_adds_the_static_overhead(dependent):
    x = np.zeros((128, 512), np.float32)
    est = estimate(nki.jit(chain), target="trn1")(x, dependent)
    first, second = [o for o in _timeline(est) if o[0] is Opcode.TENSOR_SCALAR]
    gap = second[2] - first[3]
    # "add a static instruction overhead of 100 engine cycles" for an instruction depending
    # on the output tile of the previous one (trn1 arch guide, VectorE cost model)
    assert gap == pytest.approx(100 / VECTOR_GHZ if dependent else 0.0)


def mamba_step(delta, row):
    """One mamba_v1 step: a [128, F] tile times a partition-broadcast [1, F] row (legacy)."""
    out = lnl.ndarray(delta.shape, dtype=delta.dtype, buffer=lnl.shared_hbm)
    d = lnl.load(delta)
    r = lnl.load(row[0:1, 0:delta.shape[1]])
    y = lisa.tensor_tensor(d, r.broadcast_to(delta.shape), op=lnl.multiply)
    lnl.store(out, value=y)
    return out


def test_partition_broadcast_costs_a_matmul_and_a_psum_read():
    x = np.zeros((128, 512), np.float32)
    ops = _timeline(estimate(nki.jit(mamba_step), target="trn1")(x, x[:1]))
    engines = {op: eng for op, eng, _, _ in ops}
    assert engines[Opcode.NC_MATMUL] == "tensor"
    assert Opcode.NC_STREAM_SHUFFLE not in engines
    (_, _, t0, t1), = [o for o in ops if o[0] is Opcode.TENSOR_TENSOR]
    # one input in PSUM: max(MIN_II, N) cycles, not 2N (ISA cost column)
    assert t1 - t0 == pytest.approx(512 / VECTOR_GHZ)
    (_, _, m0, m1), = [o for o in ops if o[0] is Opcode.NC_MATMUL]
    # fp32 ones-matmul: 4 x (max(N, 64) + M/4) TensorE cycles at 2.8 GHz, before the multiply
    assert m1 - m0 == pytest.approx(4 * (512 + 128 / 4) / 2.8)
    assert t0 >= m1
