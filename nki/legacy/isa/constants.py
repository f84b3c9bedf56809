"""Legacy ``nisa.constants`` (``neuronxcc.nki.isa.constants``): ``oob_mode``, ``dge_mode`` and
the other enums, the same objects as the current dialect's."""

from nki.isa.constants import dge_mode, dma_engine, engine, nc_version, oob_mode, reduce_cmd

__all__ = ["dge_mode", "dma_engine", "engine", "nc_version", "oob_mode", "reduce_cmd"]
