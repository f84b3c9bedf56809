"""Kernel arguments: which are tensors, their NKI dtypes, and conversion to/from host arrays.

numpy arrays and torch tensors are tensors (torch is never imported here: a torch tensor is
recognised by its type's module and converted by :mod:`nki.jit.torch_values`). Everything
else is a compile-time constant.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nki.errors import NkiTypeError, fail
from nki.ir.packed import dtype_key
from nki.ir.types import ALL_DTYPES, DType, from_host
from nki.jit.torch_values import is_torch_tensor


@dataclass
class TensorArg:
    """One tensor argument as the simulator sees it."""

    index: int
    array: np.ndarray          # C-contiguous host array (ml_dtypes for bf16/fp8)
    dtype: DType
    original: object           # what the caller passed (to write back / match the kind)
    is_torch: bool


def to_tensor_arg(index: int, name: str, value, loc) -> TensorArg:
    torch_in = is_torch_tensor(value)
    if torch_in:
        from nki.jit.torch_values import to_numpy

        arr = to_numpy(value)
    else:
        arr = value
    dt = from_host(arr.dtype)
    if dt is None:
        accepted = ", ".join(d.name for d in ALL_DTYPES if d.packed == 1)
        raise fail("nki_unsupported_dtype", f"kernel argument {name!r} has dtype {arr.dtype}, "
                   f"which is not an NKI dtype; accepted: {accepted} (convert float64 to "
                   f"float32, int64 to int32)", loc, NkiTypeError)
    return TensorArg(index, np.ascontiguousarray(arr), dt, value, torch_in)


def signature_of(value) -> tuple:
    """A hashable description of an argument for the specialization key."""
    if isinstance(value, np.ndarray):
        return ("tensor", value.shape, dtype_key(value.dtype))
    if is_torch_tensor(value):
        return ("tensor", tuple(int(d) for d in value.shape), str(value.dtype))  # SymInts too
    if isinstance(value, (int, float, str, bool, type(None))):
        return ("const", type(value).__name__, value)
    if isinstance(value, (tuple, list)):
        return ("seq", type(value).__name__, tuple(signature_of(v) for v in value))
    return ("const", type(value).__qualname__, repr(value))


def wrap_output(array: np.ndarray, like=None):
    """An output as the caller's kind: numpy, or a torch tensor on the device of ``like``
    (the first torch tensor argument, None when there is none)."""
    if like is not None:
        from nki.jit.torch_values import from_numpy

        return from_numpy(array, like)
    return array
