"""What one instruction costs on its engine, from the documented per-instruction formulas.

Compute engines stream along the free dimension: an instruction costs about ``N`` cycles of
its engine (``N`` = elements per partition), never less than ``MIN_II``; the formulas per
opcode are the cost column of AWS's old ISA docs (nki-spec.md §4) with the generation's perf
modes (§5.2). DMAs are split into packets over the core's 16 queues (§5.2, §10.3). Everything
here depends only on the instruction's static shape, so it is computed once per IR
instruction, not once per execution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nki.cost.facts import CostFacts
from nki.ir.nodes import Instr, Placed, Program
from nki.ir.ops import Act, Alu, Engine, Opcode
from nki.ir.types import Memory

COMPUTE_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
DMA = "dma"

# opcodes that move data through the DMA queues
_DMA_OPS = {Opcode.DMA_COPY, Opcode.DMA_TRANSPOSE, Opcode.DMA_INDIRECT, Opcode.DMA_COMPUTE,
            Opcode.TENSOR_GATHER, Opcode.SENDRECV, Opcode.COLLECTIVE, Opcode.COLLECTIVE_V,
            Opcode.PERMUTE_IMPLICIT}
_GPSIMD_OPS = {Opcode.IOTA, Opcode.AFFINE_SELECT, Opcode.TENSOR_PARTITION_REDUCE,
               Opcode.LOCAL_GATHER, Opcode.NC_N_GATHER, Opcode.SEQUENCE_BOUNDS,
               Opcode.NONZERO_WITH_COUNT, Opcode.TOPK}
_SCALAR_OPS = {Opcode.ACTIVATION, Opcode.ACTIVATE2}
_TENSOR_OPS = {Opcode.NC_MATMUL, Opcode.NC_MATMUL_MX}
_SYNC_OPS = {Opcode.REGISTER_MOVE, Opcode.REGISTER_LOAD, Opcode.REGISTER_STORE,
             Opcode.CORE_BARRIER}
# the simulator's own bookkeeping: no machine instruction
FREE_OPS = {Opcode.FILL_UNINIT, Opcode.DEVICE_PRINT}
_ENGINE_NAMES = {Engine.tensor: "tensor", Engine.vector: "vector", Engine.scalar: "scalar",
                 Engine.gpsimd: "gpsimd", Engine.dma: DMA, Engine.sync: "sync"}


@dataclass(frozen=True)
class InstrCost:
    """The static cost of one IR instruction.

    ``ns`` is the engine time of one execution (for a DMA, how long its slowest packet
    occupies its DMA engine); a matmul's LoadStationary part ``ls_ns`` can hide behind the
    previous matmul (the scheduler decides). ``packets`` is how many DMA queues it spreads
    over. A DMA completes no sooner than ``floor_ns`` after it is ready (its latency, which
    overlaps its streaming) and ``fixed_ns`` after its last packet. Bytes are per
    execution."""

    engine: str
    ns: float
    fixed_ns: float = 0.0
    floor_ns: float = 0.0
    ls_ns: float = 0.0
    packets: int = 0
    flops: float = 0.0
    hbm_read: int = 0
    hbm_write: int = 0
    bytes: int = 0
    perf_mode: str = ""
    note: str = ""
    ports: tuple[str, ...] = ()


def _free_elems(op: Placed) -> int:
    """Elements per partition (on chip) or all elements (HBM)."""
    dims = op.dims[1:] if op.space.on_chip else op.dims
    return math.prod(c for _, c in dims) if dims else 1


def _elems(op: Placed) -> int:
    return math.prod(c for _, c in op.dims) if op.dims else 1


def _minor_stride_bytes(op: Placed) -> int:
    """Bytes between neighbouring elements of the innermost dim that has more than one."""
    dims = op.dims[1:] if op.space.on_chip else op.dims
    for stride, count in reversed(dims):
        if count > 1:
            return abs(stride) * op.dtype.itemsize
    return op.dtype.itemsize


def _run_bytes(op: Placed) -> int:
    """Contiguous bytes of one descriptor: the innermost dims that are dense together (never
    across partitions on chip)."""
    dims = op.dims[1:] if op.space.on_chip else op.dims
    run = 1
    for stride, count in reversed(dims):
        if count == 1:
            continue
        if stride != run:
            break
        run *= count
    return run * op.dtype.itemsize


def _operands(instr: Instr) -> list[Placed]:
    return [a for _, a, _ in instr.accesses() if isinstance(a, Placed)]


def engine_of(instr: Instr) -> str:
    """The engine the instruction runs on: ``engine=`` when the rule recorded one, else the
    documented default (``engine=unknown`` runs on VectorE, the engine every such form has;
    ``nc_transpose`` picks TensorE when its result is in PSUM, as the 0.4.0 notes say)."""
    op = instr.opcode
    if op in _DMA_OPS:
        return DMA
    if op in FREE_OPS:
        return "none"
    eng = getattr(instr, "engine", None) or instr.attr("engine")
    if isinstance(eng, Engine) and eng in _ENGINE_NAMES:
        return _ENGINE_NAMES[eng]
    if op in _TENSOR_OPS:
        return "tensor"
    if op is Opcode.NC_TRANSPOSE:
        dst = instr.operand("dst")
        return "tensor" if dst is not None and dst.space is Memory.PSUM else "vector"
    if op in _SCALAR_OPS:
        return "scalar"
    if op in _GPSIMD_OPS:
        return "gpsimd"
    if op in _SYNC_OPS:
        return "sync"
    if op is Opcode.TENSOR_TENSOR and instr.attr("int_math") and \
            instr.attr("op") in (Alu.add, Alu.subtract, Alu.multiply, Alu.power):
        return "gpsimd"       # 32-bit int add/sub/mul (and power) only exist on GpSimd
    if op is Opcode.RNG:
        return "gpsimd" if instr.attr("engine") is Engine.gpsimd else "vector"
    return "vector"


def instr_cost(instr: Instr, program: Program, facts: CostFacts) -> InstrCost:
    """The static cost of ``instr`` (placed operands) on ``facts``' target."""
    engine = engine_of(instr)
    if engine == "none":
        return InstrCost("none", 0.0)
    if engine == DMA:
        return _dma_cost(instr, facts)
    if engine == "tensor":
        return _tensor_cost(instr, facts)
    if engine == "sync":
        return _sync_cost(instr, facts)
    cycles, mode = _stream_cycles(instr, engine, facts)
    return InstrCost(engine, cycles / facts[f"{engine}_clock_ghz"], perf_mode=mode,
                     ports=_held_ports(instr, engine, mode, facts))


