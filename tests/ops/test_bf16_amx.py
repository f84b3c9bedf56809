"""AMX's ``tdpbf16ps`` and its numpy model (nki/sim/bf16_model.py ``amx_step``).

* The model against hand-worked values (every machine): two chains (even and odd K rows),
  each step rounded and flushed, their sum, then the accumulator; 32 K rows per instruction.
* The model against the instruction itself, bit for bit, on random tiles of every kind of
  value (where the CPU has AMX and Linux grants the tile state).

nc_matmul on AMX against this model is in test_bf16_units.py (its ``unit`` fixture).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nki.sim import bf16
from nki.sim import bf16_model as model

E = 2.0 ** -24            # half an ulp of 1.0 in fp32: 1 + E ties to 1
needs_amx = pytest.mark.skipif("amx_bf16" not in bf16.FOUND, reason="no usable AMX unit")


def bits(values) -> np.ndarray:
    """bf16 bits of exactly representable values, as a column [K, 1]."""
    v = np.array(values, np.float32)
    out = v.astype(ml_dtypes.bfloat16)
    assert np.array_equal(out.astype(np.float32), v, equal_nan=True)
    return out.view(np.uint16).reshape(-1, 1)


def amx(column, acc=0.0) -> float:
    """The model's one output for st = ``column`` (K values) times mv = ones."""
    st = bits(column)
    return float(model.amx_step(np.float32([[acc]]), st, bits([1.0] * len(column)))[0, 0])


def gemm(column, unit) -> float:
    st = bits(column)
    return float(model.bgemm(st, bits([1.0] * len(column)), unit=unit)[0, 0])


# ----- the model, against worked values -------------------------------------------------
def test_even_and_odd_rows_are_two_chains():
    # rows (1, 0, E, E): evens 1 (+) E ties to 1, odds 0 (+) E = E, then 1 (+) E ties to 1
    assert amx([1.0, 0.0, E, E]) == 1.0
    # rows (1, E, 0, E): evens 1, odds E (+) E = 2E exactly, then 1 + 2E is exact
    assert amx([1.0, E, 0.0, E]) == 1.0 + 2 * E
    # one chain over the rows in order (the pseudocode's reading, and AVX-512 BF16's pair
    # steps) ties twice and gives 1
    assert gemm([1.0, E, 0.0, E], "avx512_bf16") == 1.0


def test_the_chains_meet_before_the_accumulator():
    # acc 1, rows (E, E): evens E, odds E, E (+) E = 2E, then 1 + 2E; adding each chain to
    # the accumulator in turn would tie twice and give 1
    assert amx([E, E], acc=1.0) == 1.0 + 2 * E


def test_each_instruction_takes_32_rows():
    column = [0.0] * 34
    column[0], column[1] = 1.0, E          # instruction 1: evens 1, odds E: 1 (+) E = 1
    column[33] = E                          # instruction 2: E; 1 (+) E ties to 1 again
    assert gemm(column, "amx_bf16") == 1.0
    column[33], column[3] = 0.0, E          # both E's in instruction 1's odd chain: 2E
    assert gemm(column, "amx_bf16") == 1.0 + 2 * E


def test_chains_start_from_plus_zero():
    got = amx([-0.0, -0.0], acc=-0.0)
    assert got == 0.0 and not np.signbit(got)


def test_subnormal_inputs_read_as_zero_and_steps_flush():
    assert amx([2.0 ** -130], acc=0.0) == 0.0                     # a bf16 subnormal input
    st, mv = bits([2.0 ** -70]), bits([2.0 ** -70])                # 2^-140: below fp32's normals
    assert model.amx_step(np.float32([[0.0]]), st, mv)[0, 0] == 0.0
    assert model.amx_step(np.float32([[0.0]]), st, mv, daz_ftz=False)[0, 0] == 2.0 ** -140
    # a chain that cancels to a subnormal flushes to zero
    assert amx([2.0 ** -125, 0.0, -(2.0 ** -125 - 2.0 ** -132)]) == 0.0


def test_the_two_units_round_random_sums_differently(rng):
    st = rng.standard_normal((128, 32)).astype(ml_dtypes.bfloat16).view(np.uint16)
    mv = rng.standard_normal((128, 32)).astype(ml_dtypes.bfloat16).view(np.uint16)
    a, b = (model.bgemm(st, mv, unit=u) for u in model.UNITS)
    exact = st.astype(np.uint32) << 16
    exact = exact.view(np.float32).astype(np.float64)
    ref = exact.T @ ((mv.astype(np.uint32) << 16).view(np.float32).astype(np.float64))
    assert not np.array_equal(a, b)                    # the test of a unit can tell them apart
    for y in (a, b):                                    # both still fp32 accumulations
        assert np.abs(y - ref).max() <= 130 * 2.0 ** -24 * np.abs(ref).max()


