"""The tiers of NKI_TIER: the compile-free tier (plain Python all the way down) gives the
compiled tier's bits; the switch; a background build never holds up the caller's exit."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from nki import config
from nki.sim import layout, numerics, tier, transcend
from nki.sim.emit import activation, reduce, select
from nki.sim.helpers import alu, memory
from nki.sim.helpers.pure import pure_value
from nki.sim.transcend import elementary


def _special_floats(rng, n=4096) -> np.ndarray:
    """Random values over many binades plus NaN, infinities, signed zeros, subnormals and
    the exp thresholds."""
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-10, 8, n))).astype(np.float32)
    edges = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-40, 88.72283, 88.72284,
             -104.0, -103.99, -110.0, 89.0, 3.4e38, -3.4e38]
    edges = np.array(edges, np.float32)[:n]
    x[:len(edges)] = edges
    return x


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


# --------------------------------------------------- the numpy twins against compiled loops

def _around(values) -> np.ndarray:
    """``values`` as float32, their neighbours one step either side and their negatives."""
    v = np.array(values, np.float32)
    inf = np.float32(np.inf)
    v = np.concatenate([v, np.nextafter(v, inf), np.nextafter(v, -inf)])
    return np.concatenate([v, -v])


_HALF_PIS = (np.arange(-12, 13) * (np.pi / 2)).tolist()
# Each function's own thresholds, each with its neighbours and negatives (see transcend.base)
_EDGES = {
    "exp": [88.72283, 104.0, 103.97, 1e-8],
    "log": [1.0, 2.0, 0.5, 1.4142135, 0.70710677, 1.1754944e-38, 1e-40, 1e-45, 3.4e38, 1e-30],
    "sin": _HALF_PIS + [2.0**-12, 1e5, 4e8, 1e10, 1e20, 3.4e38, 3.14159274],
    "arctan": [0.41421356, 2.4142135, 1.0, 2.0**-12, 1e10, 1e30],
    "tanh": [0.55, 9.1, 10.0, 20.0, 1e5, 1e-20],
    "sigmoid": [110.0, 88.0, 104.0, 120.0, 1e-30],
    "erf": [1.0, 3.92, 4.0, 0.5, 5.0],
    "gelu": [0.5, 15.0, 16.0, 14.9, 2.0, 0.25, 0.7517915, 1e-20],
    "gelu_apprx": [16.0, 70.0, 2.3 / 1.702, 0.5 / 1.702, 0.7511542, 1.27846, 2.3, 0.5],
    "erf_dx": [10.5, 10.0, 1e-20],
    "rsqrt": [1.0, 4.0, 1e-45, 1e-40, 1.1754944e-38, 3.4e38],
}
_EDGE_SETS = {"cos": "sin", "tan": "sin", "softplus": "sigmoid", "silu": "sigmoid",
              "mish": "sigmoid", "silu_dx": "gelu_apprx", "gelu_apprx_tanh": "gelu_apprx",
              "gelu_apprx_sigmoid": "gelu_apprx", "gelu_apprx_sigmoid_dx": "gelu_apprx",
              "gelu_dx": "gelu", "reciprocal": "rsqrt"}


def _transcendental_inputs(rng, name) -> np.ndarray:
    """``_special_floats``, ``name``'s edges and random bit patterns (every NaN payload)."""
    edges = _EDGES.get(_EDGE_SETS.get(name, name), [])
    patterns = rng.integers(0, 2 ** 32, 4096, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([_special_floats(rng), _around(edges + [1.0, 0.0]),
                           patterns.view(np.float32)])


@pytest.mark.parametrize("name", transcend.__all__)
def test_transcendental_twins_give_the_compiled_bits(rng, name):
    """Every public transcendental (the elementary ones and the activations) in the pure
    tier, against its compiled loop; also into an ``out`` row and from a 2-D array."""
    fn = getattr(transcend, name)
    x = _transcendental_inputs(rng, name)
    np.testing.assert_array_equal(_bits(pure_value(fn)(x)), _bits(fn(x)), err_msg=name)
    grid, mine = x[:4096].reshape(64, 64), np.empty(4096, np.float32)
    got = pure_value(fn)(grid, mine)
    assert got.shape == grid.shape and np.shares_memory(got, mine)
    np.testing.assert_array_equal(_bits(got), _bits(fn(grid)), err_msg=name)


@pytest.mark.parametrize("use_scale,use_bias", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_exp_affine_twin_gives_the_compiled_bits(rng, use_scale, use_bias):
    x = _transcendental_inputs(rng, "exp")
    for s, b in ((np.float32(0.75), np.float32(-1.5)), (np.float32(np.nan), np.float32(3e38)),
                 (np.float32(-0.0), np.float32(1e-45)), (np.float32(1e-3), np.float32(-88.0))):
        mine, theirs = np.empty_like(x), np.empty_like(x)
        pure_value(elementary.exp_affine)(x, mine, use_scale, s, use_bias, b)
        elementary.exp_affine(x, theirs, use_scale, s, use_bias, b)
        np.testing.assert_array_equal(_bits(mine), _bits(theirs))
    in_place = x.copy()      # out may be x itself
    pure_value(elementary.exp_affine)(in_place, in_place, 1, np.float32(0.5), 1, np.float32(1))
    elementary.exp_affine(x, theirs, 1, np.float32(0.5), 1, np.float32(1))
    np.testing.assert_array_equal(_bits(in_place), _bits(theirs))


@pytest.mark.parametrize("op", [alu.ADD, alu.SUB, alu.MUL, alu.MAX, alu.MIN])
def test_fold_twin_gives_the_compiled_bits(rng, op):
    y = _special_floats(rng, 13 * 37).reshape(13, 37)
    rng.shuffle(y, axis=1)
    start = _special_floats(rng, 13)
    np.testing.assert_array_equal(_bits(pure_value(alu.fold_rows_f32)(op, start, y)),
                                  _bits(alu.fold_rows_f32(op, start, y)))


def _seq_fold(op, start, rows):
    """An independent reference: every row folded one fp32 element at a time (numpy scalars,
    so each step rounds to fp32), max/min keeping the accumulator when it is NaN."""
    out = np.array(start, np.float32)
    with np.errstate(all="ignore"):
        for r in range(rows.shape[0]):
            s = out[r]
            for v in rows[r]:
                if op == alu.ADD:
                    s = s + v
                elif op == alu.SUB:
                    s = s - v
                elif op == alu.MUL:
                    s = s * v
                elif op == alu.MAX:
                    s = s if (s >= v or s != s) else v
                else:
                    s = s if (s <= v or s != s) else v
            out[r] = s
    return out


@pytest.mark.parametrize("op", [alu.ADD, alu.SUB, alu.MUL, alu.MAX, alu.MIN])
@pytest.mark.parametrize("rows,first", [(13, 0), (16, 1), (5, 1)])
def test_flat_row_fold_in_order_in_every_tier(rng, op, rows, first):
    """``alu.fold_flat_rows_f32`` (rows of a flat array, activation's register sums) folds
    each row in order from ``first``: compiled and as the compile-free tier's numpy twin,
    both equal to the one-element-at-a-time reference."""
    n, pitch, off = 37, 41, 3
    flat = _special_floats(rng, off + rows * pitch)
    start = _special_floats(rng, rows)
    view = np.lib.stride_tricks.as_strided(flat[off:], shape=(rows, n),
                                           strides=(pitch * 4, 4))
    expect = _bits(_seq_fold(op, start, view[:, first:]))
    for fn in (alu.fold_flat_rows_f32, pure_value(alu.fold_flat_rows_f32)):
        acc = start.copy()
        got = fn(op, acc, flat, off, pitch, first, n)
        np.testing.assert_array_equal(_bits(got), expect)
        np.testing.assert_array_equal(_bits(acc), expect)   # updated in place


@pytest.mark.parametrize("op", [alu.ADD, alu.SUB, alu.MUL, alu.DIV, alu.MAX, alu.MIN])
@pytest.mark.parametrize("c_first", [False, True])
def test_column_twin_gives_the_compiled_bits(rng, op, c_first):
    d = _special_floats(rng, 257)
    for c in (np.float32(1.5), np.float32(-0.0), np.float32(np.nan), np.float32(3e38)):
        mine, theirs = d.copy(), d.copy()
        assert pure_value(alu.col_into)(op, mine, c, c_first)
        assert alu.col_into(op, theirs, c, c_first)
        np.testing.assert_array_equal(_bits(mine), _bits(theirs))


@pytest.mark.parametrize("op", [alu.ADD, alu.SUB, alu.MUL, alu.DIV, alu.MAX])
def test_row_twin_gives_the_compiled_bits(rng, op):
    d, x = _special_floats(rng, 300), _special_floats(rng, 300)[::-1].copy()
    for x_first in (False, True):
        mine, theirs = d.copy(), d.copy()
        assert pure_value(alu.row_into)(op, mine, x, x_first)
        assert alu.row_into(op, theirs, x, x_first)
        np.testing.assert_array_equal(_bits(mine), _bits(theirs))


@pytest.mark.parametrize("use_scale,use_bias", [(1, 1), (1, 0), (0, 1)])
def test_affine_row_twin_gives_the_compiled_bits(rng, use_scale, use_bias):
    x = _special_floats(rng, 300)
    for s, b in ((np.float32(0.75), np.float32(-1.5)), (np.float32(np.nan), np.float32(3e38)),
                 (np.float32(-0.0), np.float32(1e-45))):
        mine, theirs = np.empty_like(x), np.empty_like(x)
        pure_value(activation._affine_row)(x, mine, use_scale, s, use_bias, b)
        activation._affine_row(x, theirs, use_scale, s, use_bias, b)
        np.testing.assert_array_equal(_bits(mine), _bits(theirs))


def test_square_twin_gives_the_compiled_bits(rng):
    x = _special_floats(rng, 300)
    mine, theirs = np.empty_like(x), np.empty_like(x)
    pure_value(activation._square_into)(x, mine)
    activation._square_into(x, theirs)
    np.testing.assert_array_equal(_bits(mine), _bits(theirs))
    np.testing.assert_array_equal(_bits(theirs), _bits(x * x))


@pytest.mark.parametrize("op0", [alu.ADD, alu.SUB, alu.MUL])
@pytest.mark.parametrize("op1", [alu.ADD, alu.SUB, alu.MUL])
def test_stt_row_twin_gives_the_compiled_bits(rng, op0, op1):
    x, u = _special_floats(rng, 300), _special_floats(rng, 300)[::-1].copy()
    for c in (np.float32(1.5), np.float32(-0.0), np.float32(np.nan), np.float32(3e38)):
        mine, theirs = np.empty_like(x), np.empty_like(x)
        pure_value(select._stt_row)(op0, op1, mine, x, c, u)
        select._stt_row(op0, op1, theirs, x, c, u)
        np.testing.assert_array_equal(_bits(mine), _bits(theirs))


def test_pair_moment_twins_give_the_compiled_bits(rng):
    rows = [_special_floats(rng, 301) for _ in range(4)]
    rows[1] = rng.standard_normal(301).astype(np.float32) * 1e4 + 3   # cancellation
    rows[2][:] = -0.0
    for fn, extra in ((reduce._pair_sums4, ()),
                      (reduce._pair_squares4, ((np.float32(1.5),) * 4, (np.float32(-2),) * 4))):
        mine, theirs = pure_value(fn)(*rows, 150, *extra), fn(*rows, 150, *extra)
        np.testing.assert_array_equal(_bits(np.array(mine)), _bits(np.array(theirs)))


@pytest.mark.parametrize("is_max", [True, False])
def test_lane_extremes_twin_gives_the_compiled_bits(rng, is_max):
    row = np.where(rng.random(64 * 9) < 0.3, np.float32(0.0), _special_floats(rng, 64 * 9))
    row[::7] = -0.0
    start = np.full(64, -np.inf if is_max else np.inf, np.float32)
    mine, theirs = start.copy(), start.copy()
    pure_value(reduce._lane_extremes)(is_max, row, mine)
    reduce._lane_extremes(is_max, row, theirs)
    np.testing.assert_array_equal(_bits(mine), _bits(theirs))
    assert pure_value(reduce._first_nan)(row) == reduce._first_nan(row)


def test_bf16_conversion_twins_give_the_compiled_bits(rng):
    """Decoding every bf16 pattern, and encoding special floats, each rounding boundary and
    random bit patterns (NaN payloads: the quiet NaN with the input's sign)."""
    every = np.arange(2 ** 16, dtype=np.uint16)
    mine, theirs = np.empty(every.size, np.float32), np.empty(every.size, np.float32)
    pure_value(numerics.bf16_to_f32_into)(every, mine)
    numerics.bf16_to_f32_into(every, theirs)
    np.testing.assert_array_equal(_bits(mine), _bits(theirs))
    ties = (every.astype(np.uint32) << 16) + np.array([0x7FFF, 0x8000, 0x8001], np.uint32)[:, None]
    patterns = rng.integers(0, 2 ** 32, 4096, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([_special_floats(rng), ties.ravel().view(np.float32),
                        patterns.view(np.float32)])
    for row in (x, x[::3]):
        got, want = np.empty(row.size, np.uint16), np.empty(row.size, np.uint16)
        pure_value(numerics.f32_to_bf16_into)(row, got)
        numerics.f32_to_bf16_into(row, want)
        np.testing.assert_array_equal(got, want)


def _encoder_inputs(rng) -> np.ndarray:
    """Special floats, random bit patterns, and every float32 near an fp16/fp8 rounding
    boundary (the low 13 bits at a tie, either side of it, or zero, for every high half)."""
    high = np.arange(2 ** 19, dtype=np.uint32)[::7] << 13
    low = np.array([0, 0xFFF, 0x1000, 0x1001, 0x80000, 0x100000], np.uint32)[:, None]
    patterns = rng.integers(0, 2 ** 32, 4096, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([_special_floats(rng), (high + low).ravel().view(np.float32),
                           patterns.view(np.float32)])


_FP8_CODES = (numerics._E4M3, numerics._E5M2, numerics._E4M3FN, numerics._E8M0)


def test_fp16_fp8_tf32_int_conversion_twins_give_the_compiled_bits(rng):
    x = _encoder_inputs(rng)
    for fn, args in ((numerics.f32_to_f16, ()), (numerics.f32_to_tf32, ())) + tuple(
            (numerics.f32_to_fp8, (code,)) for code in _FP8_CODES):
        for row in (x, x[::3], x[:600].reshape(20, 30)):
            np.testing.assert_array_equal(pure_value(fn)(row, *args).view(np.uint8),
                                          fn(row, *args).view(np.uint8), err_msg=repr(args))
    every = np.arange(2 ** 16, dtype=np.uint16)
    np.testing.assert_array_equal(_bits(pure_value(numerics.f16_to_f32)(every)),
                                  _bits(numerics.f16_to_f32(every)))
    for code in _FP8_CODES:
        byte = np.arange(256, dtype=np.uint8).reshape(16, 16)
        np.testing.assert_array_equal(_bits(pure_value(numerics.fp8_to_f32)(byte, code)),
                                      _bits(numerics.fp8_to_f32(byte, code)))
    with pytest.raises(ValueError):
        pure_value(numerics.f32_to_fp8)(x, -1)
    for lo, hi in ((-128, 127), (0, 255), (-2 ** 31, 2 ** 31 - 1), (0, 2 ** 32 - 1)):
        np.testing.assert_array_equal(pure_value(numerics.f32_to_int)(x, lo, hi),
                                      numerics.f32_to_int(x, lo, hi))


@pytest.mark.parametrize("rows,stride,n", [(5, 40, 32), (5, 32, 32), (5, 16, 32), (1, -3, 32),
                                            (4, 0, 8), (3, 50, 1)])
def test_scatter_twin_writes_the_compiled_words(rng, rows, stride, n):
    """Rows apart, adjacent, overlapping (the later row wins, as in the loop), one row with a
    negative stride, all rows on one place, one-element rows."""
    irow = np.zeros(layout.OPS + layout.OPW, np.int64)
    base = np.int64(layout.OPS)
    irow[base + layout.O_COUNT:base + layout.O_COUNT + 5] = [rows, 1, 1, 1, n]
    irow[base + layout.O_STRIDE:base + layout.O_STRIDE + 5] = [stride, 0, 0, 0, 1]
    values = _special_floats(rng, rows * n).view(np.uint32).reshape(rows, n)
    mine = rng.integers(0, 2 ** 32, 400, dtype=np.uint64).astype(np.uint32)
    theirs = mine.copy()
    pure_value(memory.scatter)(mine, 60, irow, base, values)
    memory.scatter(theirs, 60, irow, base, values)
    np.testing.assert_array_equal(mine, theirs)


def test_copy_row_twin_copies_and_keeps_forward_overlap_order():
    a = np.arange(10, dtype=np.float32)
    b, c = a.copy(), a.copy()
    pure_value(memory.copy_row)(b[1:], b[:-1])       # shifted overlap: element loop order
    memory.copy_row(c[1:], c[:-1])
    np.testing.assert_array_equal(b, c)


# --------------------------------------------------------- whole kernels in both tiers

def _kernel_cases(rng):
    from nki.kernels.attention import flash_attention_fwd
    from nki.kernels.matmul import matmul
    from nki.kernels.norms import layernorm, rmsnorm
    from nki.kernels.softmax import log_softmax, softmax_rows

    x = rng.standard_normal((256, 512)).astype(np.float32) * 4
    x[3, 5], x[7, :] = np.inf, -np.inf
    g, b = (rng.standard_normal(512).astype(np.float32) for _ in range(2))
    q, k, v = (rng.standard_normal((256, 64)).astype(np.float32) for _ in range(3))
    m1, m2 = (rng.standard_normal((128, 256)).astype(np.float32) for _ in range(2))
    return [("softmax", softmax_rows, (x,)), ("log_softmax", log_softmax, (x,)),
            ("layernorm", layernorm, (x, g, b)), ("rmsnorm", rmsnorm, (x, g)),
            ("attention", flash_attention_fwd, (q, k, v)), ("matmul", matmul, (m1, m2.T))]


def test_both_tiers_give_identical_results(rng, monkeypatch):
    for name, kernel, args in _kernel_cases(rng):
        outs = {}
        for mode in ("compiled", "python"):
            monkeypatch.setenv("NKI_TIER", mode)
            outs[mode] = np.asarray(kernel(*args))
        np.testing.assert_array_equal(outs["python"].view(np.uint8),
                                      outs["compiled"].view(np.uint8), err_msg=name)


def _activation_kernel(op, affine: bool, dst_dtype):
    """One ``nisa.activation`` with ``op``: ``op(x * 0.5 + bias)`` when ``affine`` (rows of
    512+ go row by row: exp through ``exp_affine``), else ``op(x)`` on the whole tile."""
    import nki.isa as nisa
    import nki.language as nl

    def act(x, bias):
        out = nl.ndarray(x.shape, dtype=dst_dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        y = nl.ndarray(x.shape, dtype=dst_dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        if affine:
            b = nl.ndarray(bias.shape, dtype=bias.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=b, src=bias)
            nisa.activation(dst=y, op=op, data=t, bias=b, scale=0.5)
        else:
            nisa.activation(dst=y, op=op, data=t)
        nisa.dma_copy(dst=out, src=y)
        return out
    return act


_ACTIVATION_OPS = ["exp", "log", "sin", "cos", "tan", "arctan", "tanh", "sigmoid", "gelu",
                   "gelu_dx", "gelu_apprx_tanh", "gelu_apprx_sigmoid", "silu", "erf",
                   "softplus", "mish", "rsqrt", "reciprocal"]


def test_activations_give_identical_results_in_both_tiers(rng, monkeypatch):
    """``nisa.activation`` end to end with each transcendental ``nl`` op: whole tiles, rows
    with a bias column (fp32 exp: ``exp_affine``) and a bf16 result, in both tiers."""
    import nki
    import nki.language as nl

    x = (rng.standard_normal((128, 512)) * 6).astype(np.float32)
    x[0, :64] = _special_floats(rng, 64)
    bias = rng.standard_normal((128, 1)).astype(np.float32)
    for name in _ACTIVATION_OPS:
        for affine, dst, data in ((False, nl.float32, x[:, :64]), (True, nl.float32, x),
                                  (True, nl.bfloat16, x)):
            kernel = _activation_kernel(getattr(nl, name), affine, dst)
            outs = {}
            for mode in ("compiled", "python"):
                monkeypatch.setenv("NKI_TIER", mode)
                outs[mode] = np.asarray(nki.jit(kernel)(data, bias))
            np.testing.assert_array_equal(outs["python"].view(np.uint8),
                                          outs["compiled"].view(np.uint8),
                                          err_msg=f"{name} affine={affine} {dst}")


# ------------------------------------------------------------------------- the switch

def test_tier_switch(monkeypatch):
    monkeypatch.setenv("NKI_TIER", "compiled")
    assert tier.choose({0}) == "numba"
    monkeypatch.setenv("NKI_TIER", "python")
    assert tier.choose({0}) == "pure"
    monkeypatch.setenv("NKI_TIER", "auto")
    monkeypatch.setattr(tier, "helpers_ready", lambda used: True)
    assert tier.choose({0}) == "numba"
    monkeypatch.setenv("NKI_TIER", "fast")
    with pytest.raises(ValueError, match="NKI_TIER must be one of auto, compiled, python"):
        config.tier()


def test_only_the_auto_tier_switches_a_python_run(monkeypatch):
    """NKI_TIER=python always runs the compile-free tier, however long a run takes (a run
    past the switch's first poll went on compiled, and a tier comparison compared nothing)."""
    monkeypatch.setattr(tier, "helpers_ready", lambda used: True)
    monkeypatch.setenv("NKI_TIER", "python")
    assert tier.switch_check([]) is None
    monkeypatch.setenv("NKI_TIER", "auto")
    assert tier.switch_check([])()


def _gelu_chain(x):
    """Many per-element transcendentals: ~1 s interpreted, milliseconds compiled."""
    import nki.isa as nisa
    import nki.language as nl

    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    for _ in nl.sequential_range(400):
        nisa.activation(dst=t, op=nl.gelu, data=t)
    nisa.dma_copy(dst=out, src=t)
    return out


def _switch_after(polls: int, seen: list):
    def check():
        seen.append(1)
        return len(seen) > polls
    return check


@pytest.mark.parametrize("polls", [0, 10 ** 6])
def test_a_python_run_stops_and_reruns_compiled_once_the_helpers_are_ready(
        monkeypatch, capfd, polls):
    """polls=0: ready at the first poll, so the run stops and the call runs again compiled;
    polls=10**6: never ready, the interpreted run finishes. The same result either way.
    (Polled every 0.5 ms here, so the first poll comes long before 400 interpreted GELUs end.)"""
    import nki
    from nki.sim import runtime

    monkeypatch.setattr(runtime, "_SWITCH_POLL_S", 0.0005)
    x = np.random.default_rng(5).standard_normal((128, 512)).astype(np.float32)
    monkeypatch.setenv("NKI_TIER", "compiled")
    want = nki.jit(_gelu_chain)(x)
    monkeypatch.setenv("NKI_TIER", "auto")
    seen: list = []
    monkeypatch.setattr(tier, "tier_of_call", lambda programs: "pure")
    monkeypatch.setattr(tier, "switch_check", lambda programs: _switch_after(polls, seen))
    got = nki.jit(_gelu_chain)(x[:, :64] if polls else x)
    err = capfd.readouterr().err
    if polls:
        ref = nki.jit(_gelu_chain, backend="python")(x[:, :64])
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
        assert "runs again" not in err
    else:
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        assert "the compiled helpers are ready; _gelu_chain runs again on them" in err
        assert seen, "the switch was never polled"


# ---------------------------------------------- a cold process: no compile, prompt exit

_COLD = textwrap.dedent("""
    import numba.core.dispatcher as d
    import numpy as np
    def refuse(self, sig):
        raise AssertionError("Numba compiled " + self.py_func.__name__)
    d.Dispatcher.compile = refuse
    from nki.kernels.softmax import softmax_rows, softmax_reference
    x = np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32)
    err = np.abs(softmax_rows(x) - softmax_reference(x)).max()
    print("ERR", err)
""")


def test_cold_call_compiles_nothing_and_exit_does_not_wait_for_the_builder(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "NKI_CACHE_DIR": "",
           "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "NKI_TIER": "auto"}
    done = subprocess.run([sys.executable, "-c", _COLD], env=env, capture_output=True,
                          text=True, timeout=300)
    builders = [int(p) for p in re.findall(r"background \(pid (\d+)", done.stderr)]
    try:
        assert done.returncode == 0, done.stderr
        assert float(done.stdout.split("ERR")[1]) < 1e-6
        assert "compile in the background (pid" in done.stderr
        assert builders
        os.kill(builders[0], 0)       # the builder outlived its caller, which exited
    finally:
        for pid in builders:          # its own session: stop it and its workers
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