# NeuronCore-v2's on-chip RAM access restrictions (trn1 arch guide, "Concurrent SBUF/PSUM
# accesses by engines"): VectorE and GpSimdE cannot access SBUF in parallel, VectorE and
# ScalarE cannot access PSUM in parallel. Any other pair, and these engines' accesses to the
# other memory, run at full bandwidth side by side.
_PORT_ENGINES = {Memory.SBUF: ("sbuf", ("vector", "gpsimd")),
                 Memory.PSUM: ("psum", ("vector", "scalar"))}


def ports_of(instr: Instr, engine: str) -> tuple[str, ...]:
    """The shared ports ``instr`` holds on ``engine``: only those of the memories it touches
    (a ScalarE activation from SBUF to SBUF does not hold VectorE's PSUM port)."""
    spaces = {a.space for a in _operands(instr)}
    return tuple(port for mem, (port, engines) in _PORT_ENGINES.items()
                 if mem in spaces and engine in engines)


def _held_ports(instr: Instr, engine: str, mode: str, facts: CostFacts) -> tuple[str, ...]:
    if facts["port_conflicts"]:
        return ports_of(instr, engine)
    # v3+: VectorE's perf mode streams over the bus it shares with GpSimdE (trn2 arch
    # guide, Data Movement Updates 1b), so the two hold one port; outside perf mode
    # VectorE and GpSimdE access SBUF in parallel
    if facts["perf_mode_gpsimd_bus"] and (engine == "gpsimd" or (engine == "vector" and mode)):
        return ("sbuf",)
    return ()


def shares_ports(facts: CostFacts) -> bool:
    """Whether the scheduler has any shared port to model on ``facts``' target."""
    return bool(facts["port_conflicts"] or facts["perf_mode_gpsimd_bus"])


def _sync_cost(instr: Instr, facts: CostFacts) -> InstrCost:
    ns = facts["sync_engine_cycles"] / facts["sync_clock_ghz"]
    if instr.opcode is Opcode.CORE_BARRIER:
        return InstrCost("sync", ns, fixed_ns=facts["barrier_ns"], note="barrier")
    return InstrCost("sync", ns)


def _n(instr: Instr) -> int:
    """Elements per partition the instruction streams: its largest operand's."""
    ops = _operands(instr)
    return max((_free_elems(a) for a in ops if a.space.on_chip), default=1)


