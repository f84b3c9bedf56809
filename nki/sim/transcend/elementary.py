"""Elementary functions: exp, log, sin, cos, tan, arctan, tanh, rsqrt, reciprocal."""

from __future__ import annotations

import numpy as np
from numba import njit

from nki.sim.transcend.base import (
    _A1,
    _A2,
    _A3,
    _A4,
    _A5,
    _A6,
    _EXP_MAX,
    _EXP_MIN,
    _INF,
    _NAN,
    _ONE,
    _PIO2_F_HI,
    _PIO2_F_LO,
    _PIO4_F_HI,
    _PIO4_F_LO,
    _T1,
    _T2,
    _T3,
    _T4,
    _T5,
    _T6,
    _TAN3PI8,
    _TANH_BIG,
    _TANH_SMALL,
    _TANPI8,
    _TRIG_TINY,
    _TWO,
    _ZERO,
    F,
    _cos_poly,
    _exp_parts,
    _kernel,
    _log_core,
    _pow2,
    _sin_poly,
    _trig_reduce,
)


@_kernel
def _exp_k(x: np.float32) -> np.float32:
    if x != x:
        return x
    if x > _EXP_MAX:
        return _INF
    if x < _EXP_MIN:
        return _ZERO
    p, k = _exp_parts(x, _ZERO)
    return _pow2(p, k)


@_kernel
def _log_k(x: np.float32) -> np.float32:
    r = _log_core(x)
    if x == _INF:
        r = x
    if x == _ZERO:
        r = -_INF
    if x < _ZERO:
        r = _NAN
    if x != x:
        r = x
    return r


@_kernel
def _sin_k(x: np.float32) -> np.float32:
    if abs(x) < _TRIG_TINY:
        return x  # also keeps the sign of -0
    if abs(x) == _INF:
        return _NAN
    hi, lo, q = _trig_reduce(x)
    r = _sin_poly(hi, lo) if (q & 1) == 0 else _cos_poly(hi, lo)
    return -r if q >= 2 else r


@_kernel
def _cos_k(x: np.float32) -> np.float32:
    if abs(x) < _TRIG_TINY:
        return _ONE
    if abs(x) == _INF:
        return _NAN
    hi, lo, q = _trig_reduce(x)
    r = _cos_poly(hi, lo) if (q & 1) == 0 else _sin_poly(hi, lo)
    return -r if (q == 1 or q == 2) else r


@_kernel
def _tan_k(x: np.float32) -> np.float32:
    if abs(x) < _TRIG_TINY:
        return x
    if abs(x) == _INF:
        return _NAN
    hi, lo, q = _trig_reduce(x)
    s = _sin_poly(hi, lo)
    c = _cos_poly(hi, lo)
    return s / c if (q & 1) == 0 else -c / s


@_kernel
def _arctan_k(x: np.float32) -> np.float32:
    ax = abs(x)
    if not ax >= _TRIG_TINY:  # tiny, +-0 or NaN: atan(x) rounds to x
        return x
    if ax > _TAN3PI8:
        t = -_ONE / ax
        yh, yl = _PIO2_F_HI, _PIO2_F_LO
    elif ax > _TANPI8:
        t = (ax - _ONE) / (ax + _ONE)
        yh, yl = _PIO4_F_HI, _PIO4_F_LO
    else:
        t = ax
        yh, yl = _ZERO, _ZERO
    z = t * t
    a = z * (_A1 + z * (_A2 + z * (_A3 + z * (_A4 + z * (_A5 + z * _A6)))))
    r = yh + (t + (t * a + yl))
    return -r if x < _ZERO else r


@_kernel
def _tanh_k(x: np.float32) -> np.float32:
    ax = abs(x)
    if not ax >= _TANH_SMALL:  # also NaN and +-0
        z = x * x
        r = x + x * z * (_T1 + z * (_T2 + z * (_T3 + z * (_T4 + z * (_T5 + z * _T6)))))
        return x if x == _ZERO else r  # -0 + (-0 * negative) would lose the sign of -0
    r = _ONE
    if ax < _TANH_BIG:
        r = _ONE - _TWO / (_exp_k(ax + ax) + _ONE)
    return -r if x < _ZERO else r


@_kernel
def _rsqrt_k(x: np.float32) -> np.float32:
    if x < _ZERO:
        return _NAN
    return _ONE / np.sqrt(x)


@_kernel
def _reciprocal_k(x: np.float32) -> np.float32:
    return _ONE / x



# ---------------------------------------------------------------- public functions


