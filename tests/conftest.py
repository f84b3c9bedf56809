"""Shared fixtures: every op test runs under both execution backends."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# The numba backend's tests must run the compiled helpers, not the compile-free first tier
# that NKI_TIER=auto picks while a background build is unfinished (tests/unit/test_tiers.py
# sets the tier it tests explicitly).
os.environ.setdefault("NKI_TIER", "compiled")

BACKENDS = ("numba", "python")


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """The execution backend; op tests are parametrised over both."""
    return request.param


@pytest.fixture
def sigint_delivered():
    """SIGINT raises KeyboardInterrupt in this test even when the process inherited it
    ignored (a shell starts background jobs that way, and Python then keeps SIG_IGN): the
    Ctrl-C tests send it to themselves and would otherwise wait for a kernel that never
    hears it."""
    import signal

    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def run_both(kernel_fn, *args, **kwargs):
    """Run a kernel function with both backends; assert bit-identical results; return them."""
    import nki

    outs = [nki.jit(kernel_fn, backend=b)(*args, **kwargs) for b in BACKENDS]
    a, b = (o if isinstance(o, tuple) else (o,) for o in outs)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))
    return outs[0]