def test_an_unknown_unit_is_refused():
    with pytest.raises(ValueError, match="one of"):
        model.bgemm(bits([1.0]), bits([1.0]), unit="sme")


# ----- the model, against the instruction -----------------------------------------------
def _random_bf16(rng, shape, exp_lo, exp_hi) -> np.ndarray:
    e = rng.integers(exp_lo, exp_hi + 1, shape).astype(np.uint32)
    m = rng.integers(0, 128, shape).astype(np.uint32)
    s = rng.integers(0, 2, shape).astype(np.uint32)
    return ((s << 15) | (e << 7) | m).astype(np.uint16)


def _random_acc(rng, exp_lo, exp_hi) -> np.ndarray:
    e = rng.integers(max(0, exp_lo - 10), min(254, exp_hi + 10) + 1, (16, 16)).astype(np.uint32)
    m = rng.integers(0, 1 << 23, (16, 16)).astype(np.uint32)
    s = rng.integers(0, 2, (16, 16)).astype(np.uint32)
    return ((s << 31) | (e << 23) | m).view(np.float32)


def _tiles(st, mv):
    """The instruction's tile layout of st [32, 16] (its transpose) and mv [32, 16] (VNNI:
    row p holds column n's rows (2p, 2p+1) at 2n, 2n+1)."""
    return (np.ascontiguousarray(st.T),
            np.ascontiguousarray(mv.reshape(16, 2, 16).transpose(0, 2, 1).reshape(16, 32)))


@needs_amx
@pytest.mark.parametrize("exp_lo,exp_hi", [(100, 150),     # normal values
                                           (124, 130),     # heavy cancellation
                                           (50, 75),       # products underflow fp32
                                           (0, 3),         # subnormal inputs and results
                                           (200, 254),     # products and sums overflow
                                           (0, 255)])      # everything, inf and NaN too
def test_model_matches_the_instruction_bit_for_bit(exp_lo, exp_hi):
    rng = np.random.default_rng(exp_lo * 256 + exp_hi)
    for _ in range(40):
        st, mv = (_random_bf16(rng, (32, 16), exp_lo, exp_hi) for _ in range(2))
        acc = _random_acc(rng, exp_lo, exp_hi)
        hw = bf16.amx_dot_tile(acc, *_tiles(st, mv))
        with np.errstate(invalid="ignore", over="ignore"):
            ours = model.amx_step(acc, st, mv)
        nan = np.isnan(hw)
        np.testing.assert_array_equal(nan, np.isnan(ours))     # NaN payloads not modelled
        np.testing.assert_array_equal(hw.view(np.uint32)[~nan], ours.view(np.uint32)[~nan])


# ----- choosing a unit ------------------------------------------------------------------
@pytest.mark.parametrize("value,enabled,kind", [("", True, "auto"), ("0", False, "auto"),
                                                ("off", False, "auto"), ("1", True, "auto"),
                                                ("amx_bf16", True, "amx_bf16"),
                                                ("AVX512_BF16", True, "avx512_bf16")])
def test_nki_bf16_unit_reads_off_or_a_unit_name(monkeypatch, value, enabled, kind):
    from nki import config

    monkeypatch.setenv("NKI_BF16_UNIT", value)
    assert config.bf16_unit_enabled() is enabled
    assert config.bf16_unit_kind() == kind


def test_selecting_a_unit_the_cpu_lacks_is_refused():
    with pytest.raises(ValueError, match="not usable here"):
        bf16.select("sme_bf16")


@needs_amx
def test_a_process_asked_for_avx512_bf16_runs_its_matmuls_there():
    """NKI_BF16_UNIT picks the unit when nki.sim.bf16 loads (a new process)."""
    import subprocess
    import sys

    code = "from nki.sim import bf16; print(bf16.UNIT, bf16.STATUS)"
    env = {**__import__("os").environ, "NKI_BF16_UNIT": "avx512_bf16"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out[0] == ("avx512_bf16" if "avx512_bf16" in bf16.FOUND else "amx_bf16")
