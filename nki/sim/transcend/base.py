"""Shared pieces of the float32 transcendentals: constants, tables and the scalar building
blocks (exp scaling, error-free products, Gaussian tail G, log core) the kernels in
``elementary`` and ``activations`` inline. See the package docstring for the rules."""

from __future__ import annotations

import numpy as np
from numba.extending import register_jitable

# error_model="numpy" (on the public functions and the helpers alike): IEEE division, 1/0 = inf,
# where Numba's default Python error model raises ZeroDivisionError and puts a zero test in
# front of every division, which also stops LLVM from vectorising the loops.
_kernel = register_jitable(error_model="numpy")


def _kernel_inline(fn):
    """``_kernel``, inlined by Numba into its caller.

    A per-element kernel too big for LLVM's inliner (its cost threshold, ~250, is per call
    site) stays a call inside the public function's loop, and a loop with a call is not
    vectorised: gelu_apprx_tanh and the ``*_dx`` kernels ran scalar at 13-18 ns per element,
    0.7-1.2 ns inlined. A fresh ``register_jitable(...)`` per function: the decorator it
    returns pops ``inline`` from its keyword arguments on first use, so one shared instance
    would inline only the first function it decorates."""
    return register_jitable(error_model="numpy", inline="always")(fn)


F = np.float32
F64 = np.float64

_ZERO = F(0.0)
_HALF = F(0.5)
_ONE = F(1.0)
_TWO = F(2.0)
_INF = F(np.inf)
_NAN = F(np.nan)

# --- exp: x = k*ln2 + r, |r| <= ln2/2; exp(r) = 1 + r + r^2*P(r) (minimax, degree 4) ---
_LOG2E = F(1.4426950216293335)
_LN2_HI = F(0.693359375)  # 9 significant bits: k * _LN2_HI is exact for |k| < 2**15
_LN2_LO = F(-0.00021219444170128554)
_EXP_MAX = F(88.72283172607422)  # largest float32 whose exp is finite
_EXP_MIN = F(-104.0)  # below this exp rounds to 0 (ln(2**-150) = -103.97)
_ARG_MIN = F(-110.0)  # clamp for _exp_parts callers: 2**-159 underflows whatever it scales
_E2 = F(0.5)
_E3 = F(0.16666518151760101)
_E4 = F(0.041666205972433090)
_E5 = F(0.0083688888698816299)
_E6 = F(0.0013950479915365577)

# --- log: x = 2**e * m, m in [sqrt(.5), sqrt(2)); fdlibm's s = f/(2+f) form, R minimax ---
_LN2_HI_L = F(0.693145751953125)  # 16 significant bits: e * hi exact for |e| < 256
_LN2_LO_L = F(1.4286068e-06)
_SQRT2_MANT = 0x3504F3  # mantissa bits of sqrt(2)
_MIN_NORMAL = F(1.1754943508222875e-38)
_TWO_23 = F(8388608.0)
_L1 = F(0.6666666269302368)
_L2 = F(0.4000043272972107)
_L3 = F(0.28532058000564575)
_L4 = F(0.23668958246707916)

# --- sin/cos/tan: float64 reduction by pi/2 in three pieces (exact products for
# |k| < 2**28, so accurate for |x| < 4e8), then float32 minimax polynomials on |r| <= pi/4 ---
_TWO_OVER_PI = F64(0.6366197723675814)
_PIO2_1 = F64(1.5707963109016418)  # 25 significant bits
_PIO2_2 = F64(1.5893254712295857e-08)  # 25 significant bits
_PIO2_3 = F64(6.123233995736766e-17)  # the rest of pi/2, rounded to double
_S1 = F(-0.1666666716337204)
_S2 = F(0.008333329111337662)
_S3 = F(-0.0001983933470910415)
_S4 = F(2.718303903748165e-06)
_C1 = F(0.0416666679084301)
_C2 = F(-0.0013888883404433727)
_C3 = F(2.4799459424684756e-05)
_C4 = F(-2.7205678065911343e-07)
_TRIG_TINY = F(2.0**-12)  # sin x == x and cos x == 1 (rounded) below this

