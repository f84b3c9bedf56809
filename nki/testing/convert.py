"""Host-array conversions for tests: anything array-like to numpy, numpy to torch.

torch is optional for nki's core, so it is reached only through ``nki.torch.convert`` (exact
bf16/fp8 conversions through the bit patterns) and only when a torch tensor is actually seen
or asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np


def is_torch(x: Any) -> bool:
    """True for a torch tensor, recognised without importing torch."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def as_numpy(x: Any) -> np.ndarray:
    """A numpy array holding exactly ``x``'s values (torch bf16/fp8 become ml_dtypes)."""
    if is_torch(x):
        from nki.jit.torch_values import to_numpy

        return to_numpy(x)
    return np.asarray(x)


def to_torch(a: np.ndarray):
    """A CPU torch tensor with exactly ``a``'s values; needs torch installed.

    Raises:
        TypeError: the dtype has no torch counterpart (fp8 e4m3 in its IEEE-style Trainium
            variant, for instance).
    """
    try:
        importlib.import_module("torch")   # optional dependency, imported on demand
        from nki.jit.torch_values import from_numpy
    except ImportError as e:        # torch missing
        raise ImportError("nki.testing: as_torch=True needs torch installed") from e
    try:
        return from_numpy(a)
    except TypeError as e:
        raise TypeError(f"nki.testing: torch has no dtype for {a.dtype}") from e


def copy_value(x: Any) -> Any:
    """A private copy of an array or tensor argument (other values are returned as they are),
    so a kernel that writes its inputs sees the same inputs on every backend."""
    if is_torch(x):
        return x.clone()
    if isinstance(x, np.ndarray):
        return x.copy()
    return x
