"""Imports every emitter family so they register (the one list of families)."""

from nki.sim.emit import dma, vector  # noqa: F401