# --- arctan: reduce to |t| <= tan(pi/8), atan(t) = t + t*z*A(z) ---
_TAN3PI8 = F(2.4142135623730950)
_TANPI8 = F(0.41421356237309503)
_PIO2_F_HI = F(1.5707963705062866)
_PIO2_F_LO = F(-4.371138828673793e-08)
_PIO4_F_HI = F(0.7853981852531433)
_PIO4_F_LO = F(-2.1855694143368964e-08)
_A1 = F(-0.3333333134651184)
_A2 = F(0.19999904930591583)
_A3 = F(-0.14282038807868958)
_A4 = F(0.11045057326555252)
_A5 = F(-0.0847819447517395)
_A6 = F(0.047478195279836655)

# --- tanh: |x| < 0.55: x + x*z*T(z); above: 1 - 2/(exp(2|x|) + 1); 1 past 9.1 ---
_TANH_SMALL = F(0.55)
_TANH_BIG = F(9.1)
_T1 = F(-0.3333333134651184)
_T2 = F(0.13333295285701752)
_T3 = F(-0.053959790617227554)
_T4 = F(0.02178376540541649)
_T5 = F(-0.008416784927248955)
_T6 = F(0.0023989900946617126)

# --- erf: |x| < 1: x + x*(EFX + z*Q(z)); 1 <= |x| < 4: 1 - 2 exp(-x^2) G(sqrt2 |x|) ---
_EFX = F(0.12837916612625122)  # 2/sqrt(pi) - 1
_Q0 = F(-0.37612637877464294)
_Q1 = F(0.11283784359693527)
_Q2 = F(-0.026865515857934952)
_Q3 = F(0.0052212500013411045)
_Q4 = F(-0.000848702562507242)
_Q5 = F(0.00011286063090665266)
_Q6 = F(-9.72170164459385e-06)
_SQRT2 = F(1.4142135381698608)
_ERF_ONE = F(4.0)  # erf(x) rounds to 1 for x >= 3.92
_TWO_OVER_SQRTPI = F(1.128379225730896)
_INV_SQRT2PI = F(0.3989422917366028)

# G(t) = Phi(-t) * exp(t*t/2) = erfcx(t/sqrt2)/2 on [0, 15]: a rational function P(s)/Q(s)
# of s = t/4, degrees 7 and 8, fitted (iteratively reweighted least squares towards minimax)
# to relative error 4.3e-11 and evaluated in float64, so G rounds to float32 within half an
# ulp plus 1e-9 of one. Q has no zero on [0, 15/4] (its minimum there is Q(0) = 1). Every
# Gaussian-tail function (erf, gelu, gelu_dx) goes through G, which keeps relative accuracy
# where Phi(x) is tiny. A 60-interval float32 table did the same with 7 gathers per element,
# ~2.5 ns on AVX-512 and scalar on AVX2; this is a dozen float64 vector operations.
_G_P = np.array([
    float.fromhex('0x1.ffffffffa2570p-2'),
    float.fromhex('0x1.45366324a0576p+0'),
    float.fromhex('0x1.4d185c594f3a1p+0'),
    float.fromhex('0x1.18f5387681760p-9'),
    float.fromhex('-0x1.dfd535fdf8834p-1'),
    float.fromhex('-0x1.946acac70bc20p-3'),
    float.fromhex('0x1.aa8e3af116092p-1'),
    float.fromhex('0x1.5282f5d6148b0p-1'),
], dtype=np.float64)
_G_Q = np.array([
    float.fromhex('0x1.0000000000000p+0'),
    float.fromhex('0x1.6edd5b1e07857p+2'),
    float.fromhex('0x1.9cb4843a369b3p+3'),
    float.fromhex('0x1.8a87ea39c2f4bp+3'),
    float.fromhex('-0x1.094285183fc23p-3'),
    float.fromhex('-0x1.1c333ca30a5f9p+3'),
    float.fromhex('-0x1.90794b44007d6p+0'),
    float.fromhex('0x1.0b4cae711d5a0p+3'),
    float.fromhex('0x1.a84304a53d2b6p+2'),
], dtype=np.float64)
_G_P_LAST, _G_Q_LAST = _G_P.size - 1, _G_Q.size - 1

