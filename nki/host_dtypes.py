"""Host-side dtypes of NKI's types, and the cast between them (AWS's ``neuron_dtypes``).

nki-library's tests build their inputs and golden outputs with AWS's ``neuron_dtypes``
(``static_cast`` about 75 times, ``sizeinbytes``, ``finfo``, ``is_float_type`` and the MX x4
dtypes). This module is that API under our own name; ``import neuron_dtypes`` gives it too
(installed behind any real ``neuron_dtypes``).

``static_cast(array, dtype)`` converts element by element, as the hardware's converters do:

* to a float type: round to nearest, ties to even (ml_dtypes' casts); a value beyond the
  format's range becomes inf, or NaN in a format without inf (``float8_e4m3fn``). nki-library
  clips before casting where it wants saturation (``np.clip(k, -240, 240)`` for fp8 caches).
* float to integer: round to nearest, ties to even, then saturate to the integer's range;
  NaN becomes 0 (the hardware's fp32-to-int conversion, spec §10).
* integer to integer: saturate to the target's range. To ``bool``: nonzero.
* to an MX x4 type: each value is cast to the element format (fp8 e4m3fn / e5m2, fp4 e2m1fn)
  as above, and groups of four along the last axis pack into one element, element 0 in the
  lowest bits (the last axis shrinks 4x). From an x4 type: the reverse, then a cast to the
  requested type (the last axis grows 4x).

Example:
    >>> import numpy as np
    >>> static_cast(np.array([1.5, 2.5, -7.9]), np.int32)
    array([ 2,  2, -8], dtype=int32)
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from nki.ir import packed as _packed
from nki.ir.types import DType

bfloat16 = ml_dtypes.bfloat16
float8_e4m3 = ml_dtypes.float8_e4m3
float8_e4m3fn = ml_dtypes.float8_e4m3fn
float8_e5m2 = ml_dtypes.float8_e5m2
float8_e8m0fnu = ml_dtypes.float8_e8m0fnu
float4_e2m1fn = ml_dtypes.float4_e2m1fn
float8_e4m3fn_x4 = _packed.float8_e4m3fn_x4
float8_e5m2_x4 = _packed.float8_e5m2_x4
float4_e2m1fn_x4 = _packed.float4_e2m1fn_x4

_ML_FLOATS = {bfloat16, float8_e4m3, float8_e4m3fn, float8_e5m2, float8_e8m0fnu, float4_e2m1fn}

# the element format of each packed type, and how many bits one element takes
_ELEMENT: dict[str, tuple[np.dtype, int]] = {
    "float8_e4m3fn_x4": (np.dtype(float8_e4m3fn), 8),
    "float8_e5m2_x4": (np.dtype(float8_e5m2), 8),
    "float4_e2m1fn_x4": (np.dtype(float4_e2m1fn), 4),
}


def as_dtype(dtype: Any) -> np.dtype:
    """The numpy dtype of any spelling: numpy, ml_dtypes, an NKI dtype (``nl.bfloat16``) or
    a name (``"bfloat16"``)."""
    if isinstance(dtype, DType):
        return dtype.host_dtype()
    if isinstance(dtype, str) and dtype in _packed.BY_NAME:
        return _packed.BY_NAME[dtype]
    return np.dtype(dtype)


def sizeinbytes(dtype: Any) -> int:
    """Bytes per element (4 for the fp8 x4 types, 2 for ``float4_e2m1fn_x4``)."""
    return as_dtype(dtype).itemsize


def is_float_type(dtype: Any) -> bool:
    """Whether the type holds floating-point values (bf16, fp8 and the MX x4 types too)."""
    dt = as_dtype(dtype)
    return dt.kind == "f" or dt.type in _ML_FLOATS or _packed.packed_name(dt) is not None


def finfo(dtype: Any):
    """Machine limits of a float type (``ml_dtypes.finfo``; an x4 type reports its element's)."""
    dt = as_dtype(dtype)
    name = _packed.packed_name(dt)
    return ml_dtypes.finfo(_ELEMENT[name][0] if name else dt)


def static_cast(array: Any, dtype: Any) -> np.ndarray:
    """``array`` converted to ``dtype`` element by element (the rules are in the module's
    docstring).

    Example:
        >>> static_cast(np.array([300.0, -1e9]), np.int8)
        array([ 127, -128], dtype=int8)
    """
    src = np.asarray(array)
    dst = as_dtype(dtype)
    src_packed = _packed.packed_name(src.dtype)
    if src_packed:
        src = _unpack(src, src_packed)
    dst_packed = _packed.packed_name(dst)
    if dst_packed:
        return _pack(_convert(src, _ELEMENT[dst_packed][0]), dst_packed)
    return _convert(src, dst)


def _convert(src: np.ndarray, dst: np.dtype) -> np.ndarray:
    if dst == np.bool_:
        return src != 0
    if dst.kind in "iu":
        return _to_integer(src, dst)
    return src.astype(dst)      # float targets: one rounding, to nearest even


_CHUNK = 1 << 20     # elements converted at a time: the float64/int64 temporaries stay small


def _to_integer(src: np.ndarray, dst: np.dtype) -> np.ndarray:
    """Chunk by chunk, so casting a large array costs its result, not several 8-byte copies
    of it (nki-library casts 10^8-element caches)."""
    out = np.empty(src.shape, dst)
    flat_src, flat_out = src.reshape(-1), out.reshape(-1)
    for lo in range(0, flat_src.size, _CHUNK):
        flat_out[lo:lo + _CHUNK] = _to_integer_chunk(flat_src[lo:lo + _CHUNK], dst)
    return out


def _to_integer_chunk(src: np.ndarray, dst: np.dtype) -> np.ndarray:
    info = np.iinfo(dst)
    if src.dtype.kind in "iub":
        return np.clip(src.astype(np.int64), info.min, info.max).astype(dst)
    wide = np.rint(src.astype(np.float64))          # ties to even
    wide = np.where(np.isnan(wide), 0.0, wide)
    return np.clip(wide, info.min, info.max).astype(dst)


def _pack(elements: np.ndarray, name: str) -> np.ndarray:
    element_dtype, bits = _ELEMENT[name]
    if elements.ndim == 0 or elements.shape[-1] % 4:
        raise ValueError(f"static_cast to {name}: the last axis ({elements.shape}) must be a "
                         "multiple of 4")
    codes = elements.view(np.uint8).astype(np.uint32)
    if bits == 4:
        codes &= 0xF
    groups = codes.reshape(elements.shape[:-1] + (elements.shape[-1] // 4, 4))
    word = np.zeros(groups.shape[:-1], np.uint32)
    for lane in range(4):
        word |= groups[..., lane] << np.uint32(lane * bits)
    storage = np.uint32 if bits == 8 else np.uint16
    return word.astype(storage).view(_packed.BY_NAME[name])


def _unpack(words: np.ndarray, name: str) -> np.ndarray:
    element_dtype, bits = _ELEMENT[name]
    raw = words.view(np.uint32 if bits == 8 else np.uint16).astype(np.uint32)
    lanes = [(raw >> np.uint32(lane * bits)) & np.uint32((1 << bits) - 1) for lane in range(4)]
    codes = np.stack(lanes, axis=-1).astype(np.uint8)
    return codes.reshape(words.shape[:-1] + (words.shape[-1] * 4,)).view(element_dtype)


__all__ = ["bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu",
           "float4_e2m1fn", "float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4",
           "static_cast", "sizeinbytes", "finfo", "is_float_type", "as_dtype"]
