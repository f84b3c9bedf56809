"""VectorE's performance modes, hand-computed from the documented formulas.

trn2 arch guide ("Vector Engine Performance Mode"): tensor_copy / tensor_scalar run 4x when
both input and output tensors are (1a) in SBUF, (1b) BF16/FP16, (1c) contiguous in the minor
free dim; 2x with 1a+1b but not 1c, or 1b+1c with one side in PSUM; tensor_tensor 2x with
both inputs in SBUF and every tensor BF16/FP16. The isa cost notes: tensor_tensor add/mul/sub
costs N (else 2N), tensor_reduce add/max N/2 (else N) and scalar_tensor_tensor
subtract->multiply N (else 2N) for bf16 only. "Data Movement Updates" 1b: perf mode uses the
memory bus VectorE shares with GpSimdE, and the hardware arbitrates between them.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.cost import estimate
from nki.cost.facts import cost_facts
from nki.cost.prep import prepare
from nki.ir.ops import Opcode

BF16 = ml_dtypes.bfloat16
GENS = ("trn1", "trn2", "trn3")
VECTOR_GHZ = {"trn1": 1.12, "trn2": 0.96, "trn3": 1.2}
V3 = {"trn1": False, "trn2": True, "trn3": True}
N = 512


def _cost(fn, target, opcode, *args):
    spec = nki.jit(fn, target=target).specialize(*args)
    prep = prepare(spec.cores[0].program, cost_facts(target))
    found = [st.cost for st in prep.instrs if st.instr.opcode is opcode]
    assert found, f"no {opcode.name} in the program"
    return found[0]


def _cycles(cost, target):
    return cost.ns * VECTOR_GHZ[target]


def _psum_copy(a, psum_dtype, stride):
    """A PSUM tile of ``psum_dtype`` (memset there by VectorE) copied to bf16 SBUF."""
    out = nl.ndarray((128, N), dtype=BF16, buffer=nl.shared_hbm)
    p = nl.ndarray((128, N * stride), dtype=psum_dtype, buffer=nl.psum)
    y = nl.ndarray((128, N), dtype=BF16, buffer=nl.sbuf)
    nisa.memset(dst=p, value=0.0)
    nisa.tensor_copy(dst=y, src=p[:, ::stride], engine=nisa.vector_engine)
    nisa.dma_copy(dst=out, src=y)
    return out


@pytest.mark.parametrize("target", GENS)
def test_no_perf_mode_for_a_copy_out_of_fp32_psum(target):
    # 1b fails (fp32 input): N cycles, the NeuronCore-v2 rate, on every generation
    c = _cost(_psum_copy, target, Opcode.TENSOR_COPY, np.zeros((128, N), BF16),
              np.float32, 1)
    assert c.perf_mode == ""
    assert _cycles(c, target) == pytest.approx(N)


@pytest.mark.parametrize("target", GENS)
def test_bf16_psum_copy_is_2x_contiguous_and_1x_strided(target):
    a = np.zeros((128, N), BF16)
    dense = _cost(_psum_copy, target, Opcode.TENSOR_COPY, a, BF16, 1)
    # 1b+1c, one side PSUM: 2x on v3+
    assert _cycles(dense, target) == pytest.approx(N / 2 if V3[target] else N)
    # every 2nd bf16: a 4 B minor stride (no >16 B bandwidth penalty) that breaks 1c, and
    # PSUM breaks 1a: neither 2x case holds
    strided = _cost(_psum_copy, target, Opcode.TENSOR_COPY, a, BF16, 2)
    assert strided.perf_mode == ""
    assert _cycles(strided, target) == pytest.approx(N)


def _ts_fp32_operand(a, s):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    sc = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=sc, src=s)
    nisa.tensor_scalar(dst=y, data=x, op0=nl.multiply, operand0=sc)
    nisa.dma_copy(dst=out, src=y)
    return out


@pytest.mark.parametrize("target", GENS)
def test_tensor_scalar_with_an_fp32_scalar_operand_keeps_4x(target):
    # the conditions are on the input/output tensors (bf16, SBUF, contiguous); the fp32
    # [P, 1] operand is broadcast, not one of them
    c = _cost(_ts_fp32_operand, target, Opcode.TENSOR_SCALAR, np.zeros((128, 4 * N), BF16),
              np.zeros((128, 1), np.float32))
    assert _cycles(c, target) == pytest.approx(4 * N / (4 if V3[target] else 1))


def _tt(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.tensor_tensor(dst=x, data1=x, data2=x, op=nl.add)
    nisa.dma_copy(dst=out, src=x)
    return out


@pytest.mark.parametrize("target", GENS)
@pytest.mark.parametrize("dtype,base", [(BF16, N), (np.float16, 2 * N)])
def test_tensor_tensor_fast_path_is_bf16_only(target, dtype, base):
    # N for bf16 add, 2N for fp16; both 16-bit, so both get the v3 2x perf mode
    c = _cost(_tt, target, Opcode.TENSOR_TENSOR, np.zeros((128, N), dtype))
    assert _cycles(c, target) == pytest.approx(base / (2 if V3[target] else 1))


def _reduce(a):
    out = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    r = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.tensor_reduce(dst=r, op=nl.add, data=x, axis=1)
    nisa.dma_copy(dst=out, src=r)
    return out


@pytest.mark.parametrize("target", GENS)
@pytest.mark.parametrize("dtype,cycles", [(BF16, 2 * N / 2), (np.float16, 2 * N)])
def test_tensor_reduce_fast_path_is_bf16_only(target, dtype, cycles):
    # 2N elements: N/2 rule for bf16 add, N for fp16; no perf mode for reductions
    c = _cost(_reduce, target, Opcode.TENSOR_REDUCE, np.zeros((128, 2 * N), dtype))
    assert _cycles(c, target) == pytest.approx(cycles)


def _stt(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.scalar_tensor_tensor(dst=y, data=x, op0=nl.subtract, operand0=1.0,
                              op1=nl.multiply, operand1=x)
    nisa.dma_copy(dst=out, src=y)
    return out


@pytest.mark.parametrize("target", GENS)
@pytest.mark.parametrize("dtype,cycles", [(BF16, N), (np.float16, 2 * N)])
def test_scalar_tensor_tensor_fast_path_is_bf16_only(target, dtype, cycles):
    c = _cost(_stt, target, Opcode.SCALAR_TENSOR_TENSOR, np.zeros((128, N), dtype))
    assert _cycles(c, target) == pytest.approx(cycles)


def vector_beside_gpsimd(a):
    """One SBUF tile copied twice, by VectorE and by GpSimdE: both ready at once."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    w = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.tensor_copy(dst=y, src=x, engine=nisa.vector_engine)
    nisa.tensor_copy(dst=w, src=x, engine=nisa.gpsimd_engine)
    nisa.dma_copy(dst=out, src=y)
    nisa.dma_copy(dst=out, src=w)
    return out


def _spans(est):
    prep, tl = est.preps[0], est.timelines[0]
    return {prep.instrs[s].cost.engine: (st, en)
            for s, st, en in zip(tl.sidx, tl.start, tl.end)
            if prep.instrs[s].instr.opcode is Opcode.TENSOR_COPY}


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_perf_mode_vector_and_gpsimd_do_not_stream_at_once(target):
    fast = _spans(estimate(nki.jit(vector_beside_gpsimd), target=target)(
        np.zeros((128, N), BF16)))
    (v0, v1), (g0, g1) = fast["vector"], fast["gpsimd"]
    assert g0 >= v1 or v0 >= g1              # the shared bus: one after the other
    # an fp32 copy runs outside perf mode: VectorE and GpSimdE access SBUF in parallel
    slow = _spans(estimate(nki.jit(vector_beside_gpsimd), target=target)(
        np.zeros((128, N), np.float32)))
    (v0, v1), (g0, g1) = slow["vector"], slow["gpsimd"]
    assert g0 < v1 and v0 < g1