# Near a root, f = d * R(d - dc) with d = (x - x0_hi) - x0_lo, so d keeps its relative accuracy
# and so does f; R is a degree-10 minimax polynomial (c0 as a hi/lo pair). Each *_AT array is
# [x0_hi, x0_lo, dc]; each coefficient array is [c0_hi, c0_lo, c1, ..., c10].
_ROOT_COEFS = 12
# gelu_dx: x0 = -0.75179, used on [-2, -0.25]
_GDX_ROOT_AT = np.array(
    [-0.7517915368080139, 1.211444988769017e-08, -0.3732084631919861], dtype=np.float32
)
_GDX_ROOT = np.array([
    0.2895612418651581, 3.749709875933149e-09, 0.3589530885219574, 0.08860591799020767,
    -0.07081260532140732, -0.038582123816013336, 0.0051719872280955315, 0.007027926854789257,
    0.0003315394278615713, -0.0007866831729188561, -0.00010179802484344691,
    4.900371277472004e-05,
], dtype=np.float32)
# silu_dx: x0 = -1.27846, used on [-2.3, -0.5]
_SDX_ROOT_AT = np.array(
    [-1.2784645557403564, 1.2979283425806898e-08, -0.12153545767068863], dtype=np.float32
)
_SDX_ROOT = np.array([
    0.20029336214065552, -2.5068063180810896e-09, 0.14143379032611847, 0.023839814588427544,
    -0.012019525282084942, -0.00651884451508522, -0.0003939518064726144, 0.0006282764952629805,
    0.0002082307037198916, -1.2061697816534434e-05, -2.1899470084463246e-05,
    -3.699442231663852e-06,
], dtype=np.float32)
# gelu_apprx_sigmoid_dx: x0 = -0.75115, used on [-2.3, -0.5] / 1.702
_GSDX_ROOT_AT = np.array(
    [-0.7511542439460754, -1.1495213669832083e-08, -0.07140743732452393], dtype=np.float32
)
_GSDX_ROOT = np.array([
    0.3408992886543274, 9.284654822749872e-09, 0.4097059369087219, 0.11753887683153152,
    -0.10086152702569962, -0.09310401231050491, -0.009576359763741493, 0.025993674993515015,
    0.014662944711744785, -0.0014455876080319285, -0.004467135760933161, -0.0012843736913055182,
], dtype=np.float32)
assert all(t.size == _ROOT_COEFS for t in (_GDX_ROOT, _SDX_ROOT, _GSDX_ROOT))

_A_HI = F(1.7020000219345093)  # gelu_apprx_sigmoid's 1.702 as a float32 hi/lo pair
_A_LO = F(-2.1934509319976314e-08)
_K1_HI = F(1.5957691669464111)  # 2*sqrt(2/pi), hi/lo: gelu_apprx_tanh's 2u = x*(K1 + K3*x^2)
_K1_LO = F(-4.534068054340423e-08)
_K3_HI = F(0.07135481387376785)  # 2*sqrt(2/pi)*0.044715
_K3_LO = F(2.3988324659995897e-09)
_SPLIT = F(4097.0)  # 2**12 + 1: Dekker/Veltkamp split of a float32 into two 12-bit halves
_GDX_LO_X = F(-2.0)
_GDX_HI_X = F(-0.25)
_SDX_LO_X = F(-2.3)
_SDX_HI_X = F(-0.5)
_GSDX_LO_X = F(-2.3 / 1.702)
_GSDX_HI_X = F(-0.5 / 1.702)
_SIG_ARG_MAX = F(110.0)
_TAIL = F(-120.0)  # x*exp(x)-like results are 0 below this
_GELU_TAIL = F(15.0)  # Phi(-15) * 15 underflows
_GSIG_TAIL = F(70.0)  # 1.702 * 70 > 110
_GTANH_TAIL = F(16.0)
_ERF_DX_TAIL = F(10.5)
_HUGE_ARG = F(1.0e30)


# ---------------------------------------------------------------- building blocks


@_kernel
def _pow2(p: np.float32, k: int) -> np.float32:
    """``p * 2**k`` for ``|k| <= 166``; two power-of-two factors so neither leaves the normal
    range, and only the last product rounds (that is where a subnormal result rounds)."""
    k1 = k >> 1
    k2 = k - k1
    s1 = np.int32((k1 + 127) << 23).view(np.float32)
    s2 = np.int32((k2 + 127) << 23).view(np.float32)
    return p * s1 * s2


