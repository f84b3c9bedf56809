"""A helper module for tests/legacy/test_scalar_loop.py: the runtime loop lives here, in a
module that imports ``scalar``, while the kernel's own module does not (as in AWS's
flash_paged_attn_varlen, whose loops are in flash_attn_impl.py)."""

import neuronxcc.nki.language as nl
from neuronxcc.nki.typing import scalar


def add_n_times(acc, x_tile, count_hbm):
    """``acc += x_tile`` as many times as ``count_hbm`` says, at run time."""
    n = nl.load(count_hbm)
    for _ in range(scalar(n)):
        acc[...] = nl.add(acc, x_tile)
