"""Imports every emitter family so they register (the one list of families)."""

from nki.sim.emit import activation, dma, matmul, reduce, select, vector  # noqa: F401
