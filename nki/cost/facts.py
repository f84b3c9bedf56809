"""The cost model's constants, one table per generation, each with the source it comes from.

Documented numbers cite the page of AWS's Neuron documentation they come from (as collected
in the project's nki-spec.md §4, §5 and §10.3). Numbers the documentation does not give are
marked ``assumed=True``: they are our stated assumptions, listed by :data:`SENSITIVITY` with
the range a user should read the estimates against, as are the DMA constants read off a
figure or a profile (``dma_latency_ns``, ``dma_desc_ns``). No constant here was fitted to a
published whole-kernel timing (those are the model's exam, not its input).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from nki.ir.target import get_target

ARCH_V2 = "general/nki/arch/trainium_inferentia2_arch.rst"
ARCH_V3 = "nki/guides/architecture/trainium2_arch.rst"
ARCH_V4 = "nki/guides/architecture/trainium3_arch.rst"
ISA_OLD = "general/nki/api/nki/isa/__init__.py (cost notes)"
PERF_GUIDE = "nki/deep-dives/nki_perf_guide.rst"
DMA_GUIDE = "nki/deep-dives/nki-dma-bandwidth-guide.rst"
DMA_OVERVIEW = "nki/get-started/about/nki-dma-overview.rst"
DGE_PAGE = "nki/deep-dives/nki-dge.rst"
SHARED_API = "nki/api/nki.api.shared.rst"


@dataclass(frozen=True)
class Fact:
    """One constant: its value, where it comes from, and whether the docs give it."""

    value: float
    source: str
    assumed: bool = False


def _f(value: float, source: str) -> Fact:
    return Fact(value, source)


def _assume(value: float, why: str) -> Fact:
    return Fact(value, f"assumed: {why}", True)


def _common() -> dict[str, Fact]:
    """Facts the docs give once for every generation (or that we assume for all)."""
    return {
        "min_ii_cycles": _f(64, f"{ISA_OLD}: MIN_II ~ 64 engine cycles"),
        "dep_overhead_cycles": _f(100, f"{ARCH_V2}: add ~100 cycles static overhead for "
                                       "dependent instructions"),
        "gpsimd_start_cycles": _f(150, f"{ISA_OLD}: iota/affine_select cost 150 + N; "
                                       "GpSimd instruction start ~150 cycles"),
        "act_read_acc_cycles": _f(64, f"{ARCH_V2}: ActReadAccumulator ~ 64 cycles"),
        "mm_init_cycles": _f(64, f"{ARCH_V2}: MM initiation interval max(N_moving, 64)"),
        "ls_speedup": _f(4, f"{PERF_GUIDE}: LoadStationary up to 4x faster than a "
                            "MultiplyMoving of the same F (128/4 = 32 cycles)"),
        "fp32_matmul_factor": _f(4, f"{ARCH_V2}: fp32 matmul ~4x slower"),
        "stride_penalty": _f(2, f"{ARCH_V2}: minor-dim stride > 16 B halves SBUF/PSUM "
                                "bandwidth"),
        "stride_limit_bytes": _f(16, f"{ARCH_V2}: minor-dim stride > 16 B"),
        "vector_reciprocal_factor": _f(8, f"{SHARED_API}: VectorE reciprocal max(MIN_II, 8N)"),
        "gpsimd_rsqrt_factor": _f(4, f"{SHARED_API}: GpSimd rsqrt ~4x slower than ScalarE"),
        "dma_queues": _f(16, f"{DMA_OVERVIEW}: 16 DMA engines per NeuronCore"),
        # One [128, B] transfer takes max(latency, streaming): the DMA overview's figure
        # "DMA Throughput varying Bytes per Partition for p_dim = 128" (read by pixel:
        # 256 B 10.5%, 512 B 20.9%, 1 KiB 42.5%, 2 KiB 81.4%, 4 KiB 96.7% of the 32 KiB
        # point) doubles with B up to 1 KiB, i.e. a constant time per transfer: 842-856 ns
        # at 256 B-1 KiB against the 32 KiB point's 366 B/ns; the hardware-DGE instruction
        # (~600 ns, DGE page) and the cross-engine semaphore-to-start latency (~1300 ns,
        # bandwidth guide) bound it, and are the sensitivity range
        "dma_latency_ns": _f(850, f"{DMA_OVERVIEW}: the bytes-per-partition throughput "
                                  "figure's constant time per transfer below 2 KiB"),
        # a DMA buffer (one contiguous run, >= one per partition) occupies its engine: the
        # perf guide's profile of tiny transfers (fig. 29, no generation named) shows a 4 B transfer
        # lasting 7 ns on its engine; with it the figure's 4 KiB point is 96.7% (read
        # 96.66%) and the overview's Example 1 (4 x 8 KiB on one trn2 engine, 1416 ns)
        # 1453 ns
        "dma_desc_ns": _f(7, f"{PERF_GUIDE}: Opt #9 profile, a 4 B DMA transfer lasts 7 ns"),
        "dma_transpose_hbm_eff": _f(0.9, f"{ARCH_V3}: DMA transpose <= 90% of copy "
                                         "throughput HBM->SBUF"),
        "dma_transpose_sbuf_eff": _f(0.5, f"{ARCH_V3}: DMA transpose <= 50% SBUF->SBUF"),
        "swdge_factor": _assume(2.0, f"{DGE_PAGE} says software DGE is slower than "
                                     "hardware DGE, not by how much"),
        # AWS's compiler colours and rotates the addresses of a tile re-allocated every
        # iteration; how many copies it keeps is not documented
        "rotation_depth": _assume(2, "buffers per tile allocated inside a loop"),
        "barrier_ns": _assume(1000, "cross-core barrier / collective handshake"),
        "launch_ns": _assume(0, "no fixed kernel-launch cost is added"),
        "sync_engine_cycles": _assume(64, "a register / sequencer instruction costs MIN_II"),
    }


def _per_target(name: str) -> dict[str, Fact]:
    t = get_target(name)
    arch = {"trn1": ARCH_V2, "trn2": ARCH_V3, "trn3": ARCH_V4}[t.name]
    per_engine_bw = {"trn1": 17.0, "trn2": 23.0, "trn3": 33.0}[t.name]
    hbm = {"trn1": (820.0, 2), "trn2": (3000.0, 8), "trn3": (4700.0, 8)}[t.name]
    v3 = t.nc_version >= 3
    v4 = t.nc_version >= 4
    return {
        "tensor_clock_ghz": _f(t.tensor_clock_ghz, f"{arch}: TensorE clock"),
        "vector_clock_ghz": _f(t.vector_clock_ghz, f"{arch}: VectorE clock"),
        "scalar_clock_ghz": _f(t.scalar_clock_ghz, f"{arch}: ScalarE clock"),
        "gpsimd_clock_ghz": _f(t.gpsimd_clock_ghz, f"{arch}: GpSimdE clock"),
        "sync_clock_ghz": _assume(t.scalar_clock_ghz, "sequencer at the ScalarE clock"),
        "tensor_peak_tflops_bf16": _f(t.tensor_tflops_bf16, f"{arch}: TensorE peak"),
        # the bandwidth guide's per-engine table; the DMA overview's theoretical 27.2 GB/s
        # (v2/v3) and 38.4 (v4) per engine are peaks no transfer reaches
        "dma_engine_bytes_per_ns": _f(per_engine_bw, f"{DMA_GUIDE}: per-engine bandwidth "
                                                     "table, 17/23/33 B/ns"),
        "hbm_bytes_per_ns_device": _f(hbm[0], f"{arch}: HBM bandwidth per device"),
        "neuron_cores_per_device": _f(hbm[1], f"{arch}: NeuronCores per device"),
        # v3 VectorE perf modes (automatic), every side BF16/FP16 (so never an fp32 PSUM
        # evacuation): copy/tensor_scalar 4x SBUF->SBUF contiguous, 2x SBUF strided or
        # contiguous with one side PSUM (strided PSUM: none); tensor_tensor 2x SBUF inputs
        "vector_perf_mode": _f(1 if v3 else 0, f"{ARCH_V3}: VectorE perf modes (v3+), "
                                               "conditions 1a-1c on the input/output "
                                               "tensors (a tensor_scalar operand is not "
                                               "one)"),
        # perf mode streams over the bus VectorE shares with GpSimdE; the hardware
        # arbitrates, so the two do not stream at once (the trn3 guide is silent: carried over)
        "perf_mode_gpsimd_bus": _f(1 if v3 else 0, f"{ARCH_V3}: Data Movement Updates 1b, "
                                                   "VectorE perf mode uses a memory bus "
                                                   "shared with GpSimdE, arbitrated "
                                                   "(trn3: carried over)"),
        "bf16_fast_paths": _f(1, f"{ISA_OLD}: tensor_tensor / scalar_tensor_tensor / "
                                 "tensor_reduce fast paths name bf16 only (not fp16)"),
        "scalar_16bit_speedup": _f(2 if v4 else 1, f"{ARCH_V4}: ScalarE 2x bf16 "
                                                   "tensor_scalar/tensor_copy (v4)"),
        "gpsimd_narrow_lanes": _f(0 if v4 else 1, f"{ARCH_V2}: GpSimd 16x32-bit / "
                                  "32x16-bit / 64x8-bit per core; v4: 128 elem/cycle all "
                                  f"dtypes ({ARCH_V4})"),
        "fp32_transpose_factor": _f(2 if v3 else 4, f"{ARCH_V3}: transpose mode 2x faster "
                                                    "for fp32"),
        "double_row": _f(1 if v3 else 0, f"{PERF_GUIDE}: double-FP8 takes the time of a "
                                         "bf16 K=128 matmul"),
        "port_conflicts": _f(0 if v3 else 1, f"{ARCH_V2}: Vector/GpSimd share SBUF ports, "
                                             f"Vector/Scalar PSUM ports; lifted on v3 "
                                             f"({ARCH_V3})"),
    }


@dataclass(frozen=True)
class CostFacts:
    """The constants of one target. ``facts[name].value``; ``with_overrides`` for what-ifs
    (the sensitivity table uses it)."""

    target: str
    facts: dict[str, Fact] = field(default_factory=dict)

    def __getitem__(self, name: str) -> float:
        return self.facts[name].value

    def with_overrides(self, **values: float) -> CostFacts:
        facts = dict(self.facts)
        for k, v in values.items():
            if k not in facts:
                raise KeyError(f"no cost constant {k!r}; known: {sorted(facts)}")
            facts[k] = replace(facts[k], value=v)
        return CostFacts(self.target, facts)

    def table(self) -> str:
        """Every constant with its value and source, one per line."""
        width = max(len(k) for k in self.facts)
        return "\n".join(f"{k:<{width}}  {f.value:>10g}  {f.source}"
                         for k, f in sorted(self.facts.items()))


def cost_facts(target: str) -> CostFacts:
    """The constants for ``target`` (any of AWS's names: trn1, inf2, trn2, gen3, ...)."""
    name = get_target(target).name
    return CostFacts(name, {**_common(), **_per_target(name)})


# constants the docs do not give, or give only as a figure or a bound: (name, low, high) the
# estimates should be read against
SENSITIVITY: tuple[tuple[str, float, float], ...] = (
    ("dma_latency_ns", 600, 1300),
    ("dma_desc_ns", 3.5, 10.5),
    ("swdge_factor", 1.0, 3.0),
    ("rotation_depth", 1, 3),
    ("barrier_ns", 500, 1500),
    ("sync_engine_cycles", 32, 96),
)