def _is16(op: Placed) -> bool:
    return op.dtype.itemsize == 2 and not op.dtype.is_int


def _fast16(facts: CostFacts):
    """The dtype test of tensor_tensor / scalar_tensor_tensor / tensor_reduce's fast paths:
    their isa cost notes name bf16 alone (memset's names bf16 and fp16)."""
    return _isbf16 if facts["bf16_fast_paths"] else _is16


def _isbf16(op: Placed) -> bool:
    return op.dtype == "bfloat16"


def _stream_cycles(instr: Instr, engine: str, facts: CostFacts) -> tuple[float, str]:
    """Cycles of a Vector/Scalar/GpSimd instruction and the perf mode it ran in."""
    n = _n(instr)
    ops = _operands(instr)
    min_ii = facts["min_ii_cycles"]
    strided = any(a.space.on_chip and _minor_stride_bytes(a) > facts["stride_limit_bytes"]
                  for a in ops)
    if engine == "gpsimd":
        cycles = _gpsimd_cycles(instr, n, ops, facts)
    elif engine == "scalar":
        cycles = _scalar_cycles(instr, n, ops, facts)
    else:
        cycles = _vector_cycles(instr, n, ops, facts)
    mode = ""
    if engine == "vector":
        speed = _vector_perf_mode(instr, ops, strided, facts)
        if speed > 1:
            mode = f"{speed}x"
            cycles = cycles / speed
    if strided:
        cycles *= facts["stride_penalty"]
    return max(min_ii, cycles), mode


def _vector_cycles(instr: Instr, n: int, ops: list[Placed], facts: CostFacts) -> float:
    op = instr.opcode
    fast16 = _fast16(facts)
    min_ii = facts["min_ii_cycles"]
    inputs = [a for _, a in instr.reads if isinstance(a, Placed) and a.space.on_chip]
    two_tiles = sum(1 for a in inputs if _free_elems(a) > 1) >= 2
    if op is Opcode.TENSOR_TENSOR:
        one_psum = any(a.space is Memory.PSUM for a in inputs)
        fast = (all(fast16(a) for a in ops) and instr.attr("op") in
                (Alu.add, Alu.multiply, Alu.subtract)
                and all(_minor_stride_bytes(a) <= a.dtype.itemsize for a in ops))
        return n if (one_psum or fast) else 2 * n
    if op is Opcode.SCALAR_TENSOR_TENSOR:
        fast = (all(fast16(a) for a in ops) and n % 2 == 0 and instr.attr("op0") is Alu.subtract
                and instr.attr("op1") is Alu.multiply)
        return n if fast else 2 * n
    if op is Opcode.TENSOR_REDUCE:
        fast = all(fast16(a) for a in ops) and instr.attr("op") in (Alu.add, Alu.maximum)
        return n / 2 if fast else n
    if op is Opcode.TENSOR_SCALAR_REDUCE:
        return max(min_ii, n) + min_ii
    if op is Opcode.TENSOR_TENSOR_SCAN:
        return 2 * n
    if op is Opcode.RECIPROCAL:
        return facts["vector_reciprocal_factor"] * n
    if op is Opcode.MEMSET:
        zero16 = all(_is16(a) for a in ops) and not instr.attr("value")
        return n / 2 if zero16 else n
    if op is Opcode.BN_AGGR:
        return 13 * n / 3
    if op is Opcode.EXPONENTIAL:
        return n / 4          # 4x ScalarE's exp throughput (trn3 arch guide)
    if op is Opcode.QUANTIZE_MX:
        return n / 4          # 4 elements per partition per cycle (trn3 arch guide)
    if op in (Opcode.TENSOR_COPY_PREDICATED, Opcode.SELECT_REDUCE):
        one_psum = any(a.space is Memory.PSUM for a in inputs)
        return n if (one_psum or not two_tiles) else 2 * n
    return n


def _vector_perf_mode(instr: Instr, ops: list[Placed], strided: bool,
                      facts: CostFacts) -> int:
    """VectorE's automatic perf modes on NeuronCore-v3+ (trn2 arch guide, "Vector Engine
    Performance Mode"): every condition is on the input/output tensors, all BF16/FP16."""
    if not facts["vector_perf_mode"]:
        return 1
    tensors = _perf_mode_tensors(instr, ops)
    # condition 1b for every mode: no fp32 side, so no perf mode for an fp32 PSUM evacuation
    if not tensors or not all(_is16(a) for a in tensors):
        return 1
    all_sbuf = all(a.space is Memory.SBUF for a in tensors)
    dense = not strided and all(_minor_stride_bytes(a) <= a.dtype.itemsize for a in tensors)
    if instr.opcode in (Opcode.TENSOR_COPY, Opcode.TENSOR_SCALAR):
        if all_sbuf:
            return 4 if dense else 2          # 1a+1b+1c: 4x; 1a+1b, not 1c: 2x
        return 2 if dense else 1              # 1b+1c with one side in PSUM: 2x
    if instr.opcode is Opcode.TENSOR_TENSOR:
        inputs = [a for _, a in instr.reads if isinstance(a, Placed)]
        return 2 if all(a.space is Memory.SBUF for a in inputs) else 1
    return 1


