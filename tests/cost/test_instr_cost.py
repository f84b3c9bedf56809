"""Each per-instruction formula against a case computed by hand from the docs' formulas and
the generation's clocks (nki-spec.md §4 cost column, §5, §10.3), per generation.

The cost model reads the IR only; the kernels here are traced, never run, so there is no
backend to parametrise over."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.cost.facts import SENSITIVITY, cost_facts
from nki.cost.prep import prepare
from nki.ir.ops import Opcode

BF16 = ml_dtypes.bfloat16
GENS = ("trn1", "trn2", "trn3")
VECTOR_GHZ = {"trn1": 1.12, "trn2": 0.96, "trn3": 1.2}
SCALAR_GHZ = {"trn1": 1.4, "trn2": 1.2, "trn3": 1.2}
TENSOR_GHZ = {"trn1": 2.8, "trn2": 2.4, "trn3": 2.4}


def costs(fn, target, *args):
    """(opcode, InstrCost) of every instruction of ``fn`` specialized for ``target``."""
    spec = nki.jit(fn, target=target).specialize(*args)
    prep = prepare(spec.cores[0].program, cost_facts(target))
    return [(st.instr.opcode, st.cost) for st in prep.instrs]


def one(fn, target, opcode, *args):
    found = [c for op, c in costs(fn, target, *args) if op is opcode]
    assert found, f"no {opcode.name} in the program"
    return found[0]


def _tt_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=y, src=b)
    nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)
    nisa.dma_copy(dst=out, src=x)
    return out


@pytest.mark.parametrize("target", GENS)
def test_tensor_tensor_fp32_is_two_n(target):
    a = np.zeros((128, 512), np.float32)
    c = one(_tt_kernel, target, Opcode.TENSOR_TENSOR, a, a)
    # two fp32 input tiles in SBUF: max(MIN_II, 2N) cycles, no perf mode for fp32
    assert c.engine == "vector"
    assert c.ns == pytest.approx(2 * 512 / VECTOR_GHZ[target])


@pytest.mark.parametrize("target,cycles", [("trn1", 512), ("trn2", 256), ("trn3", 256)])
def test_tensor_tensor_bf16_add_is_n_and_2x_perf_mode_from_v3(target, cycles):
    a = np.zeros((128, 512), BF16)
    c = one(_tt_kernel, target, Opcode.TENSOR_TENSOR, a, a)
    # all-bf16 add from contiguous SBUF: max(MIN_II, N); v3+ tensor_tensor perf mode 2x
    assert c.ns == pytest.approx(cycles / VECTOR_GHZ[target])


def _copy_kernel(a, stride):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.tensor_copy(dst=y, src=x[:, ::stride])
    nisa.dma_copy(dst=out, src=y)
    return out


@pytest.mark.parametrize("target", GENS)
def test_minor_stride_over_16_bytes_halves_bandwidth(target):
    # fp32 every 8th element: a 32 B minor stride; N = 64 sits at the MIN_II floor, so
    # dense costs max(64, 64) cycles and strided twice that
    a = np.zeros((128, 512), np.float32)
    dense = one(_copy_kernel, target, Opcode.TENSOR_COPY, a[:, :64].copy(), 1)
    strided = one(_copy_kernel, target, Opcode.TENSOR_COPY, a, 8)
    assert dense.ns == pytest.approx(64 / VECTOR_GHZ[target])
    assert strided.ns == pytest.approx(2 * 64 / VECTOR_GHZ[target])


@pytest.mark.parametrize("target,speed", [("trn1", 1), ("trn2", 4), ("trn3", 4)])
def test_bf16_sbuf_copy_perf_mode(target, speed):
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        nisa.tensor_copy(dst=y, src=x)
        nisa.dma_copy(dst=out, src=y)
        return out
    c = one(kernel, target, Opcode.TENSOR_COPY, np.zeros((128, 2048), BF16))
    # 2048 elements per partition; v3 perf mode 4x for bf16 SBUF->SBUF contiguous
    assert c.ns == pytest.approx(2048 / speed / VECTOR_GHZ[target])


def _act_kernel(a, reduce):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    r = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    if reduce:
        nisa.activation(dst=y, op=nl.exp, data=x, reduce_op=nl.add, reduce_res=r,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
    else:
        nisa.activation(dst=y, op=nl.exp, data=x)
    nisa.dma_copy(dst=out, src=y)
    return out


@pytest.mark.parametrize("target", GENS)
def test_activation_is_n_plus_accumulator_readout(target):
    a = np.zeros((128, 512), np.float32)
    plain = one(_act_kernel, target, Opcode.ACTIVATION, a, False)
    reduced = one(_act_kernel, target, Opcode.ACTIVATION, a, True)
    assert plain.engine == "scalar"
    assert plain.ns == pytest.approx(512 / SCALAR_GHZ[target])
    # reading the accumulator out costs ~64 more cycles (ActReadAccumulator)
    assert reduced.ns == pytest.approx((512 + 64) / SCALAR_GHZ[target])


@pytest.mark.parametrize("target", GENS)
def test_iota_is_150_plus_n_on_gpsimd(target):
    def kernel(a):
        out = nl.ndarray((128, 512), dtype=nl.int32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=t, pattern=[[1, 512]], offset=0, channel_multiplier=0)
        nisa.dma_copy(dst=out, src=t)
        return out
    c = one(kernel, target, Opcode.IOTA, np.zeros((1, 1), np.float32))
    assert c.engine == "gpsimd"
    assert c.ns == pytest.approx((150 + 512) / SCALAR_GHZ[target])   # GpSimd clock = ScalarE's


@pytest.mark.parametrize("target", GENS)
def test_vector_reciprocal_is_eight_n(target):
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        nisa.reciprocal(dst=x, data=x)
        nisa.dma_copy(dst=out, src=x)
        return out
    c = one(kernel, target, Opcode.RECIPROCAL, np.ones((128, 100), np.float32))
    assert c.ns == pytest.approx(8 * 100 / VECTOR_GHZ[target])


def _mm_kernel(a, b):
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    p = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    s = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=y, src=b)
    nisa.nc_matmul(dst=p, stationary=x, moving=y)
    nisa.tensor_copy(dst=s, src=p)
    nisa.dma_copy(dst=out, src=s)
    return out


@pytest.mark.parametrize("target", GENS)
@pytest.mark.parametrize("n", [512, 32])
def test_matmul_is_load_stationary_plus_max_n_64(target, n):
    a, b = np.zeros((128, 128), BF16), np.zeros((128, n), BF16)
    c = one(_mm_kernel, target, Opcode.NC_MATMUL, a, b)
    ghz = TENSOR_GHZ[target]
    assert c.ns == pytest.approx(max(n, 64) / ghz)          # MultiplyMoving, II max(N, 64)
    assert c.ls_ns == pytest.approx(128 / 4 / ghz)          # fast LoadStationary, 128/4
    assert c.flops == 2 * 128 * 128 * n


@pytest.mark.parametrize("target", GENS)
def test_fp32_matmul_is_four_times_slower(target):
    a, b = np.zeros((128, 128), np.float32), np.zeros((128, 512), np.float32)
    c = one(_mm_kernel, target, Opcode.NC_MATMUL, a, b)
    assert c.ns == pytest.approx(4 * 512 / TENSOR_GHZ[target])


def _dma_kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=out, src=x)
    return out


@pytest.mark.parametrize("target,queue_bw", [("trn1", 17.0), ("trn2", 23.0), ("trn3", 33.0)])
def test_dma_packets_over_sixteen_queues(target, queue_bw):
    a = np.zeros((128, 2048), BF16)          # 4 KiB contiguous per partition
    c = one(_dma_kernel, target, Opcode.DMA_COPY, a)
    assert c.packets == 16                    # a 128-partition tile spreads over 16 queues
    eff = 4096 / (4096 + 512)                 # descriptor efficiency at 4 KiB per partition
    # each queue: its packet's setup + its share of the bytes at the engine's bandwidth (the
    # core's share of HBM, 410 / 375 / 588 GB/s over 16 queues, caps none of these)
    assert c.ns == pytest.approx(64 + 128 * 4096 / 16 / (queue_bw * eff))
    assert c.fixed_ns == 600
    assert c.hbm_read == 128 * 4096


def test_small_partitions_use_fewer_queues():
    c = one(_dma_kernel, "trn2", Opcode.DMA_COPY, np.zeros((4, 64), np.float32))
    assert c.packets == 4


def test_every_constant_has_a_source_and_assumptions_are_listed():
    for target in GENS:
        facts = cost_facts(target)
        for name, fact in facts.facts.items():
            assert fact.source, name
        listed = {name for name, _, _ in SENSITIVITY}
        assumed = {n for n, f in facts.facts.items() if f.assumed}
        assert listed <= assumed
        assert {"dma_desc_overhead_bytes", "dma_packet_setup_ns", "rotation_depth",
                "swdge_factor"} <= listed


def _dr_kernel(a, b):
    out = nl.ndarray((a.shape[2], b.shape[2]), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    p = nl.ndarray((a.shape[2], b.shape[2]), dtype=nl.float32, buffer=nl.psum)
    s = nl.ndarray((a.shape[2], b.shape[2]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=y, src=b)
    nisa.nc_matmul(dst=p, stationary=x, moving=y, perf_mode=nisa.matmul_perf_mode.double_row)
    nisa.tensor_copy(dst=s, src=p)
    nisa.dma_copy(dst=out, src=s)
    return out


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_fp8_double_row_does_twice_the_contraction_in_a_bf16_matmul_time(target):
    e4 = ml_dtypes.float8_e4m3
    a, b = np.zeros((128, 2, 128), e4), np.zeros((128, 2, 512), e4)
    c = one(_dr_kernel, target, Opcode.NC_MATMUL, a, b)
    assert c.perf_mode == "double_row"
    assert c.ns == pytest.approx(512 / TENSOR_GHZ[target])     # as a bf16 K=128 matmul
    assert c.flops == 2 * 256 * 128 * 512                       # K = 2 x 128


@pytest.mark.parametrize("target", GENS)
def test_tensor_engine_transpose_is_max_p_min_64_f(target):
    def kernel(a):
        out = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        p = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.psum)
        s = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        nisa.nc_transpose(dst=p, data=x)
        nisa.tensor_copy(dst=s, src=p)
        nisa.dma_copy(dst=out, src=s)
        return out
    c = one(kernel, target, Opcode.NC_TRANSPOSE, np.zeros((96, 32), BF16))
    assert c.engine == "tensor"                  # the result is in PSUM
    assert c.ns == pytest.approx(max(96, min(64, 32)) / TENSOR_GHZ[target])


def test_one_queue_moves_32_kib_about_as_the_dma_guide_measured():
    # the DMA bandwidth guide: one engine moved 32 KiB HBM->SBUF in 1416 ns (trn2); the model
    # was not fitted to it (it uses the guide's per-engine table and an assumed setup)
    c = one(_dma_kernel, "trn2", Opcode.DMA_COPY, np.zeros((1, 8192), np.float32))
    assert c.packets == 1
    assert c.ns == pytest.approx(1416, rel=0.10)
