"""``nki.host_dtypes`` (AWS's ``neuron_dtypes`` API): static_cast's rounding and saturation, the
MX x4 packing, and the small queries nki-library's tests use."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki.host_dtypes as dt
import nki.language as nl


def test_float_to_int_rounds_half_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -2.5, -0.5, 3.7, -3.7, 1e12, -1e12, np.nan, np.inf],
                 np.float32)
    expected = np.array([0, 2, 2, -2, 0, 4, -4, 2**31 - 1, -2**31, 0, 2**31 - 1], np.int64)
    np.testing.assert_array_equal(dt.static_cast(x, np.int32), expected.astype(np.int32))
    np.testing.assert_array_equal(dt.static_cast(np.array([300.0, -300.0, 254.5]), np.uint8),
                                  np.array([255, 0, 254], np.uint8))


def test_int_to_int_saturates_and_bool_is_nonzero():
    x = np.array([-70000, -5, 0, 5, 70000], np.int32)
    np.testing.assert_array_equal(dt.static_cast(x, np.int16),
                                  np.array([-32768, -5, 0, 5, 32767], np.int16))
    np.testing.assert_array_equal(dt.static_cast(x, np.bool_), x != 0)


@pytest.mark.parametrize("target", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3,
                                    ml_dtypes.float8_e5m2, nl.bfloat16, nl.float8_e4m3])
def test_float_targets_round_once_to_nearest_even(target):
    x = np.random.default_rng(0).standard_normal(4096) * 10
    want = np.dtype(target)
    # reference: exact float64 -> the format, one correctly rounded step (ml_dtypes)
    np.testing.assert_array_equal(dt.static_cast(x, target).view(np.uint8),
                                  x.astype(want).view(np.uint8))
    assert dt.static_cast(x, target).dtype == want


def _reference_pack(values: np.ndarray, element, bits: int) -> np.ndarray:
    codes = values.astype(element).view(np.uint8).astype(np.uint64) & ((1 << bits) - 1)
    groups = codes.reshape(values.shape[:-1] + (-1, 4))
    return sum(groups[..., i] << (i * bits) for i in range(4))


@pytest.mark.parametrize("name,element,bits", [
    ("float8_e4m3fn_x4", ml_dtypes.float8_e4m3fn, 8),
    ("float8_e5m2_x4", ml_dtypes.float8_e5m2, 8),
    ("float4_e2m1fn_x4", ml_dtypes.float4_e2m1fn, 4)])
def test_mx_x4_pack_and_unpack(name, element, bits):
    x = np.clip(np.random.default_rng(1).standard_normal((8, 32)) * 3, -6, 6).astype(np.float32)
    packed = dt.static_cast(x, getattr(nl, name))
    assert packed.shape == (8, 8) and dt.sizeinbytes(packed.dtype) == bits // 2
    raw = packed.view(np.uint32 if bits == 8 else np.uint16).astype(np.uint64)
    np.testing.assert_array_equal(raw, _reference_pack(x, element, bits))
    np.testing.assert_array_equal(dt.static_cast(packed, np.float32),
                                  x.astype(element).astype(np.float32))
    np.testing.assert_array_equal(dt.static_cast(packed, element).view(np.uint8),
                                  x.astype(element).view(np.uint8))


def test_pack_needs_groups_of_four():
    with pytest.raises(ValueError, match="multiple of 4"):
        dt.static_cast(np.zeros((2, 6), np.float32), dt.float8_e4m3fn_x4)


def test_queries():
    assert dt.sizeinbytes(nl.bfloat16) == 2 and dt.sizeinbytes(np.float32) == 4
    assert dt.is_float_type(nl.float8_e5m2) and dt.is_float_type(dt.float8_e4m3fn_x4)
    assert not dt.is_float_type(np.int32) and not dt.is_float_type(nl.uint8)
    assert dt.finfo(dt.bfloat16).max == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert dt.finfo(dt.float8_e4m3fn_x4).max == 448.0


def test_static_cast_to_int_chunks_match_one_pass_and_stay_small(monkeypatch):
    """A large float array cast to int costs its result, not float64 copies of the whole
    array (nki-library casts ~10^8-element caches); chunk edges change no element."""
    import tracemalloc

    monkeypatch.setattr(dt, "_CHUNK", 1000)
    x = np.random.default_rng(5).uniform(-4e4, 4e4, (7, 9, 53)).astype(np.float32)
    x.flat[::97] = np.nan
    want = np.clip(np.rint(np.nan_to_num(x.astype(np.float64))), -32768, 32767).astype(np.int16)
    np.testing.assert_array_equal(dt.static_cast(x, np.int16), want)
    monkeypatch.setattr(dt, "_CHUNK", 1 << 16)
    big = np.random.default_rng(6).standard_normal(1 << 22) * 100    # float64, 32 MiB
    tracemalloc.start()
    out = dt.static_cast(big, np.int32)                               # 16 MiB result
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 24 << 20, f"peak {peak >> 20} MiB"
    np.testing.assert_array_equal(out, np.rint(big).astype(np.int32))
