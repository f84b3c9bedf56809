"""Imports every emitter family so they register (the one list of families)."""

from nki.sim.emit import (  # noqa: F401
    activation,
    collectives,
    control,
    dma,
    indirect,
    matmul,
    misc,
    mx,
    reduce,
    rng,
    select,
    vector,
)
