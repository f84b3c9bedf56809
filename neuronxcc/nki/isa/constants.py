"""``neuronxcc.nki.isa.constants``: ``oob_mode``, ``dge_mode`` and the other enums."""

from nki.isa.constants import dge_mode, dma_engine, engine, nc_version, oob_mode, reduce_cmd

__all__ = ["dge_mode", "dma_engine", "engine", "nc_version", "oob_mode", "reduce_cmd"]
