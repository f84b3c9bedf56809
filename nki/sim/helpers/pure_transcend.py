"""numpy twins of the per-element transcendentals (``nki.sim.transcend``) for the pure tier.

Each ``_*_v`` function replays one scalar kernel's fp32 steps on whole float32 arrays, in the
same order with the same roundings (numpy rounds every float32 operation, and there is no
FMA), its branches computed on every element and then selected with ``np.where``; unselected
lanes may hold garbage (NaN, a wrapped integer), so the twins run under
``np.errstate(all="ignore")``. The branch-free building blocks of ``transcend.base``
(``_exp_parts``, ``_expm1_parts``, ``_pow2``, ``_two_prod``, ``_trig_reduce``, ``_sin_poly``,
``_cos_poly``, ``_gauss_g``, ``_root_poly``, ``_mul_a``, ``_gauss_tail``) are plain Python whose
every step is a numpy operation, so they are called as they are, on arrays; only the kernels
with branches are written again here. ``tests/unit/test_tiers.py`` compares each twin's bits
with its compiled loop.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nki.sim.helpers.pure import vectorised
from nki.sim.transcend import activations as act
from nki.sim.transcend import base as b

_ELEM = "nki.sim.transcend.elementary"
_ACT = "nki.sim.transcend.activations"
_I0 = np.int32(0)


def _isnan_keep(x, r):
    """``if x != x: r = x`` (the kernels' NaN pass-through)."""
    return np.where(x != x, x, r)


def _clip(x, lo, hi):
    """``base._clip``: ``x`` clamped to ``[lo, hi]``, NaN to ``lo``."""
    y = np.where(x > lo, x, lo)
    return np.where(y < hi, y, hi)


def _exp_neg_abs(x):
    """``exp(-|x|) = p * 2**k`` as ``_softplus_k`` and ``_mish_k`` start:
    ``_exp_parts(-_clip(abs(x), 0, _SIG_ARG_MAX), 0)``."""
    return b._exp_parts(-_clip(np.abs(x), b._ZERO, b._SIG_ARG_MAX), b._ZERO)


def _exp_v(x):
    """``elementary._exp_k`` on arrays."""
    inside = (x >= b._EXP_MIN) & (x <= b._EXP_MAX)      # False for NaN too
    p, k = b._exp_parts(np.where(inside, x, b._ZERO), b._ZERO)
    r = b._pow2(p, k)
    r = np.where(x < b._EXP_MIN, b._ZERO, r)
    r = np.where(x > b._EXP_MAX, b._INF, r)
    return _isnan_keep(x, r)


def _log_core_v(x):
    """``base._log_core`` on arrays (garbage where ``x`` is not finite and positive)."""
    small = x < b._MIN_NORMAL
    xs = np.where(small, x * b._TWO_23, x)
    bits = xs.view(np.int32)
    mant = bits & np.int32(0x7FFFFF)
    ei = (bits >> 23) - np.where(small, np.int32(150), np.int32(127))
    up = mant > b._SQRT2_MANT
    mant = np.where(up, mant - np.int32(0x800000), mant)
    ei = ei + up.astype(np.int32)
    m = (mant + np.int32(0x3F800000)).astype(np.int32).view(np.float32)
    f = m - b._ONE
    s = f / (b._TWO + f)
    z = s * s
    r = z * (b._L1 + z * (b._L2 + z * (b._L3 + z * b._L4)))
    hfsq = b._HALF * f * f
    fe = ei.astype(np.float32)
    return fe * b._LN2_HI_L - ((hfsq - (s * (hfsq + r) + fe * b._LN2_LO_L)) - f)


def _log_v(x):
    """``elementary._log_k`` on arrays."""
    r = _log_core_v(x)
    r = np.where(x == b._INF, x, r)
    r = np.where(x == b._ZERO, -b._INF, r)
    r = np.where(x < b._ZERO, b._NAN, r)
    return _isnan_keep(x, r)


def _log1p_v(u):
    """``base._log1p_k`` on arrays."""
    w = b._ONE + u
    return _log_core_v(w) + (u - (w - b._ONE)) / w


def _trig_parts(x):
    """``base._trig_reduce`` and both polynomials of the reduced argument: ``(q, sin, cos)``."""
    hi, lo, q = b._trig_reduce(x)
    return q, b._sin_poly(hi, lo), b._cos_poly(hi, lo)


def _trig_ends(x, r, tiny):
    """The trigonometric kernels' first two cases: ``tiny`` below ``_TRIG_TINY``, NaN at
    +-inf, else ``r``."""
    ax = np.abs(x)
    r = np.where(ax == b._INF, b._NAN, r)
    return np.where(ax < b._TRIG_TINY, tiny, r)


def _sin_v(x):
    """``elementary._sin_k`` on arrays."""
    q, s, c = _trig_parts(x)
    r = np.where((q & 1) == 0, s, c)
    return _trig_ends(x, np.where(q >= 2, -r, r), x)


def _cos_v(x):
    """``elementary._cos_k`` on arrays."""
    q, s, c = _trig_parts(x)
    r = np.where((q & 1) == 0, c, s)
    return _trig_ends(x, np.where((q == 1) | (q == 2), -r, r), b._ONE)


def _tan_v(x):
    """``elementary._tan_k`` on arrays."""
    q, s, c = _trig_parts(x)
    return _trig_ends(x, np.where((q & 1) == 0, s / c, -c / s), x)


def _arctan_v(x):
    """``elementary._arctan_k`` on arrays: the three reductions selected per element."""
    ax = np.abs(x)
    big = ax > b._TAN3PI8
    mid = ~big & (ax > b._TANPI8)
    t = np.where(big, -b._ONE / ax, np.where(mid, (ax - b._ONE) / (ax + b._ONE), ax))
    yh = np.where(big, b._PIO2_F_HI, np.where(mid, b._PIO4_F_HI, b._ZERO))
    yl = np.where(big, b._PIO2_F_LO, np.where(mid, b._PIO4_F_LO, b._ZERO))
    z = t * t
    a = z * (b._A1 + z * (b._A2 + z * (b._A3 + z * (b._A4 + z * (b._A5 + z * b._A6)))))
    r = yh + (t + (t * a + yl))
    r = np.where(x < b._ZERO, -r, r)
    return np.where(ax >= b._TRIG_TINY, r, x)


def _tanh_v(x):
    """``elementary._tanh_k`` on arrays."""
    ax = np.abs(x)
    z = x * x
    t = b._T1 + z * (b._T2 + z * (b._T3 + z * (b._T4 + z * (b._T5 + z * b._T6))))
    small = np.where(x == b._ZERO, x, x + x * z * t)
    big = np.where(ax < b._TANH_BIG, b._ONE - b._TWO / (_exp_v(ax + ax) + b._ONE), b._ONE)
    big = np.where(x < b._ZERO, -big, big)
    return np.where(ax >= b._TANH_SMALL, big, small)


def _rsqrt_v(x):
    """``elementary._rsqrt_k`` on arrays."""
    return np.where(x < b._ZERO, b._NAN, b._ONE / np.sqrt(x))


def _reciprocal_v(x):
    """``elementary._reciprocal_k`` on arrays."""
    return b._ONE / x


# ------------------------------------------------------------------ activations


def _neg_abs_arg(hi, lo):
    """The common start of ``base._sigmoid_parts`` and ``base._sig_dx``: whether ``hi < 0``
    and ``-|hi + lo|`` as a pair, clamped to ``-_SIG_ARG_MAX``."""
    neg = hi < b._ZERO
    ah = np.where(neg, hi, -hi)
    al = np.where(neg, lo, -lo)
    low = ah < -b._SIG_ARG_MAX
    return neg, np.where(low, -b._SIG_ARG_MAX, ah), np.where(low, b._ZERO, al)


def _sigmoid_parts_v(hi, lo):
    """``base._sigmoid_parts`` on arrays: ``(m, k)``."""
    neg, ah, al = _neg_abs_arg(hi, lo)
    p, k = b._exp_parts(ah, al)
    d = b._ONE + b._pow2(p, k)
    return np.where(neg, p / d, b._ONE / d), np.where(neg, k, _I0)


def _sig_dx_v(yh, yl):
    """``base._sig_dx`` on arrays."""
    neg, ah, al = _neg_abs_arg(yh, yl)
    y = np.where(yh > b._TAIL, yh, b._TAIL)
    y = np.where(y < -b._TAIL, y, -b._TAIL)
    p, k = b._exp_parts(ah, al)
    e = b._pow2(p, k)
    d = b._ONE + e
    return np.where(neg, b._pow2(p * ((d + y) / (d * d)), k), (d + y * e) / (d * d))


def _root_window(x, r, lo, hi, at, coef):
    """``if lo <= x <= hi: r = _root_poly(_clip(x, lo, hi), at, coef)`` (the ``*_dx``
    kernels' root windows)."""
    near = (lo <= x) & (x <= hi)
    return np.where(near, b._root_poly(_clip(x, lo, hi), at, coef), r)


def _sigmoid_v(x):
    """``activations._sigmoid_k`` on arrays."""
    m, k = _sigmoid_parts_v(x, b._ZERO)
    return _isnan_keep(x, b._pow2(m, k))


def _silu_v(x):
    """``activations._silu_k`` on arrays."""
    m, k = _sigmoid_parts_v(x, b._ZERO)
    r = np.where(x < b._TAIL, -b._ZERO, b._pow2(x * m, k))
    return np.where((x != x) | (x == b._INF), x, r)


def _softplus_v(x):
    """``activations._softplus_k`` on arrays."""
    p, k = _exp_neg_abs(x)
    r = _log1p_v(b._pow2(p, k))
    return _isnan_keep(x, np.where(x > b._ZERO, x + r, r))


def _mish_v(x):
    """``activations._mish_k`` on arrays."""
    p, k = _exp_neg_abs(x)
    f = b._pow2(p, k)
    u = b._ONE + b._TWO * f
    r = x * (u / (u + b._TWO * f * f))
    tail = (f + b._TWO) / (f * (f + b._TWO) + b._TWO)
    r = np.where(x <= b._ZERO, b._pow2(_clip(x, b._TAIL, b._INF) * p * tail, k), r)
    return _isnan_keep(x, r)


def _erf_v(x):
    """``activations._erf_k(x, _gauss_g(_erf_t(x)))`` (``erf``'s loop) on arrays."""
    a = _clip(np.abs(x), b._ONE, b._ERF_ONE)
    g = b._gauss_g(a * b._SQRT2)
    z = x * x
    q = b._Q0 + z * (b._Q1 + z * (b._Q2 + z * (b._Q3 + z * (b._Q4 + z * (b._Q5 + z * b._Q6)))))
    small = x + x * (b._EFX + z * q)
    qh, ql = b._two_prod(a, a)
    p, k = b._exp_parts(-qh, -ql)
    big = b._ONE - b._pow2(b._TWO * p * g, k)
    big = np.where(x < b._ZERO, -big, big)
    return np.where(np.abs(x) >= b._ONE, big, small)


def _gelu_v(x):
    """``activations._gelu_k(x, _gauss_g(_gelu_t(x)), _gelu_near0(x))`` (``gelu``'s loop)
    on arrays."""
    xc = _clip(x, -b._GELU_TAIL, b._GELU_TAIL)
    g = b._gauss_g(np.abs(xc))
    h, hl = b._two_prod(xc, xc)
    q, k = b._expm1_parts(-b._HALF * h, -b._HALF * hl)
    a, al = b._two_prod(xc, g)
    phi, xphi = (b._ONE + q) * g, a + (al + a * q)
    pos = x > b._ZERO
    w = b._pow2(np.where(pos, phi, xphi), k)
    r = np.where(pos, x * (b._ONE - w), w)
    r = np.where(np.abs(x) < act._GELU_SERIES, act._gelu_near0(x), r)
    return _isnan_keep(x, np.where(x == b._ZERO, x, r))


def _gelu_dx_v(x):
    """``activations._gelu_dx_k(x, _gauss_g(_gelu_t(x)))`` (``gelu_dx``'s loop) on arrays."""
    xc = _clip(x, -b._GELU_TAIL, b._GELU_TAIL)
    ax = np.abs(xc)
    g = b._gauss_g(ax)
    p, k = b._gauss_tail(xc)
    r = b._ONE + b._pow2(p * (xc * b._INV_SQRT2PI - g), k)
    r = np.where(x <= b._ZERO, b._pow2(p * (g - ax * b._INV_SQRT2PI), k), r)
    r = _root_window(x, r, b._GDX_LO_X, b._GDX_HI_X, b._GDX_ROOT_AT, b._GDX_ROOT)
    return _isnan_keep(x, r)


def _gelu_apprx_tanh_v(x):
    """``activations._gelu_apprx_tanh_k`` on arrays."""
    xc = _clip(x, -b._GTANH_TAIL, b._GTANH_TAIL)
    q, ql = b._two_prod(xc, xc)
    bh, bl = b._two_prod(b._K3_HI, q)
    bl = bl + (b._K3_HI * ql + b._K3_LO * q)
    s = b._K1_HI + bh
    bb = s - b._K1_HI
    lo = ((b._K1_HI - (s - bb)) + (bh - bb)) + (bl + b._K1_LO)
    wh = s + lo
    wl = lo - (wh - s)
    vh, vl = b._two_prod(xc, wh)
    m, k = _sigmoid_parts_v(vh, vl + xc * wl)
    return _isnan_keep(x, b._pow2(_clip(x, -b._GTANH_TAIL, b._INF) * m, k))


def _gelu_apprx_sigmoid_v(x):
    """``activations._gelu_apprx_sigmoid_k`` on arrays."""
    xl = _clip(x, -b._GSIG_TAIL, b._INF)
    yh, yl = b._mul_a(_clip(x, -b._GSIG_TAIL, b._GSIG_TAIL))
    m, k = _sigmoid_parts_v(yh, yl)
    return _isnan_keep(x, b._pow2(xl * m, k))


def _silu_dx_v(x):
    """``activations._silu_dx_k`` on arrays."""
    r = _sig_dx_v(x, b._ZERO)
    r = _root_window(x, r, b._SDX_LO_X, b._SDX_HI_X, b._SDX_ROOT_AT, b._SDX_ROOT)
    return _isnan_keep(x, r)


def _gelu_apprx_sigmoid_dx_v(x):
    """``activations._gelu_apprx_sigmoid_dx_k`` on arrays."""
    yh, yl = b._mul_a(_clip(x, -b._GSIG_TAIL, b._GSIG_TAIL))
    r = _root_window(x, _sig_dx_v(yh, yl), b._GSDX_LO_X, b._GSDX_HI_X, b._GSDX_ROOT_AT,
                     b._GSDX_ROOT)
    return _isnan_keep(x, r)


def _erf_dx_v(x):
    """``activations._erf_dx_k`` on arrays."""
    ax = np.abs(x)
    q, ql = b._two_prod(ax, ax)
    p, k = b._exp_parts(-q, -ql)
    r = np.where(ax > b._ERF_DX_TAIL, b._ZERO, b._pow2(b._TWO_OVER_SQRTPI * p, k))
    return _isnan_keep(x, r)


# ------------------------------------------------------------- the public functions


def _on_arrays(kernel: Callable, mirrors: str) -> Callable:
    """The twin of a public function ``mirrors`` whose loop is ``out[i] = kernel(F(x[i]))``:
    ``kernel``'s array form over the whole flattened input at once."""
    def twin(x, out=None):
        flat = x.ravel()
        if out is None:
            out = np.empty(flat.size, np.float32)
        with np.errstate(all="ignore"):
            out[:] = kernel(flat.astype(np.float32, copy=False))
        return out.reshape(x.shape)
    twin.__name__ = twin.__qualname__ = mirrors.rsplit(".", 1)[1]
    twin.__doc__ = f"``{mirrors}``: ``{kernel.__name__}`` on the whole array."
    return twin


_PUBLIC = [
    (_ELEM, "exp", _exp_v), (_ELEM, "log", _log_v), (_ELEM, "sin", _sin_v),
    (_ELEM, "cos", _cos_v), (_ELEM, "tan", _tan_v), (_ELEM, "arctan", _arctan_v),
    (_ELEM, "tanh", _tanh_v), (_ELEM, "rsqrt", _rsqrt_v),
    (_ELEM, "reciprocal", _reciprocal_v),
    (_ACT, "sigmoid", _sigmoid_v), (_ACT, "softplus", _softplus_v), (_ACT, "silu", _silu_v),
    (_ACT, "gelu_apprx_tanh", _gelu_apprx_tanh_v),
    (_ACT, "gelu_apprx_sigmoid", _gelu_apprx_sigmoid_v), (_ACT, "mish", _mish_v),
    (_ACT, "silu_dx", _silu_dx_v), (_ACT, "erf_dx", _erf_dx_v),
    (_ACT, "gelu_apprx_sigmoid_dx", _gelu_apprx_sigmoid_dx_v),
]
for _module, _name, _kernel in _PUBLIC:
    vectorised(_module, _name)(_on_arrays(_kernel, f"{_module}.{_name}"))

_TAIL_KERNELS = {act._ERF: _on_arrays(_erf_v, f"{_ACT}.erf"),
                 act._GELU: _on_arrays(_gelu_v, f"{_ACT}.gelu"),
                 act._GELU_DX: _on_arrays(_gelu_dx_v, f"{_ACT}.gelu_dx")}


@vectorised(_ACT, "_gaussian_tail")
def _gaussian_tail(x, fn, out):
    """``activations._gaussian_tail``: erf, gelu or gelu_dx (``fn``) on the whole array."""
    return _TAIL_KERNELS[fn](x, out)


@vectorised(_ELEM, "exp_affine")
def exp_affine(x, out, use_scale, s, use_bias, b_):
    """``elementary.exp_affine``: the product, then the sum (each only when used; numpy
    promotes ``x * s`` as Numba does), rounded to fp32, then ``_exp_k`` on the whole row."""
    with np.errstate(all="ignore"):
        z = x * s if use_scale == 1 else x
        z = z + b_ if use_bias == 1 else z
        out[:] = _exp_v(np.asarray(z).astype(np.float32, copy=False))
