"""NKI 0.7 specialises a kernel by running it as plain Python (the release notes and the
specialization announcement): generators and class inheritance work, and ``==`` on user
classes follows Python (identity unless the class defines equality, e.g. ``@dataclass``),
which "can behave differently" from the old frontend. Each kernel's branch shows in its
output, checked against numpy in both backends."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


class Plain(nl.NKIObject):
    """No equality of its own: ``==`` is identity under plain-Python specialisation."""

    scale = 1.0


@dataclass
class Data(nl.NKIObject):
    """``@dataclass`` equality: field by field."""

    scale: float = 1.0


class Custom(nl.NKIObject):
    scale = 1.0

    def __eq__(self, other) -> bool:   # user-defined equality: only the rounded scale
        return round(self.scale) == round(other.scale)


def _scaled(x, factor: float):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=factor)
    nisa.dma_copy(dst=out, src=t)
    return out


def _by_equality(x, cls):
    a, b = cls(scale=2.0), cls(scale=2.2)
    same = cls(scale=2.0) == cls(scale=2.0)
    return _scaled(x, (10.0 if same else 1.0) + (100.0 if a == b else 0.0))


def test_equality_on_user_classes(backend):
    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    kernel = nki.jit(_by_equality, backend=backend, cache=False)
    # expected branches from Python's own semantics of each class
    for cls, same, close in ((Plain, False, False), (Data, True, False), (Custom, True, True)):
        factor = (10.0 if same else 1.0) + (100.0 if close else 0.0)
        np.testing.assert_array_equal(kernel(x, cls), x * np.float32(factor))


class Stage(nl.NKIObject):
    """A base class whose subclasses override one step (inheritance with super())."""

    def __init__(self, factor: float):
        self.factor = factor

    def apply(self, t):
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=self.factor)


class ShiftedStage(Stage):
    def __init__(self, factor: float, shift: float):
        super().__init__(factor)
        self.shift = shift

    def apply(self, t):
        super().apply(t)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=self.shift)


def _row_tiles(n_rows: int, step: int):
    """A generator of (start, stop) row ranges, consumed while tracing."""
    start = 0
    while start < n_rows:
        yield start, min(start + step, n_rows)
        start += step


def _pipeline(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    stages = [Stage(2.0), ShiftedStage(3.0, 1.0)]
    for lo, hi in _row_tiles(x.shape[0], 128):
        t = nl.ndarray((hi - lo, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[lo:hi, :])
        for stage in stages:
            stage.apply(t)
        nisa.dma_copy(dst=out[lo:hi, :], src=t)
    return out


def test_generators_and_inheritance(backend):
    x = np.random.default_rng(1).standard_normal((300, 16)).astype(np.float32)
    y = nki.jit(_pipeline, backend=backend, cache=False)(x)
    np.testing.assert_array_equal(y, (x * np.float32(2.0)) * np.float32(3.0) + np.float32(1.0))