def _perf_mode_tensors(instr: Instr, ops: list[Placed]) -> list[Placed]:
    """The operands the perf-mode conditions speak of: the guide names the input/output
    tensors, so tensor_scalar's per-partition ``operandN`` ([P, 1], often fp32) is not one."""
    if instr.opcode is not Opcode.TENSOR_SCALAR:
        return ops
    return [a for k, a, _ in instr.accesses()
            if isinstance(a, Placed) and not k.startswith("operand")]


def _scalar_cycles(instr: Instr, n: int, ops: list[Placed], facts: CostFacts) -> float:
    cycles = float(n)
    if instr.opcode in (Opcode.TENSOR_SCALAR, Opcode.TENSOR_COPY) and \
            all(a.dtype.itemsize <= 2 for a in ops):
        cycles /= facts["scalar_16bit_speedup"]
    if instr.operand("reduce_res") is not None:
        cycles = max(facts["min_ii_cycles"], cycles) + facts["act_read_acc_cycles"]
    if instr.opcode is Opcode.ACTIVATION and instr.attr("op") is Act.reciprocal:
        pass                   # max(MIN_II, N) on ScalarE (shared API page)
    return cycles


def _gpsimd_cycles(instr: Instr, n: int, ops: list[Placed], facts: CostFacts) -> float:
    start = facts["gpsimd_start_cycles"]
    if instr.opcode is Opcode.TOPK:
        src = instr.operand("src")
        k = _free_elems(instr.operand("val_dst") or src)
        return 4 * _free_elems(src) + k
    width = max((a.dtype.itemsize for a in ops), default=4)
    lanes = 1
    if facts["gpsimd_narrow_lanes"]:
        lanes = {1: 4, 2: 2}.get(width, 1)   # 16x32 / 32x16 / 64x8 bits per core per cycle
    cycles = start + n / lanes
    if instr.opcode is Opcode.TENSOR_SCALAR and Alu.rsqrt in (instr.attr("op0"),
                                                              instr.attr("op1")):
        cycles = start + facts["gpsimd_rsqrt_factor"] * n
    return cycles


def _tensor_cost(instr: Instr, facts: CostFacts) -> InstrCost:
    clock = facts["tensor_clock_ghz"]
    if instr.opcode is Opcode.NC_TRANSPOSE:
        data = instr.operand("data")
        p, f = data.dims[0][1], _free_elems(data)
        cycles = max(p, min(facts["mm_init_cycles"], f))
        if data.dtype.itemsize == 4:
            cycles *= facts["fp32_transpose_factor"]
        return InstrCost("tensor", cycles / clock, flops=0.0, note="transpose")
    k, m, n = instr.attr("k", 128), instr.attr("m", 128), instr.attr("n", 512)
    split = instr.attr("row_split", 1)
    stat = instr.operand("stationary")
    fp32 = stat is not None and stat.dtype.name == "float32"
    factor = 1.0
    mode = ""
    if fp32:
        factor = facts["fp32_transpose_factor"] if instr.attr("transpose") else \
            facts["fp32_matmul_factor"]
    if split > 1:
        mode = "double_row"
    if instr.opcode is Opcode.NC_MATMUL_MX:
        mode = "mx"
        split = 4             # K = 512 per instruction in the time of bf16 K = 128
    mm = max(n, facts["mm_init_cycles"]) * factor
    ls = m / facts["ls_speedup"] * factor
    flops = 2.0 * k * split * m * n
    return InstrCost("tensor", mm / clock, ls_ns=ls / clock, flops=flops, perf_mode=mode)


