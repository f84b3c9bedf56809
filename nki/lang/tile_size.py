"""``nl.tile_size``: the per-target tile limits, answered for the target being traced."""

from __future__ import annotations

from nki.ir.target import TRN3, Target
from nki.lang.tracer import active


def _target() -> Target:
    trace = active()
    return trace.target if trace is not None else TRN3


class _TileSize:
    """Attributes read the current trace's target (trn3 outside a kernel)."""

    @property
    def pmax(self) -> int:
        return _target().pmax

    @property
    def psum_fmax(self) -> int:
        return _target().psum_fmax

    psum_bank_fmax = psum_fmax

    @property
    def psum_bank_fmax_bytes(self) -> int:
        return _target().psum_bank_bytes

    @property
    def psum_num_banks(self) -> int:
        return _target().psum_banks

    @property
    def gemm_stationary_fmax(self) -> int:
        return _target().stationary_fmax

    @property
    def gemm_moving_fmax(self) -> int:
        return 512

    @property
    def bn_stats_fmax(self) -> int:
        return 512

    @property
    def psum_min_align(self) -> int:
        return 4

    @property
    def sbuf_min_align(self) -> int:
        return 1

    @property
    def total_available_sbuf_size(self) -> int:
        return _target().sbuf_bytes_per_partition

    sbuf_fmax_bytes = total_available_sbuf_size

    @property
    def sbuf_size_bytes(self) -> int:
        t = _target()
        return t.sbuf_bytes_per_partition * t.sbuf_partitions

    def __repr__(self) -> str:
        return f"tile_size(pmax={self.pmax}, psum_fmax={self.psum_fmax})"


tile_size = _TileSize()