@_kernel
def _exp_parts(hi: np.float32, lo: np.float32) -> tuple[np.float32, np.int32]:
    """``exp(hi + lo) = p * 2**k`` with ``p`` in [0.7, 1.42]; needs finite ``hi`` in [-115, 89]
    and ``|lo|`` tiny next to ``hi`` (``lo`` carries the bits a rounded argument lost)."""
    q, k = _expm1_parts(hi, lo)
    return _ONE + q, k


@_kernel
def _expm1_parts(hi: np.float32, lo: np.float32) -> tuple[np.float32, np.int32]:
    """``exp(hi + lo) = (1 + q) * 2**k``, ``q`` unrounded by the ``1 +`` (callers that
    multiply by ``1 + q`` keep ``q``'s bits); same domain as ``_exp_parts``."""
    k = np.floor(hi * _LOG2E + _HALF)
    r = ((hi - k * _LN2_HI) + lo) - k * _LN2_LO  # hi - k*_LN2_HI is exact
    q = r + r * r * (_E2 + r * (_E3 + r * (_E4 + r * (_E5 + r * _E6))))
    return q, np.int32(k)


@_kernel
def _exp_neg(hi: np.float32, lo: np.float32) -> np.float32:
    """``exp(hi + lo)`` for ``hi <= 89``, flushing to 0 below ``_ARG_MIN``."""
    if hi < _ARG_MIN:
        return _ZERO
    p, k = _exp_parts(hi, lo)
    return _pow2(p, k)


@_kernel
def _two_prod(a: np.float32, b: np.float32) -> tuple[np.float32, np.float32]:
    """``a * b = hi + lo`` exactly (Dekker; no FMA so it splits), for ``|a|, |b| < 2**100``."""
    hi = a * b
    c = _SPLIT * a
    ah = c - (c - a)
    al = a - ah
    c = _SPLIT * b
    bh = c - (c - b)
    bl = b - bh
    lo = ((ah * bh - hi) + ah * bl + al * bh) + al * bl
    return hi, lo


@_kernel
def _gauss_g(t: np.float32) -> np.float32:
    """``G(t) = Phi(-t) * exp(t*t/2)`` for ``0 <= t <= 15``, rounded once to float32."""
    u = np.float64(t) * 0.25
    p = _G_P[_G_P_LAST]
    for i in range(_G_P_LAST - 1, -1, -1):
        p = p * u + _G_P[i]
    q = _G_Q[_G_Q_LAST]
    for i in range(_G_Q_LAST - 1, -1, -1):
        q = q * u + _G_Q[i]
    return np.float32(p / q)


@_kernel
def _root_poly(x: np.float32, at: np.ndarray, coef: np.ndarray) -> np.float32:
    """``d * R(d - dc)`` near a root ``x0`` (see the ``*_ROOT`` tables). The loop's bounds
    are constants (every table has ``_ROOT_COEFS`` entries) so that LLVM unrolls it: a loop
    left inside the caller's element loop keeps that loop from vectorising."""
    d = (x - at[0]) - at[1]
    s = d - at[2]
    acc = coef[_ROOT_COEFS - 1]
    for i in range(_ROOT_COEFS - 2, 1, -1):
        acc = acc * s + coef[i]
    return d * ((acc * s + coef[1]) + coef[0])


@_kernel
def _log_core(x: np.float32) -> np.float32:
    """``log(x)`` for finite ``x > 0``: other inputs give garbage the caller selects away."""
    small = x < _MIN_NORMAL
    xs = x * _TWO_23 if small else x  # make subnormals normal; exact
    b = np.float32(xs).view(np.int32)
    mant = b & 0x7FFFFF
    ei = (b >> 23) - (150 if small else 127)
    if mant > _SQRT2_MANT:  # keep m in [sqrt(.5), sqrt(2)) so log(m) stays small
        mant = mant - 0x800000
        ei += 1
    m = np.int32(mant + 0x3F800000).view(np.float32)
    f = m - _ONE
    s = f / (_TWO + f)
    z = s * s
    r = z * (_L1 + z * (_L2 + z * (_L3 + z * _L4)))
    hfsq = _HALF * f * f
    fe = F(ei)
    return fe * _LN2_HI_L - ((hfsq - (s * (hfsq + r) + fe * _LN2_LO_L)) - f)


@_kernel
def _log1p_k(u: np.float32) -> np.float32:
    """``log(1 + u)`` for ``u`` in [0, 1]: log of the rounded sum plus its rounding error."""
    w = _ONE + u
    return _log_core(w) + (u - (w - _ONE)) / w


