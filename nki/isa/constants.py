"""``nki.isa.constants``: the enums, as real kernels import them
(``from nki.isa.constants import oob_mode, dge_mode``)."""

from nki.isa import dge_mode, dma_engine, engine, matmul_perf_mode, nc_version, oob_mode, reduce_cmd

__all__ = ["dge_mode", "dma_engine", "engine", "matmul_perf_mode", "nc_version", "oob_mode",
           "reduce_cmd"]
