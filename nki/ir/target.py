"""Per-generation NeuronCore facts (spec §1.3, §5): the numbers rules check and the simulator
sizes its memories by. Frozen, one instance per target; never mutated."""

from __future__ import annotations

from dataclasses import dataclass

from nki.ir.types import Memory

# the simulator's arenas start each partition on a cache line, and an odd number of cache
# lines after the previous one: 128 partition rows then fall into different cache sets
# (a power-of-two pitch such as PSUM's 16 KiB maps every row of a tile onto the same L1 set,
# and BLAS then runs ~7% slower on the 128-row operands every matmul reads and writes)
CACHE_LINE = 64


@dataclass(frozen=True)
class Target:
    """One NeuronCore generation.

    Attributes:
        name: ``trn1``, ``trn2`` or ``trn3``.
        nc_version: 2, 3 or 4 (``nisa.nc_version`` gen2/gen3/gen4).
        sbuf_partitions: partitions of SBUF and PSUM.
        sbuf_bytes_per_partition: usable SBUF bytes in each partition.
        psum_banks: PSUM banks per partition.
        psum_bank_bytes: bytes of one PSUM bank per partition.
        moving_fmax_fp32 / moving_fmax_16bit: nc_matmul moving free-size limit.
        stationary_fmax: nc_matmul stationary free-size limit.
        tensor_clock_ghz, vector_clock_ghz, scalar_clock_ghz, gpsimd_clock_ghz: engine clocks.
        vector_elems_per_cycle: VectorE elements per cycle for 32-bit / 16-bit data.
        dma_bytes_per_ns: DMA bandwidth per NeuronCore.
        tensor_tflops_bf16 / tensor_tflops_fp32: TensorE peak.
    """

    name: str
    nc_version: int
    sbuf_partitions: int
    sbuf_bytes_per_partition: int
    psum_banks: int
    psum_bank_bytes: int
    moving_fmax_fp32: int
    moving_fmax_16bit: int
    stationary_fmax: int
    tensor_clock_ghz: float
    vector_clock_ghz: float
    scalar_clock_ghz: float
    gpsimd_clock_ghz: float
    vector_elems_per_cycle: tuple[int, int]
    dma_bytes_per_ns: float
    tensor_tflops_bf16: float
    tensor_tflops_fp32: float

    @property
    def pmax(self) -> int:
        return self.sbuf_partitions

    @property
    def psum_bytes_per_partition(self) -> int:
        return self.psum_banks * self.psum_bank_bytes

    def arena_pitch(self, memory: Memory) -> int:
        """Bytes from one partition to the next in the simulator's SBUF or PSUM arena.

        At least the partition's usable bytes; rounded up to whole cache lines, and to an odd
        number of them, so rows do not alias in the caches. Only the simulator's layout:
        capacity rules use ``sbuf_bytes_per_partition`` / ``psum_bytes_per_partition``."""
        size = (self.sbuf_bytes_per_partition if memory is Memory.SBUF
                else self.psum_bytes_per_partition)
        lines = -(-size // CACHE_LINE)
        return (lines + 1 - lines % 2) * CACHE_LINE

    @property
    def psum_fmax(self) -> int:
        """fp32 elements in one PSUM bank per partition (``nl.tile_size.psum_fmax``)."""
        return self.psum_bank_bytes // 4


TRN1 = Target("trn1", 2, 128, 180224, 8, 2048, 512, 512, 128,
              2.8, 1.12, 1.4, 1.4, (128, 128), 272.0, 92.0, 23.0)
TRN2 = Target("trn2", 3, 128, 212984, 8, 2048, 512, 512, 128,
              2.4, 0.96, 1.2, 1.2, (256, 512), 368.0, 79.0, 20.0)
TRN3 = Target("trn3", 4, 128, 245752, 8, 2048, 4096, 8192, 128,
              2.4, 1.2, 1.2, 1.2, (256, 512), 528.0, 79.0, 20.0)

TARGETS: dict[str, Target] = {"trn1": TRN1, "trn2": TRN2, "trn3": TRN3}
# AWS's accepted spellings of NEURON_PLATFORM_TARGET_OVERRIDE / platform_target.
ALIASES: dict[str, str] = {"trn1": "trn1", "inf2": "trn1", "gen2": "trn1", "trn2": "trn2",
                           "gen3": "trn2", "trn3": "trn3", "gen4": "trn3"}


def get_target(name: str) -> Target:
    """Look a target up by any of AWS's names; raises ValueError naming the valid ones."""
    key = ALIASES.get(str(name).lower())
    if key is None:
        raise ValueError(f"unknown target {name!r}; expected one of {sorted(ALIASES)}")
    return TARGETS[key]
