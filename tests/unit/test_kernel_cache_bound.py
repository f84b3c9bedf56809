"""A kernel keeps only its most recent specializations in memory (nki/jit/kernel.py)."""

from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.jit import kernel as kernel_module

TRACES: list[tuple] = []


@nki.jit(cache=False)
def _copy(x):
    TRACES.append(tuple(x.shape))     # runs once per trace, never per call
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out


def _call(shape):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    np.testing.assert_array_equal(_copy(x), x)


def test_specializations_beyond_the_bound_are_dropped_oldest_first():
    kept = kernel_module.SPECIALIZATIONS_KEPT
    shapes = [(1 + i % 4, 1 + i) for i in range(kept + 3)]
    for shape in shapes:
        _call(shape)
    assert len(_copy._cache) == kept and TRACES == shapes
    _call(shapes[-1])           # kept: no new trace
    _call(shapes[3])            # the oldest kept one: no new trace, and now the newest
    assert TRACES == shapes
    _call(shapes[0])            # dropped: traced again, dropping the oldest kept (shapes[4])
    assert TRACES == [*shapes, shapes[0]]
    _call(shapes[3])
    assert TRACES == [*shapes, shapes[0]]
    _call(shapes[4])
    assert TRACES == [*shapes, shapes[0], shapes[4]]
    assert len(_copy._cache) == kept
