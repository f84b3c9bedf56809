"""Shared setup of the torch-bridge tests: one BLAS/torch thread, and the neuron device.

The device tests use the ``neuron`` fixture, which enables the device and fails loudly (never
skips) when its C++ extension cannot be built: CI has a compiler, so a build failure is a bug.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy/torch load their BLAS
torch = pytest.importorskip("torch")
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def neuron():
    """The ``nki.torch.device`` module (which is ``torch.neuron``), enabled."""
    from nki.torch import device

    device.enable()  # raises BuildError with the compiler's message if the build fails
    return device
