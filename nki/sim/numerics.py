"""Exact conversions between float32 and the simulator's storage formats.

Low-precision floats live in simulated memory as raw bit patterns (see ``nki.ir.types``):
bf16/fp16 as ``uint16``, the fp8 formats as ``uint8``, tfloat32 as ``float32``. These helpers
decode such bits to float32 and encode float32 back, bit for bit like ml_dtypes (fp8, bf16) and
numpy (fp16), including overflow, NaN, subnormal and signed-zero behaviour.

Every public function is ``@njit(cache=True, nogil=True)``; the identical plain-Python code is
``fn.py_func`` and gives the same bits (the tests check both). The code is written as scalar
loops over the flattened input so that, compiled, each conversion is one vectorisable pass; the
plain-Python path is a slow reference, not meant for big arrays. Inputs may have any rank >= 1
(non-contiguous inputs are copied by ``ravel``); outputs have the input's shape.

Compiled speed, 4M elements on this machine: f32_to_bf16 1.3 ms, bf16_to_f32 0.9 ms,
f32_to_f16 3.9 ms, f16_to_f32 1.7 ms, f32_to_fp8 3.8 ms, fp8_to_f32 1.1 ms, f32_to_tf32 1.4 ms,
f32_to_int 14 ms (not vectorised yet).

Integer bit manipulation is done in int64 everywhere: Numba types integer literals as int64
and would promote narrower operands anyway, and int64 keeps both modes identical with no
overflow to think about.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from numba import njit
from numba.extending import register_jitable

from nki.ir.types import FLOAT8_E4M3, FLOAT8_E4M3FN, FLOAT8_E5M2, FLOAT8_E8M0FNU

__all__ = [
    "FP8_DECODE",
    "bf16_to_f32",
    "f32_to_bf16",
    "f16_to_f32",
    "f32_to_f16",
    "fp8_to_f32",
    "f32_to_fp8",
    "f32_to_tf32",
    "f32_to_int",
]

_E4M3 = FLOAT8_E4M3.code
_E5M2 = FLOAT8_E5M2.code
_E4M3FN = FLOAT8_E4M3FN.code
_E8M0 = FLOAT8_E8M0FNU.code


def _fp8_decode_table() -> np.ndarray:
    """Row ``code`` holds the float32 value of each of the 256 bit patterns of that fp8 type.

    Decoding is a table lookup: ml_dtypes is the reference, so reading its answer is the
    surest way to agree with it (NaN payloads included).
    """
    table = np.zeros((max(_E4M3, _E5M2, _E4M3FN, _E8M0) + 1, 256), np.float32)
    codes = np.arange(256, dtype=np.uint8)
    for code, name in ((_E4M3, "float8_e4m3"), (_E5M2, "float8_e5m2"),
                       (_E4M3FN, "float8_e4m3fn"), (_E8M0, "float8_e8m0fnu")):
        table[code] = codes.view(getattr(ml_dtypes, name)).astype(np.float32)
    return table


#: float32 value of each fp8 byte, row = the fp8 type code (ml_dtypes' answers)
FP8_DECODE = _fp8_decode_table()
_TWO_M24 = np.float32(2.0**-24)


@register_jitable
def _rne_shift(v: int, sh: int) -> int:
    """``v >> sh`` rounded to nearest, ties to even (``v >= 0``, ``1 <= sh <= 62``)."""
    q = v >> sh
    rem = v - (q << sh)
    half = np.int64(1) << (sh - 1)
    if rem > half or (rem == half and (q & 1) == 1):
        q += 1
    return q


@register_jitable
def _encode_magnitude(a: int, mbits: int, bias: int) -> int:
    """Round a finite float32 magnitude (its bits ``a``) to a small float's magnitude code.

    The code may exceed the format's largest finite value; the caller decides what overflow
    becomes. Subnormal results come out exact (and 0 when below half the smallest one).
    """
    e = a >> 23
    min_normal_e = 128 - bias  # float32 biased exponent of the target's smallest normal
    if e >= min_normal_e:
        # Rebias the exponent in place; a mantissa carry then bumps the exponent correctly.
        return _rne_shift(a - ((127 - bias) << 23), 23 - mbits)
    mant = (a & 0x7FFFFF) | 0x800000
    if e == 0:
        mant = a & 0x7FFFFF  # float32 subnormal: no implicit bit, exponent as if 1
        e = 1
    sh = 23 - mbits + min_normal_e - e
    if sh > 40:
        return 0
    return _rne_shift(mant, sh)


@njit(cache=True, nogil=True)
def bf16_to_f32(u16: np.ndarray) -> np.ndarray:
    """Decode bfloat16 bit patterns (uint16) to float32; exact, NaN payloads kept."""
    flat = u16.ravel()
    out = np.empty(flat.size, np.float32)
    bf16_to_f32_into(flat, out)
    return out.reshape(u16.shape)


@njit(cache=True, nogil=True, inline="always")
def bf16_to_f32_into(u16: np.ndarray, out: np.ndarray) -> None:
    """:func:`bf16_to_f32` of a 1-D row into the float32 row ``out`` of its size."""
    bits = out.view(np.uint32)
    for i in range(u16.size):
        bits[i] = np.int64(u16[i]) << 16


@njit(cache=True, nogil=True)
def f32_to_bf16(f32: np.ndarray) -> np.ndarray:
    """Encode float32 to bfloat16 bits (uint16) like ml_dtypes.

    Round to nearest even; overflow becomes inf; any NaN becomes the quiet NaN 0x7FC0 with the
    input's sign (ml_dtypes drops NaN payloads).
    """
    flat = np.ascontiguousarray(f32).ravel()
    out = np.empty(flat.size, np.uint16)
    f32_to_bf16_into(flat, out)
    return out.reshape(f32.shape)


@njit(cache=True, nogil=True, inline="always")
def f32_to_bf16_into(f32: np.ndarray, out: np.ndarray) -> None:
    """:func:`f32_to_bf16` of a 1-D float32 row into the uint16 row ``out`` of its size.

    Branch-free in 32-bit lanes: round to nearest even is ``(b + 0x7FFF + lsb) >> 16`` (no
    finite or infinite pattern carries out of 32 bits), a NaN selects the quiet NaN. Every
    intermediate is cast back to uint32 because numba widens integer arithmetic to 64 bits,
    which halves the vector lanes (2.3x slower: 870 vs 380 ns per 1024 elements, AVX2)."""
    bits = f32.view(np.uint32)
    for i in range(bits.size):
        b = bits[i]
        hi = np.uint32(b >> np.uint32(16))
        rne = np.uint32(np.uint32(b + np.uint32(0x7FFF)) + np.uint32(hi & np.uint32(1)))
        quiet = np.uint32(hi & np.uint32(0x8000)) | np.uint32(0x7FC0)
        v = f32[i]
        out[i] = np.uint16(quiet if v != v else np.uint32(rne >> np.uint32(16)))


@njit(cache=True, nogil=True)
def f16_to_f32(u16: np.ndarray) -> np.ndarray:
    """Decode IEEE half bit patterns (uint16) to float32 exactly, like numpy.

    NaN payloads are shifted into place unchanged (a signalling NaN stays signalling).
    """
    flat = u16.ravel()
    out = np.empty(flat.size, np.uint32)
    for i in range(flat.size):
        h = np.int64(flat[i])
        sign = (h & 0x8000) << 16
        e = (h >> 10) & 0x1F
        m = h & 0x3FF
        if e == 0x1F:
            r = 0x7F800000 | (m << 13)
        elif e != 0:
            r = ((e + 112) << 23) | (m << 13)
        elif m == 0:
            r = 0
        else:
            # Subnormal: m * 2**-24 is exact in float32, so let the FPU normalise it (Numba only
            # allows .view on an explicit np.float32(...) call).
            r = np.int64(np.float32(np.float32(m) * _TWO_M24).view(np.uint32))
        out[i] = sign | r
    return out.view(np.float32).reshape(u16.shape)


@njit(cache=True, nogil=True)
def f32_to_f16(f32: np.ndarray) -> np.ndarray:
    """Encode float32 to IEEE half bits (uint16) exactly like ``astype(np.float16)``.

    Round to nearest even, overflow to inf, exact subnormals. NaN keeps its sign and the top 10
    payload bits, forced non-zero so it stays a NaN (numpy's rule).
    """
    bits = f32.ravel().view(np.uint32)
    out = np.empty(bits.size, np.uint16)
    for i in range(bits.size):
        b = np.int64(bits[i])
        sign = (b >> 16) & 0x8000
        a = b & 0x7FFFFFFF
        if a > 0x7F800000:
            payload = (a >> 13) & 0x3FF
            if payload == 0:
                payload = 1
            out[i] = sign | 0x7C00 | payload
        else:
            out[i] = sign | min(_encode_magnitude(a, 10, 15), 0x7C00)
    return out.reshape(f32.shape)


@njit(cache=True, nogil=True)
def fp8_to_f32(u8: np.ndarray, fmt: int) -> np.ndarray:
    """Decode fp8 bit patterns (uint8) of type code ``fmt`` to float32, exactly as ml_dtypes.

    Args:
        u8: the stored bits.
        fmt: one of the fp8 ``DType.code`` values (E4M3, E5M2, E4M3FN, E8M0FNU).
    """
    if fmt != _E4M3 and fmt != _E5M2 and fmt != _E4M3FN and fmt != _E8M0:
        raise ValueError("fp8_to_f32: not an fp8 type code")
    table = FP8_DECODE[fmt]
    flat = u8.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = table[flat[i]]
    return out.reshape(u8.shape)


@register_jitable
def _e8m0_encode(b: int) -> int:
    """ml_dtypes' float32 -> float8_e8m0fnu rule (a power of two, no sign, no zero).

    Negative, zero, inf and NaN give the NaN 0xFF. A normal float32 rounds half up on its
    exponent (mantissa >= 0.5 goes up) and overflow is NaN. Subnormal float32 inputs give the
    smallest code 0 (2**-127), or code 1 once above 2**-127, as ml_dtypes does.
    """
    if b == 0 or b >= 0x7F800000:  # +0, inf, NaN and (as uint32 bits) every negative
        return 0xFF
    e = b >> 23
    if e == 0:
        return 1 if b > 0x400000 else 0
    return min(e + ((b >> 22) & 1), 0xFF)


@njit(cache=True, nogil=True)
def f32_to_fp8(f32: np.ndarray, fmt: int) -> np.ndarray:
    """Encode float32 to fp8 bits (uint8), matching ``astype(ml_dtypes.X)`` bit for bit.

    Round to nearest even. E4M3 (max 240) and E5M2 overflow to inf; E4M3FN (max 448, no inf)
    overflows to NaN, as ml_dtypes does. NaN becomes the format's quiet NaN with the input's
    sign. E8M0FNU follows ``_e8m0_encode``.

    Args:
        f32: float32 values.
        fmt: one of the fp8 ``DType.code`` values (E4M3, E5M2, E4M3FN, E8M0FNU).
    """
    if fmt == _E4M3:
        mbits, bias, top, nan = 3, 7, 0x78, 0x7C  # top: inf
    elif fmt == _E5M2:
        mbits, bias, top, nan = 2, 15, 0x7C, 0x7E
    elif fmt == _E4M3FN:
        mbits, bias, top, nan = 3, 7, 0x7F, 0x7F  # top: NaN, the overflow result
    elif fmt == _E8M0:
        mbits, bias, top, nan = 0, 127, 0xFF, 0xFF
    else:
        raise ValueError("f32_to_fp8: not an fp8 type code")
    bits = f32.ravel().view(np.uint32)
    out = np.empty(bits.size, np.uint8)
    if fmt == _E8M0:
        for i in range(bits.size):
            out[i] = _e8m0_encode(np.int64(bits[i]))
        return out.reshape(f32.shape)
    for i in range(bits.size):
        b = np.int64(bits[i])
        sign = (b >> 24) & 0x80
        a = b & 0x7FFFFFFF
        if a > 0x7F800000:
            out[i] = sign | nan
        else:
            out[i] = sign | min(_encode_magnitude(a, mbits, bias), top)
    return out.reshape(f32.shape)


@njit(cache=True, nogil=True)
def f32_to_tf32(f32: np.ndarray) -> np.ndarray:
    """Round float32 to tfloat32 precision (10 mantissa bits), nearest even; float32 storage.

    Overflow rounds to inf. A NaN stays a NaN: sign and top payload bits kept, quiet bit set
    (truncating alone could turn a low-payload NaN into inf).
    """
    bits = f32.ravel().view(np.uint32)
    out = np.empty(bits.size, np.uint32)
    for i in range(bits.size):
        b = np.int64(bits[i])
        if (b & 0x7FFFFFFF) > 0x7F800000:
            out[i] = (b & 0xFFFFE000) | 0x400000
        else:
            out[i] = _rne_shift(b, 13) << 13
    return out.view(np.float32).reshape(f32.shape)


@njit(cache=True, nogil=True)
def f32_to_int(f32: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Convert float32 to integers: round to nearest even, saturate to ``[lo, hi]``, NaN -> 0.

    This is the hardware's (and AWS's simulator's, since NKI 0.6) float -> int rule. The
    caller narrows the int64 result to the target type, whose range ``[lo, hi]`` is.

    Args:
        f32: float32 values.
        lo: smallest value of the target integer type (|lo| < 2**53).
        hi: largest value of the target integer type (|hi| < 2**53).
    """
    flat = f32.ravel()
    out = np.empty(flat.size, np.int64)
    lo_f = np.float64(lo)
    hi_f = np.float64(hi)
    for i in range(flat.size):
        # float64 holds every float32 and every bound exactly, so compare there.
        r = np.rint(np.float64(flat[i]))
        if r != r:
            out[i] = 0
        elif r >= hi_f:
            out[i] = hi
        elif r <= lo_f:
            out[i] = lo
        else:
            out[i] = np.int64(r)
    return out.reshape(f32.shape)
