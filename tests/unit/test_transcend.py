"""Accuracy and mode bit-identity of nki.sim.transcend.

Errors are counted in float32 steps between the result and the float64 reference rounded to
float32. BOUNDS are the worst cases measured by offline sweeps over every 127th float32 bit
pattern (plus the samples below); the functions' docstrings quote the same numbers. Compiled
code is checked on large samples; the interpreted ``py_func`` (slow: numpy scalars) on a
subset, where it must also reproduce the compiled bits exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import erf, expit, ndtr

from nki.sim import transcend as tr

A = 1.702
K = np.sqrt(2 / np.pi)


def _gelu_tanh(x):
    return x * expit(2 * K * (x + 0.044715 * x**3))  # = 0.5x(1+tanh(u)), no cancellation


REFS = {
    "exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "arctan": np.arctan, "tanh": np.tanh, "sigmoid": expit, "erf": erf,
    "softplus": lambda x: np.logaddexp(0, x),
    "silu": lambda x: x * expit(x),
    "gelu": lambda x: x * ndtr(x),
    "gelu_apprx_tanh": _gelu_tanh,
    "gelu_apprx_sigmoid": lambda x: x * expit(A * x),
    "mish": lambda x: x * np.tanh(np.logaddexp(0, x)),
    "gelu_dx": lambda x: ndtr(x) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi),
    "silu_dx": lambda x: expit(x) * (1 + x * expit(-x)),
    "erf_dx": lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x),
    "gelu_apprx_sigmoid_dx": lambda x: expit(A * x) * (1 + A * x * expit(-A * x)),
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "reciprocal": lambda x: 1 / x,
}

# Worst error in float32 steps (ulp) over all finite inputs (trig: |x| < 4e8).
BOUNDS = {
    "exp": 1, "log": 1, "sin": 1, "cos": 1, "tan": 2, "arctan": 2, "tanh": 1, "sigmoid": 2,
    "erf": 1, "softplus": 2, "silu": 3, "gelu": 2, "gelu_apprx_tanh": 3,
    "gelu_apprx_sigmoid": 3, "mish": 4, "gelu_dx": 6, "silu_dx": 5, "erf_dx": 2,
    "gelu_apprx_sigmoid_dx": 5, "rsqrt": 1, "reciprocal": 0,
}

# Where each function does something interesting (uniform samples are drawn there).
FOCUS = {
    "exp": (-105, 90), "log": (0, 4), "sin": (-1e5, 1e5), "cos": (-1e5, 1e5), "tan": (-10, 10),
    "arctan": (-5, 5), "tanh": (-10, 10), "sigmoid": (-110, 30), "erf": (-4.5, 4.5),
    "softplus": (-110, 30), "silu": (-120, 20), "gelu": (-16, 8), "gelu_apprx_tanh": (-12, 8),
    "gelu_apprx_sigmoid": (-70, 10), "mish": (-120, 20), "gelu_dx": (-16, 8),
    "silu_dx": (-120, 20), "erf_dx": (-11, 11), "gelu_apprx_sigmoid_dx": (-70, 10),
    "rsqrt": (0, 10), "reciprocal": (-10, 10),
}
ROOTS = {"gelu_dx": -0.7517915, "silu_dx": -1.2784645, "gelu_apprx_sigmoid_dx": -0.7511542}

NAMES = list(REFS)
assert sorted(NAMES) == sorted(tr.__all__)


def _ordered(a: np.ndarray) -> np.ndarray:
    i = a.view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def ulp_error(y: np.ndarray, ref64: np.ndarray) -> np.ndarray:
    """Float32 steps between ``y`` and the rounded reference (NaN must match NaN)."""
    with np.errstate(all="ignore"):
        r32 = ref64.astype(np.float32)
    d = np.abs(_ordered(y) - _ordered(r32))
    ny, nr = np.isnan(y), np.isnan(r32)
    return np.where(ny | nr, np.where(ny & nr, 0, 1 << 40), d)


def _sample(name: str, n_bits: int, n_focus: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 1 << 32, n_bits, dtype=np.uint64).astype(np.uint32).view(np.float32)
    lo, hi = FOCUS[name]
    parts = [bits, rng.uniform(lo, hi, n_focus).astype(np.float32),
             rng.standard_normal(n_focus).astype(np.float32)]
    if name in ROOTS:  # every float32 within ~1e-5 of the root
        r = np.float32(ROOTS[name])
        steps = np.arange(-200, 200, dtype=np.int32)
        parts.append((r.view(np.int32) + steps).view(np.float32))
    x = np.concatenate(parts)
    x = x[np.isfinite(x)]
    if name in ("sin", "cos", "tan"):
        x = x[np.abs(x) < 4e8]
    return x


@pytest.fixture(scope="module", params=NAMES)
def case(request) -> tuple[str, np.ndarray, np.ndarray]:
    name = request.param
    x = _sample(name, 150_000, 150_000, seed=len(name))
    y = getattr(tr, name)(x)
    return name, x, y


def test_accuracy_compiled(case) -> None:
    name, x, y = case
    with np.errstate(all="ignore"):
        err = ulp_error(y, REFS[name](x.astype(np.float64)))
    worst = int(err.max())
    assert worst <= BOUNDS[name], f"{name}: {worst} ulp at x={x[np.argmax(err)]!r}"


def test_interpreted_matches_compiled(case) -> None:
    """``py_func`` gives the compiled bits (hence the same accuracy)."""
    name, x, y = case
    rng = np.random.default_rng(99)
    idx = rng.choice(x.size, 1500, replace=False)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3e38, -3e38],
                        np.float32)
    xs = np.concatenate([x[idx], specials])
    with np.errstate(all="ignore"):
        got = getattr(tr, name).py_func(xs)
    np.testing.assert_array_equal(got.view(np.uint32), getattr(tr, name)(xs).view(np.uint32))


NAN = np.nan
INF = np.inf
PIO2 = float(np.float32(np.pi / 2))
# f(nan), f(inf), f(-inf), f(0), f(-0): limits where the formula itself would give NaN.
SPECIAL = {
    "exp": (NAN, INF, 0.0, 1.0, 1.0), "log": (NAN, INF, NAN, -INF, -INF),
    "sin": (NAN, NAN, NAN, 0.0, -0.0), "cos": (NAN, NAN, NAN, 1.0, 1.0),
    "tan": (NAN, NAN, NAN, 0.0, -0.0), "arctan": (NAN, PIO2, -PIO2, 0.0, -0.0),
    "tanh": (NAN, 1.0, -1.0, 0.0, -0.0), "sigmoid": (NAN, 1.0, 0.0, 0.5, 0.5),
    "erf": (NAN, 1.0, -1.0, 0.0, -0.0),
    "softplus": (NAN, INF, 0.0, float(np.float32(np.log(2))), float(np.float32(np.log(2)))),
    "silu": (NAN, INF, -0.0, 0.0, -0.0), "gelu": (NAN, INF, -0.0, 0.0, -0.0),
    "gelu_apprx_tanh": (NAN, INF, -0.0, 0.0, -0.0),
    "gelu_apprx_sigmoid": (NAN, INF, -0.0, 0.0, -0.0), "mish": (NAN, INF, -0.0, 0.0, -0.0),
    "gelu_dx": (NAN, 1.0, -0.0, 0.5, 0.5), "silu_dx": (NAN, 1.0, -0.0, 0.5, 0.5),
    "erf_dx": (NAN, 0.0, 0.0, float(np.float32(2 / np.sqrt(np.pi))),
               float(np.float32(2 / np.sqrt(np.pi)))),
    "gelu_apprx_sigmoid_dx": (NAN, 1.0, -0.0, 0.5, 0.5),
    "rsqrt": (NAN, 0.0, NAN, INF, -INF), "reciprocal": (NAN, 0.0, -0.0, INF, -INF),
}


@pytest.mark.parametrize("mode", ["jit", "py"])
@pytest.mark.parametrize("name", NAMES)
def test_special_values(name: str, mode: str) -> None:
    fn = getattr(tr, name)
    fn = fn if mode == "jit" else fn.py_func
    x = np.array([NAN, INF, -INF, 0.0, -0.0], np.float32)
    with np.errstate(all="ignore"):
        got = fn(x)
    want = np.array(SPECIAL[name], np.float32)
    # Bit comparison keeps the sign of zero; NaN only needs to be a NaN.
    nan = np.isnan(want)
    assert np.isnan(got[nan]).all(), got
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


@pytest.mark.parametrize("name", NAMES)
def test_shapes(name: str) -> None:
    fn = getattr(tr, name)
    x = np.random.default_rng(5).uniform(0.1, 3, (3, 4, 5)).astype(np.float32)
    flat = fn(x.ravel())
    for arr, ref in ((x, flat.reshape(x.shape)), (x[0], flat[:20].reshape(4, 5))):
        got = fn(arr)
        assert got.shape == arr.shape and got.dtype == np.float32
        np.testing.assert_array_equal(got, ref)
    assert fn(x[:, ::2]).shape == (3, 2, 5)  # non-contiguous input is copied


def test_trig_large_arguments() -> None:
    """Reduction holds up where float32 Cody-Waite would not: |x| up to 4e8."""
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.uniform(-4e8, 4e8, 200_000), rng.uniform(-1e5, 1e5, 200_000)])
    x = x.astype(np.float32)
    # Near multiples of pi/2 the result has the most cancellation.
    k = np.arange(1, 60000, dtype=np.float64)
    near = (k * np.pi / 2).astype(np.float32)
    for name, ref in (("sin", np.sin), ("cos", np.cos), ("tan", np.tan)):
        for xs in (x, near):
            err = ulp_error(getattr(tr, name)(xs), ref(xs.astype(np.float64)))
            assert err.max() <= BOUNDS[name], (name, xs[np.argmax(err)])


def test_gelu_dense_sweep_within_2_ulp() -> None:
    """gelu over every 509th float32 with |x| < 20 (beyond, it is x or -0 exactly), both
    tails and the series near 0 included: within 2 ulp of float64 x Phi(x); py_func gives the
    compiled bits on a subset."""
    bits = np.arange(0, 1 << 32, 509, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = bits[np.abs(bits) < 20]
    y = tr.gelu(x)
    err = ulp_error(y, x.astype(np.float64) * ndtr(x.astype(np.float64)))
    assert err.max() <= 2, x[np.argmax(err)]
    sub = x[::997]
    np.testing.assert_array_equal(tr.gelu.py_func(sub).view(np.uint32),
                                  y[::997].view(np.uint32))
