"""Helpers for tests/legacy/test_scalar_loop.py in a module that imports only ``nt``: one
function spells ``nt.scalar``, the other uses ``nt`` for an annotation only."""

import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt


def add_n_times_nt(acc, x_tile, count_hbm):
    """``acc += x_tile`` as many times as ``count_hbm`` says, at run time."""
    for _ in range(nt.scalar(nl.load(count_hbm))):
        acc[...] = nl.add(acc, x_tile)