def _dma_cost(instr: Instr, facts: CostFacts) -> InstrCost:
    dst, src = instr.operand("dst"), instr.operand("src")
    dst = dst or next((a for _, a in instr.writes if isinstance(a, Placed)), None)
    src = src or next((a for _, a in instr.reads if isinstance(a, Placed)), None)
    if dst is None or src is None:
        return InstrCost(DMA, 0.0, fixed_ns=facts["barrier_ns"], packets=1)
    nbytes = _elems(dst) * dst.dtype.itemsize
    chip = dst if dst.space.on_chip else src if src.space.on_chip else None
    rows = chip.dims[0][1] if chip is not None else (dst.dims[0][1] if dst.dims else 1)
    packets = dma_engines_used(rows, facts)
    run = max(1, min(_run_bytes(dst), _run_bytes(src)))
    eff = 1.0
    if instr.opcode is Opcode.DMA_TRANSPOSE:
        eff = facts["dma_transpose_hbm_eff"] if src.space.is_hbm else \
            facts["dma_transpose_sbuf_eff"]
    moved = nbytes * (2 if instr.opcode is Opcode.DMA_COMPUTE else 1)   # read-modify-write
    hbm = src.space.is_hbm or dst.space.is_hbm
    ns = packet_ns(moved, -(-nbytes // run), packets, eff, hbm, facts)
    floor = facts["dma_latency_ns"]
    dge = getattr(instr, "dge_mode", None) or instr.attr("dge_mode")
    if instr.opcode in (Opcode.DMA_INDIRECT, Opcode.TENSOR_GATHER) or \
            getattr(dge, "name", "") == "swdge":
        floor *= facts["swdge_factor"]
    fixed = 0.0
    if instr.opcode in (Opcode.COLLECTIVE, Opcode.COLLECTIVE_V, Opcode.SENDRECV,
                        Opcode.PERMUTE_IMPLICIT):
        fixed = facts["barrier_ns"]
    return InstrCost(DMA, ns, fixed_ns=fixed, floor_ns=floor, packets=packets,
                     hbm_read=nbytes if src.space.is_hbm else 0,
                     hbm_write=nbytes if dst.space.is_hbm else 0, bytes=nbytes,
                     note=f"{run} B per descriptor")


def dma_engines_used(partitions: int, facts: CostFacts) -> int:
    """How many of the 16 engines move a transfer over ``partitions`` partitions: each engine
    serves 128 / 16 = 8 partition lanes (DMA overview: "A[4, 4096]... a single DMA engine
    active"; "A[128, 128]... all 16 DMA engines")."""
    queues = int(facts["dma_queues"])
    lanes = max(1, 128 // queues)
    return max(1, min(queues, -(-partitions // lanes)))


def _queue_bandwidth(facts: CostFacts, hbm: bool) -> float:
    """Bytes/ns one DMA queue moves: its engine's peak, and for HBM traffic no more than the
    core's share of the device's HBM bandwidth spread over its queues (the HBM cap)."""
    bw = facts["dma_engine_bytes_per_ns"]
    if hbm:
        share = facts["hbm_bytes_per_ns_device"] / facts["neuron_cores_per_device"]
        bw = min(bw, share / facts["dma_queues"])
    return bw


def packet_ns(nbytes: int, descriptors: int, packets: int, eff: float, hbm: bool,
              facts: CostFacts) -> float:
    """How long one of ``packets`` equal packets of an ``nbytes`` transfer made of
    ``descriptors`` contiguous runs occupies its DMA engine: its share of the runs at
    ``dma_desc_ns`` each, plus its bytes at the engine's bandwidth (times ``eff``)."""
    per_packet = -(-descriptors // packets)
    return per_packet * facts["dma_desc_ns"] + \
        nbytes / packets / (_queue_bandwidth(facts, hbm) * eff)


def dma_transfer_ns(nbytes: int, descriptors: int, packets: int, hbm: bool,
                    facts: CostFacts) -> float:
    """An isolated copy on idle engines: max(latency, the slowest packet's occupancy), as
    the DMA overview's throughput figure has it."""
    return max(facts["dma_latency_ns"], packet_ns(nbytes, descriptors, packets, 1.0, hbm,
                                                  facts))


def spill_cost(partitions: int, bytes_per_partition: int, store: bool,
               facts: CostFacts) -> InstrCost:
    """A compiler-inserted spill store (SBUF -> HBM scratch) or reload (HBM -> SBUF)."""
    nbytes = partitions * bytes_per_partition
    packets = dma_engines_used(partitions, facts)
    return InstrCost(DMA, packet_ns(nbytes, partitions, packets, 1.0, True, facts),
                     floor_ns=facts["dma_latency_ns"], packets=packets,
                     hbm_write=nbytes if store else 0, hbm_read=0 if store else nbytes,
                     bytes=nbytes, note="spill store" if store else "spill reload")
