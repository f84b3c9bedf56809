"""Bit-exactness of nki.sim.numerics against ml_dtypes / numpy, compiled and interpreted.

The compiled encoders were also checked offline against ml_dtypes / numpy on all 2**32 float32
bit patterns (no mismatch); here a dense structured sample covers every exponent, sign and
rounding boundary (the top 16 bits exhaustively, the low 16 bits at the patterns where rounding
changes for bf16, fp16 and the fp8 formats) plus random bit patterns.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nki.ir import types as ty
from nki.sim import numerics as num

FP8 = [ty.FLOAT8_E4M3, ty.FLOAT8_E5M2, ty.FLOAT8_E4M3FN, ty.FLOAT8_E8M0FNU]
MODES = ["jit", "py"]
# Low halves around every rounding position >= bit 12 (fp16's round bit) and NaN payloads.
LOW = [0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FFF, 0x8000, 0x8001,
       0xE000, 0xF000, 0xFFFF]


def _fn(f, mode: str):
    return f if mode == "jit" else f.py_func


def _structured_bits() -> np.ndarray:
    top = np.arange(1 << 16, dtype=np.uint32) << 16
    return (top[:, None] | np.array(LOW, np.uint32)[None, :]).ravel()


@pytest.fixture(scope="module")
def f32_sample() -> dict[str, np.ndarray]:
    """Float32 inputs per mode: dense for compiled code, a random subset for the interpreter."""
    rng = np.random.default_rng(1234)
    structured = _structured_bits()
    rand = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    jit = np.concatenate([structured, rand]).view(np.float32)
    py = np.concatenate([rng.choice(structured, 12000), rand[:4000]]).view(np.float32)
    return {"jit": jit, "py": py}


def _same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    bad = np.nonzero(a.view(np.uint8).reshape(a.size, -1) != b.view(np.uint8).reshape(b.size, -1))
    assert bad[0].size == 0, f"{bad[0].size} mismatches, first at {bad[0][:5]}"


@pytest.mark.parametrize("mode", MODES)
def test_bf16_decode_exhaustive(mode: str) -> None:
    u16 = np.arange(1 << 16, dtype=np.uint16)
    ref = u16.view(ml_dtypes.bfloat16).astype(np.float32)
    _same_bits(_fn(num.bf16_to_f32, mode)(u16).view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("mode", MODES)
def test_f16_decode_exhaustive(mode: str) -> None:
    u16 = np.arange(1 << 16, dtype=np.uint16)
    ref = u16.view(np.float16).astype(np.float32)
    _same_bits(_fn(num.f16_to_f32, mode)(u16).view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dt", FP8, ids=lambda d: d.name)
def test_fp8_decode_exhaustive(mode: str, dt: ty.DType) -> None:
    u8 = np.arange(256, dtype=np.uint8)
    ref = u8.view(dt.host_dtype()).astype(np.float32)
    _same_bits(_fn(num.fp8_to_f32, mode)(u8, dt.code).view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("mode", MODES)
def test_f32_to_bf16(mode: str, f32_sample: dict[str, np.ndarray]) -> None:
    x = f32_sample[mode]
    with np.errstate(all="ignore"):
        ref = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    _same_bits(_fn(num.f32_to_bf16, mode)(x), ref)


@pytest.mark.parametrize("mode", MODES)
def test_f32_to_f16(mode: str, f32_sample: dict[str, np.ndarray]) -> None:
    x = f32_sample[mode]
    with np.errstate(all="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    _same_bits(_fn(num.f32_to_f16, mode)(x), ref)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dt", FP8, ids=lambda d: d.name)
def test_f32_to_fp8(mode: str, dt: ty.DType, f32_sample: dict[str, np.ndarray]) -> None:
    x = f32_sample[mode]
    with np.errstate(all="ignore"):
        ref = x.astype(dt.host_dtype()).view(np.uint8)
    _same_bits(_fn(num.f32_to_fp8, mode)(x, dt.code), ref)


def _tf32_reference(x: np.ndarray) -> np.ndarray:
    """Independent tf32 rounding: float16 has tf32's 10-bit mantissa, so scale normal numbers
    into [1, 2), round through float16 (RNE), scale back; subnormals are multiples of 2**-136."""
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        e = np.floor(np.log2(np.abs(x64)))
        normal = np.isfinite(x64) & (np.abs(x64) >= 2.0**-126)
        scaled = np.where(normal, x64 * 2.0 ** -np.where(normal, e, 0), 0)
        r_norm = scaled.astype(np.float16).astype(np.float64) * 2.0 ** np.where(normal, e, 0)
        r_sub = np.rint(x64 * 2.0**136) * 2.0**-136
        out = np.where(normal, r_norm, np.where(np.isfinite(x64), r_sub, x64))
        return out.astype(np.float32)


@pytest.mark.parametrize("mode", MODES)
def test_f32_to_tf32(mode: str, f32_sample: dict[str, np.ndarray]) -> None:
    x = f32_sample[mode]
    got = _fn(num.f32_to_tf32, mode)(x)
    nan = np.isnan(x)
    assert np.isnan(got[nan]).all()
    # NaN keeps sign and top payload, gains the quiet bit; the rest is exact RNE.
    nan_bits = (x[nan].view(np.uint32) & np.uint32(0xFFFFE000)) | np.uint32(0x400000)
    _same_bits(got[nan].view(np.uint32), nan_bits)
    _same_bits(got[~nan].view(np.uint32), _tf32_reference(x[~nan]).view(np.uint32))
    assert (got.view(np.uint32) & np.uint32(0x1FFF) == 0).all()


INT_RANGES = {"int8": (-128, 127), "int16": (-(1 << 15), (1 << 15) - 1),
              "int32": (-(1 << 31), (1 << 31) - 1), "uint8": (0, 255), "uint16": (0, 65535),
              "uint32": (0, (1 << 32) - 1)}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(INT_RANGES))
def test_f32_to_int(mode: str, name: str, f32_sample: dict[str, np.ndarray]) -> None:
    lo, hi = INT_RANGES[name]
    rng = np.random.default_rng(7)
    x = np.concatenate([
        f32_sample[mode][:20000],
        rng.uniform(lo - 3.0, hi + 3.0, 5000).astype(np.float32),
        np.arange(-600, 600, dtype=np.float32) * np.float32(0.25),  # ties at .5
        np.array([lo, hi, lo - 1, hi + 1, np.inf, -np.inf, np.nan, -0.0, 2.0**31, 2.0**32],
                 np.float32),
    ])
    with np.errstate(all="ignore"):
        r = np.rint(x.astype(np.float64))
        ref = np.where(np.isnan(r), 0, np.clip(np.nan_to_num(r), lo, hi)).astype(np.int64)
    got = _fn(num.f32_to_int, mode)(x, lo, hi)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, ref)


def test_modes_bit_identical(f32_sample: dict[str, np.ndarray]) -> None:
    """The interpreted code must give the compiled bits, for every function."""
    x = f32_sample["py"]
    u16 = x.view(np.uint16)[: x.size]
    u8 = x.view(np.uint8)[: x.size]
    cases = [(num.bf16_to_f32, (u16,)), (num.f16_to_f32, (u16,)), (num.f32_to_bf16, (x,)),
             (num.f32_to_f16, (x,)), (num.f32_to_tf32, (x,)), (num.f32_to_int, (x, -128, 127))]
    for dt in FP8:
        cases += [(num.fp8_to_f32, (u8, dt.code)), (num.f32_to_fp8, (x, dt.code))]
    for fn, args in cases:
        _same_bits(fn.py_func(*args), fn(*args))


@pytest.mark.parametrize("mode", MODES)
def test_shapes_preserved(mode: str) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 5, 6)).astype(np.float32) * np.float32(100)
    for arr in (x, x[0], x[0, 0]):
        bits = _fn(num.f32_to_bf16, mode)(arr)
        assert bits.shape == arr.shape and bits.dtype == np.uint16
        back = _fn(num.bf16_to_f32, mode)(bits)
        assert back.shape == arr.shape and back.dtype == np.float32
        _same_bits(back, arr.astype(ml_dtypes.bfloat16).astype(np.float32))
        f8 = _fn(num.f32_to_fp8, mode)(arr, ty.FLOAT8_E4M3FN.code)
        assert f8.shape == arr.shape and f8.dtype == np.uint8
        assert _fn(num.fp8_to_f32, mode)(f8, ty.FLOAT8_E4M3FN.code).shape == arr.shape
        assert _fn(num.f32_to_int, mode)(arr, -128, 127).shape == arr.shape
    # Non-contiguous input is accepted (copied) and keeps its shape.
    _same_bits(_fn(num.f32_to_f16, mode)(x[:, ::2]), x[:, ::2].astype(np.float16).view(np.uint16))


@pytest.mark.parametrize("mode", MODES)
def test_bad_fp8_code(mode: str) -> None:
    with pytest.raises(ValueError):
        _fn(num.f32_to_fp8, mode)(np.zeros(3, np.float32), ty.BFLOAT16.code)
    with pytest.raises(ValueError):
        _fn(num.fp8_to_f32, mode)(np.zeros(3, np.uint8), ty.INT8.code)


def test_known_values() -> None:
    """A few hand-checked encodings (documented ml_dtypes behaviour)."""
    x = np.array([448.0, 464.0, 465.0, 1e9, -np.inf], np.float32)
    # e4m3fn: 464 ties to 448 (even); above it ml_dtypes gives NaN (no inf in the format).
    np.testing.assert_array_equal(num.f32_to_fp8(x, ty.FLOAT8_E4M3FN.code),
                                  [0x7E, 0x7E, 0x7F, 0x7F, 0xFF])
    # e4m3 (IEEE-like): max 240, overflow to inf 0x78.
    y = np.array([240.0, 247.9, 248.0, 1e9, np.nan], np.float32)
    np.testing.assert_array_equal(num.f32_to_fp8(y, ty.FLOAT8_E4M3.code),
                                  [0x77, 0x77, 0x78, 0x78, 0x7C])
    # e8m0fnu: 0 and negatives are NaN; 3.0 rounds half up to 4.0.
    z = np.array([0.0, -1.0, 1.0, 3.0, 2.0**-127], np.float32)
    np.testing.assert_array_equal(num.f32_to_fp8(z, ty.FLOAT8_E8M0FNU.code),
                                  [0xFF, 0xFF, 127, 129, 0])