@_kernel
def _trig_reduce(x: np.float32) -> tuple[np.float32, np.float32, int]:
    """``x = k*pi/2 + hi + lo`` with ``|hi| <= pi/4`` (float64 Cody-Waite); returns ``k mod 4``."""
    xd = F64(x)
    k = np.rint(xd * _TWO_OVER_PI)
    r = ((xd - k * _PIO2_1) - k * _PIO2_2) - k * _PIO2_3
    hi = F(r)
    lo = F(r - F64(hi))
    q = np.int32(k - F64(4.0) * np.floor(k * F64(0.25)))  # k mod 4 without int overflow
    return hi, lo, q


@_kernel
def _sin_poly(hi: np.float32, lo: np.float32) -> np.float32:
    z = hi * hi
    return hi + (lo + hi * z * (_S1 + z * (_S2 + z * (_S3 + z * _S4))))


@_kernel
def _cos_poly(hi: np.float32, lo: np.float32) -> np.float32:
    z = hi * hi
    hz = _HALF * z
    w = _ONE - hz
    # (1 - w) - hz recovers the rounding error of w (fdlibm's kernel_cos trick).
    tail = z * z * (_C1 + z * (_C2 + z * (_C3 + z * _C4))) - hi * lo
    return w + (((_ONE - w) - hz) + tail)


@_kernel
def _sigmoid_parts(hi: np.float32, lo: np.float32) -> tuple[np.float32, np.int32]:
    """``sigmoid(hi + lo) = m * 2**k``; the scale keeps ``x * sigmoid(x)`` exact into the
    subnormal range (the caller multiplies ``m`` first and scales last).

    One ``exp(-|y|) = e`` serves both signs: ``1/(1+e)`` for ``y >= 0``, ``e/(1+e)`` below; a
    single exp with no branches around it is what lets LLVM vectorise the loop.
    """
    neg = hi < _ZERO
    ah = hi if neg else -hi
    al = lo if neg else -lo
    if ah < -_SIG_ARG_MAX:
        ah = -_SIG_ARG_MAX
        al = _ZERO
    p, k = _exp_parts(ah, al)
    d = _ONE + _pow2(p, k)
    if neg:
        return p / d, k
    return _ONE / d, np.int32(0)


@_kernel
def _sig_dx(yh: np.float32, yl: np.float32) -> np.float32:
    """``d/dy [y * sigmoid(y)] = sigmoid(y) * (1 + y * sigmoid(-y))`` at ``y = yh + yl``.

    With ``e = exp(-|y|)``: ``(1 + e + y e) / (1 + e)**2`` for ``y >= 0`` and
    ``e (1 + e + y) / (1 + e)**2`` below (scaled by ``2**k`` last, as in ``_sigmoid_parts``).
    """
    neg = yh < _ZERO
    ah = yh if neg else -yh
    al = yl if neg else -yl
    if ah < -_SIG_ARG_MAX:
        ah = -_SIG_ARG_MAX
        al = _ZERO
    y = yh if yh > _TAIL else _TAIL  # past +-120 the result no longer changes
    y = y if y < -_TAIL else -_TAIL
    p, k = _exp_parts(ah, al)
    e = _pow2(p, k)
    d = _ONE + e
    if neg:
        return _pow2(p * ((d + y) / (d * d)), k)
    return (d + y * e) / (d * d)


@_kernel
def _mul_a(x: np.float32) -> tuple[np.float32, np.float32]:
    """``1.702 * x`` as a hi/lo pair."""
    hi, lo = _two_prod(x, _A_HI)
    return hi, lo + x * _A_LO


@_kernel
def _gauss_tail(x: np.float32) -> tuple[np.float32, np.int32]:
    """``exp(-x*x/2) = p * 2**k`` for ``|x| <= 15``, ``x*x`` exact as a hi/lo pair."""
    q, ql = _two_prod(x, x)
    return _exp_parts(-_HALF * q, -_HALF * ql)


@_kernel
def _clip(x: np.float32, lo: np.float32, hi: np.float32) -> np.float32:
    """``x`` clamped to ``[lo, hi]``, NaN to ``lo``: keeps unselected branches finite."""
    y = x if x > lo else lo
    return y if y < hi else hi

