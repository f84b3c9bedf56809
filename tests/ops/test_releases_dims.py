"""A whole tensor of more than 5 dims as an operand: its dims fold into the machine's
5-level access patterns (before, the innermost dims were dropped and most elements never
copied, silently). Current dialect, both backends, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


def copy_through_sbuf(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize("shape", [(2, 2, 2, 2, 2, 4), (4, 3, 2, 2, 2, 2), (8, 1, 2, 1, 3, 1, 5)])
def test_whole_tensor_of_many_dims(backend, shape):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    np.testing.assert_array_equal(nki.jit(copy_through_sbuf, backend=backend)(x), x)
