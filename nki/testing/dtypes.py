"""Resolve the many spellings of a dtype to one numpy dtype, and name it briefly.

Tests meet dtypes as numpy dtypes, ml_dtypes scalar types, NKI dtypes (``nl.bfloat16``), torch
dtypes and strings (``"bf16"``). Everything in ``nki.testing`` funnels them through
:func:`resolve_dtype`, so the tolerance table and the factories have one key per type.
torch is never imported here: its dtypes are recognised by their module name.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

# short name used in test ids and reports -> numpy dtype (ml_dtypes for bf16/fp8)
_SHORT: dict[str, np.dtype] = {
    "fp64": np.dtype(np.float64),
    "fp32": np.dtype(np.float32),
    "fp16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "fp8e4m3": np.dtype(ml_dtypes.float8_e4m3),
    "fp8e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "fp8e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "fp8e8m0": np.dtype(ml_dtypes.float8_e8m0fnu),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32),
    "bool": np.dtype(np.bool_),
}
_NAME_OF: dict[np.dtype, str] = {v: k for k, v in _SHORT.items()}

# other accepted spellings (NKI and torch names; numpy names are handled by np.dtype)
_ALIASES: dict[str, str] = {
    "float64": "fp64", "double": "fp64", "float32": "fp32", "float": "fp32",
    "float16": "fp16", "half": "fp16", "bfloat16": "bf16", "tfloat32": "fp32",
    "float8_e4m3": "fp8e4m3", "fp8_e4m3": "fp8e4m3", "float8_e4m3fn": "fp8e4m3fn",
    "fp8_e4m3fn": "fp8e4m3fn", "float8_e5m2": "fp8e5m2", "fp8_e5m2": "fp8e5m2",
    "float8_e8m0fnu": "fp8e8m0", "int8": "i8", "int16": "i16", "int32": "i32",
    "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32", "bool_": "bool",
}


def resolve_dtype(dtype: Any) -> np.dtype:
    """The host numpy dtype for any spelling of a dtype.

    Accepts numpy dtypes and scalar types, ml_dtypes types, NKI dtypes (``nl.bfloat16``),
    torch dtypes (``torch.bfloat16``) and strings (``"bf16"``, ``"bfloat16"``, ``"float32"``).

    Example:
        >>> resolve_dtype("bf16") == np.dtype(ml_dtypes.bfloat16)
        True
    """
    if isinstance(dtype, np.dtype):
        return dtype
    host = getattr(dtype, "host_dtype", None)          # an NKI DType
    if callable(host):
        return host()
    if type(dtype).__module__.startswith("torch"):      # torch.bfloat16 -> "bfloat16"
        dtype = str(dtype).removeprefix("torch.")
    if isinstance(dtype, str):
        key = dtype.strip().lower()
        key = _ALIASES.get(key, key)
        if key in _SHORT:
            return _SHORT[key]
    try:
        return np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"nki.testing: cannot interpret {dtype!r} as a dtype") from e


def dtype_name(dtype: Any) -> str:
    """A short readable name (``"bf16"``, ``"fp32"``, ``"i32"``) for reports and test ids."""
    dt = resolve_dtype(dtype)
    return _NAME_OF.get(dt, dt.name)


def is_float(dtype: Any) -> bool:
    """True for floating-point dtypes, ml_dtypes' bf16/fp8 included."""
    dt = resolve_dtype(dtype)
    # ml_dtypes types report kind "V" (bf16, e4m3) or "f" (e5m2), so ask by name too
    return dt.kind == "f" or _NAME_OF.get(dt, "").startswith(("bf", "fp"))


def finfo(dtype: Any):
    """``numpy.finfo`` that also understands ml_dtypes' bf16/fp8 types."""
    return ml_dtypes.finfo(resolve_dtype(dtype))
