"""A kernel module that imports ``nt`` for annotations only (tests/legacy/test_scalar_loop.py)."""

import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt


def copy_kernel(x: nt.tensor[128, 8]):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for _ in range(1):
        nl.store(out, value=nl.load(x))
    return out