@njit(cache=True, nogil=True, error_model="numpy")
def exp(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """e**x.

    Max error 1 ulp. inf above 88.72283 (the last finite float32), 0 below -103.97, exact
    subnormal results (one rounding).

    Args:
        x: float32 array of any rank >= 1.
        out: optional 1-D float32 array of ``x.size`` elements to write into (it may be
            ``x``'s own memory: every element is read before it is written).

    Returns:
        ``out`` (a new array when omitted) in ``x``'s shape.
    """
    flat = x.ravel()
    if out is None:
        out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _exp_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def exp_affine(x: np.ndarray, out: np.ndarray, use_scale: int, s: np.float32, use_bias: int,
               b: np.float32) -> None:
    """``out = exp(x * s + b)`` over two 1-D float32 rows (each step only when used; ``out``
    may be ``x`` itself): the activation's affine step and its exp in one pass, the same two
    fp32 roundings in the same order (no FMA) and then :func:`exp`'s bits. Saves the
    temporary row and a call per row (a [128, 1024] exp with a bias column: 49 -> 35 us)."""
    for i in range(out.size):
        z = x[i]
        if use_scale == 1:
            z = z * s
        if use_bias == 1:
            z = z + b
        out[i] = _exp_k(F(z))


@njit(cache=True, nogil=True, error_model="numpy")
def log(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Natural logarithm.

    Max error 1 ulp, subnormal inputs included. log(+-0) = -inf, log(x < 0) = NaN,
    log(inf) = inf.

    Args:
        x: float32 array of any rank >= 1.
        out: optional 1-D float32 array of ``x.size`` elements to write into (it may be
            ``x``'s own memory: every element is read before it is written).

    Returns:
        ``out`` (a new array when omitted) in ``x``'s shape.
    """
    flat = x.ravel()
    if out is None:
        out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _log_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def sin(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Sine.

    Max error 1 ulp for |x| < 4e8 (float64 argument reduction); beyond that the result is
    still in [-1, 1] but not accurate. sin(+-inf) = NaN; sin(-0) = -0.

    Args:
        x: float32 array of any rank >= 1.
        out: optional 1-D float32 array of ``x.size`` elements to write into (it may be
            ``x``'s own memory: every element is read before it is written).

    Returns:
        ``out`` (a new array when omitted) in ``x``'s shape.
    """
    flat = x.ravel()
    if out is None:
        out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _sin_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def cos(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Cosine.

    Max error 1 ulp for |x| < 4e8 (float64 argument reduction); beyond that the result is
    still in [-1, 1] but not accurate. cos(+-inf) = NaN.

    Args:
        x: float32 array of any rank >= 1.
        out: optional 1-D float32 array of ``x.size`` elements to write into (it may be
            ``x``'s own memory: every element is read before it is written).

    Returns:
        ``out`` (a new array when omitted) in ``x``'s shape.
    """
    flat = x.ravel()
    if out is None:
        out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _cos_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def tan(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Tangent, as sin/cos (or -cos/sin) of the reduced argument.

    Max error 2 ulp for |x| < 4e8. tan(+-inf) = NaN; tan(-0) = -0.

    Args:
        x: float32 array of any rank >= 1.
        out: optional 1-D float32 array of ``x.size`` elements to write into (it may be
            ``x``'s own memory: every element is read before it is written).

    Returns:
        ``out`` (a new array when omitted) in ``x``'s shape.
    """
    flat = x.ravel()
    if out is None:
        out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _tan_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def arctan(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Arctangent.

    Max error 2 ulp. arctan(+-inf) = +-pi/2 (rounded to float32).

    Args:
        x: float32 array of any rank >= 1.
        out: optional 1-D float32 array of ``x.size`` elements to write into (it may be
            ``x``'s own memory: every element is read before it is written).

    Returns:
        ``out`` (a new array when omitted) in ``x``'s shape.
    """
    flat = x.ravel()
    if out is None:
        out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _arctan_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def tanh(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Hyperbolic tangent.

    Max error 1 ulp. +-1 beyond |x| = 9.1; tanh(-0) = -0.

    Args:
        x: float32 array of any rank >= 1.
        out: optional 1-D float32 array of ``x.size`` elements to write into (it may be
            ``x``'s own memory: every element is read before it is written).

    Returns:
        ``out`` (a new array when omitted) in ``x``'s shape.
    """
    flat = x.ravel()
    if out is None:
        out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _tanh_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def rsqrt(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """1 / sqrt(x): two correctly rounded steps.

    Max error 1 ulp. rsqrt(0) = inf, rsqrt(-0) = -inf, rsqrt(x < 0) = NaN.

    Args:
        x: float32 array of any rank >= 1.
        out: optional 1-D float32 array of ``x.size`` elements to write into (it may be
            ``x``'s own memory: every element is read before it is written).

    Returns:
        ``out`` (a new array when omitted) in ``x``'s shape.
    """
    flat = x.ravel()
    if out is None:
        out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _rsqrt_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def reciprocal(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """1 / x, correctly rounded (0 ulp); 1/+-0 = +-inf.

    Args:
        x: float32 array of any rank >= 1.
        out: optional 1-D float32 array of ``x.size`` elements to write into (it may be
            ``x``'s own memory: every element is read before it is written).

    Returns:
        ``out`` (a new array when omitted) in ``x``'s shape.
    """
    flat = x.ravel()
    if out is None:
        out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _reciprocal_k(F(flat[i]))
    return out.reshape(x.shape)

