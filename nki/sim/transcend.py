"""Vectorisable float32 transcendentals for the simulator's activation functions.

Numba compiles ``np.exp`` and friends to scalar libm calls, several times slower than numpy's
SIMD loops. Every function here is instead range reduction plus polynomials, written as one loop
of float32 arithmetic with no libm calls (only ``+ - * /``, ``np.sqrt``, ``np.floor``,
``np.rint`` and bit reinterpretation). Special cases are computed alongside and *selected* at
the end rather than returned early: an early return in front of a large body stops LLVM from
vectorising the loop.

Each public function is ``@njit(cache=True, nogil=True, error_model="numpy")`` and takes a
float32 array of any rank >= 1 (non-contiguous input is copied by ``ravel``), returning a new
float32 array of that shape. ``fn.py_func`` is the same code run by the interpreter on numpy
scalars and returns the same bits: every constant is an explicit ``np.float32`` (Numba would
turn ``float32 * 0.5`` into float64 arithmetic, numpy would not), integers are narrowed with
``np.int32`` before a bit reinterpretation (Numba widens ``int32 + int32`` to int64, and only
allows ``.view`` on an explicit ``np.int32(...)``/``np.float32(...)`` call), helpers are
``register_jitable`` so the interpreted path stays plain Python, and there is no fastmath, so
LLVM never contracts ``a * b + c`` into an FMA. The interpreted path is a slow reference for
tests and debugging (tens of microseconds per element), not meant for big arrays.

Accuracy is quoted in each docstring as the largest distance, in float32 steps (ulp), from the
float64 reference (numpy/scipy) rounded to float32, measured on every 127th float32 bit pattern
(34M finite inputs) and the unit tests' samples. float32 is used throughout except for the
argument reduction of sin/cos/tan, done in float64 because a float32 Cody-Waite reduction
cannot stay within 2 ulp near multiples of pi/2 at |x| ~ 1e5. Error-free products (Dekker
splitting, as there is no FMA) feed ``exp`` the bits a rounded argument such as ``-x*x`` or
``1.702*x`` would lose, so the Gaussian and logistic tails keep their relative accuracy.

Performance, compiled, 4M float32 drawn from N(0, 3) (|x| for log/rsqrt), single thread, best
of 11 on this 2-core Xeon (Sapphire Rapids, AVX-512) while other jobs ran; numpy's ``np.exp``
1.6 ms, Numba's ``np.exp`` 8.5 ms (libm call per element):

    ==========================  =======  ==========
    function                    ms       vectorised
    ==========================  =======  ==========
    exp                         3.0      yes
    log                         4.1      yes
    sin / cos / tan             6.2      yes
    arctan                      2.7      yes
    tanh                        4.1      yes
    sigmoid                     4.0      yes
    silu                        4.2      yes
    mish                        4.4      yes
    gelu_apprx_sigmoid          5.4      yes
    erf_dx                      3.4      yes
    softplus                    11       yes
    rsqrt / reciprocal          1.4/1.2  yes
    erf                         50       no
    gelu                        43       no
    gelu_dx                     58       no
    gelu_apprx_tanh             66       no
    silu_dx                     44       no
    gelu_apprx_sigmoid_dx       52       no
    ==========================  =======  ==========

The last six stay scalar: LLVM's vectoriser gives up once a body holds two ``2**k`` scalings
plus a table gather or a root-polynomial select (each piece alone vectorises); making them
vectorise is the next performance step.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.extending import register_jitable

# error_model="numpy" (on the public functions and the helpers alike): IEEE division, 1/0 = inf,
# where Numba's default Python error model raises ZeroDivisionError and puts a zero test in
# front of every division, which also stops LLVM from vectorising the loops.
_kernel = register_jitable(error_model="numpy")

__all__ = [
    "exp", "log", "sin", "cos", "tan", "arctan", "tanh", "sigmoid", "erf", "softplus",
    "silu", "gelu", "gelu_apprx_tanh", "gelu_apprx_sigmoid", "mish", "gelu_dx", "silu_dx",
    "erf_dx", "gelu_apprx_sigmoid_dx", "rsqrt", "reciprocal",
]

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

# G(t) = Phi(-t) * exp(t*t/2) = erfcx(t/sqrt2)/2 on [0, 15): 60 intervals of width 1/4, each a
# degree-5 minimax polynomial in t - centre (relative error 2e-9), coefficient 0 split in a
# float32 hi/lo pair. Rows are [c0_hi, c0_lo, c1..c5], stored little-endian float32 as hex so
# the bits are exact. Every Gaussian-tail function (erf, gelu, gelu_dx) goes through G, which
# keeps relative accuracy where Phi(x) is tiny.
_G_TABLE_HEX = (
    "9657e83ed280c1b13737afbe6970523e9c15d8bd60aa453dcb58a3bc835bc23ede5d9cb0d85f83be6c17113e"
    "94e48abddce4ee3c18e03abcf18ea53e20a059b2a79149beae22cd3d034937bdc84d943cfbbbdbbb173e8f3e"
    "e82f59b2acd71dbe5e5f943dbbcff7bca6d63c3c719184bb27387b3ee6b03db14fcafbbd982c5b3dde56abbc"
    "6a31f63b43e623bbf9dc5e3e6d3aa731f928ccbd8b01253d48ea71bcca0ea43bda52cfba23b4473e4a81b831"
    "34ffa7bd10d3fc3c1c192ebca32f5f3bf7f885ba9985343e75a6e731a7138cbda6ccc43cb413ffbbbfbe1a3b"
    "32ab30ba1c6f243e538a8c30de606cbd8f6e9b3c9ff3bdbbd970da3a7469edb9c5c9163e85136c317b9449bd"
    "d5cc783ce39c8fbb68c19c3ada5da2b97d180b3e967c83b12f902dbde78e493c60375cbb8b7a643ab0cb61b9"
    "1cfc003e78f0fd300abe16bd251c253c8e092bbb6aeb283aed741fb98d56f03d3fc2f0b05df403bde9a2083c"
    "6a7006bb4e23fd397783e4b868d9e03d2557eb309babe8bce844e43b62b2d5ba940dc039c4fba5b84e26d33d"
    "dde328312a77cebc7e52c03b6e97abbac6699339be3974b801f5c63d2f9702b10e4db8bcd452a33ba1198bba"
    "9dc46439a1d635b83e0bbc3de8d2d5af1c69a5bcc9b68b3b748663bac8513339d7ea08b89c39b23dfab51931"
    "6b3295bc78a7703b279e3bbae4e50d398d5fd0b73059a93d6e69d7309e3087bc968f503b6ce61bbab692e238"
    "ea23a0b7c549a13d7fd68a302c0876bca8cc353b437902baf065b638227378b782f0993dba66412f61c060bc"
    "3e541f3bf9d9dbb946fc93387a6d42b7dd36933d6f78ea300b0e4ebcdd560c3b6163bab933e57138626a19b7"
    "cc098d3d6d02acb05f8c3dbc1763f83a17f29eb9b41047381701f4b61e59873d141dd3b0bce82ebc82c6dc3a"
    "254a88b92ee22438e179c3b6fc16823db97c0831ebde21bc100ac53a29ef6ab95368093852b19db6046f7a3d"
    "ccb19a30463616bc4888b03a04794bb9ce57e637550d80b6d260713d8b5487ae77bf0bbc47bb9e3a070831b9"
    "e61ec2370c4451b68cf1683de375fcb0b75202bc05368f3aeeb01ab92270a43774012cb6a411613d31993e30"
    "d99cf3bb2e9f813aa0b807b94bf98b37942c0eb67fb3593dc44f772f1f2ce4bb4c5a6b3ab412efb873666f37"
    "0b49ecb525cb523d4efedb2e9522d6bbdf45563afa54d3b8949f4d376c57c5b5084e4c3d4774b4b08656c9bb"
    "7c9b433aa574bbb8eb583137459ca5b5ce32463db73543300da4bdbb1706333a7fd2a6b89b901937629e8bb5"
    "2b71403d2a8985ae28ecb2bb2c3e243a27ec94b8e0780537f0706cb5b8013b3db12de4b0ee13a9bb5007173a"
    "4a5685b839d9e836a60949b5d6dd353dbc24af30f503a0bb442e0b3a44706fb834cdcb36cf9d2bb599ff303d"
    "e04ccd2dc6a797bb5e87003ada8f57b8a3f5b236eb0e13b5ab612c3db6cde9b071ed8fbb8fdaed39359042b8"
    "79a29d36d9f0fcb43dff273da225d9b02fc588bbe97fdc39210a30b88d438b36bc49dab4f7d3233d666b9630"
    "172182bb96c7cc39c6a61fb8a6c476369f02bdb4ecdb1f3d1d24c1b0b4e977bbdc81be39c61c11b8b9395b36"
    "d72da4b487131c3def618a30186b6cbb5b85b139e82d04b8e1434336650c8fb48a77183df47bb830eeb261bb"
    "11aea5397b4af1b7d35b2e363b017ab4fe04153dedebd530e3af57bb99dc9a391eabdcb77b101c36ab145bb4"
    "2fb9113d1564feb07a524ebb76f590394430cab7f5020c36108140b4a0910e3dce24a930d38c45bb8ce08739"
    "5c97b9b7bbc6fb351b9729b40e8c0b3d9cdc6a3079523dbb48117f3902a7aab765dce235cbc715b462a6083d"
    "19a029b0339835bb12b66f39982d9db77ed4cc358c9904b4afde053d6774cc30e4532ebb5e8e61391a0091b7"
    "b14db9358e55ebb33233033d83fdafb0677c27bbda7c543923f985b701f5a7354d4bd1b346a2003d34091430"
    "760921bb7967483933f077b76c839835578abab3d454fc3c389e4aaf8ef31abb0a373d3902c165b709bc8a35"
    "ef9ca6b36e94f73cebd547b0da3315bbded63239cc3255b7e2d47c352a1b95b3c100f33c4ed5e1ad26c40fbb"
    "73342939be1946b7e3c266358fb485b36597ee3c1cc8272fc59e0abb3a3f2039494f38b7ebf35235873870b3"
    "1c56ea3c5cfc0f308cbe05bb53e8173969b12bb72e244135d33458b3d13ae63cbb1b57b0be1e01bb5f221039"
    "0d2220b7d018313567ef42b39043e23c7068f42f0876f9ba52e10839958615b7819e22358d0f30b38b6ede3c"
    "151aecafc71ef1ba501a023960c70bb78188153577421fb30ebada3c6760dc2f6730e9ba0a87f7386acf02b7"
    "9baf0935a14c10b3"
)
_G_TABLE = np.frombuffer(bytes.fromhex("".join(_G_TABLE_HEX)), dtype="<f4").reshape(60, 7).copy()
_G_STEP_INV = F(4.0)
_G_LAST = 59
_G_TMAX = F(15.0)

# Near a root, f = d * R(d - dc) with d = (x - x0_hi) - x0_lo, so d keeps its relative accuracy
# and so does f; R is a degree-10 minimax polynomial (c0 as a hi/lo pair). Each *_AT array is
# [x0_hi, x0_lo, dc]; each coefficient array is [c0_hi, c0_lo, c1, ..., c10].
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
    k = np.floor(hi * _LOG2E + _HALF)
    r = ((hi - k * _LN2_HI) + lo) - k * _LN2_LO  # hi - k*_LN2_HI is exact
    p = _ONE + (r + r * r * (_E2 + r * (_E3 + r * (_E4 + r * (_E5 + r * _E6)))))
    return p, np.int32(k)


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
    """``G(t) = Phi(-t) * exp(t*t/2)`` for ``t >= 0`` (clamped to the table's 15)."""
    j = np.int32(t * _G_STEP_INV)
    if j > _G_LAST:
        j = _G_LAST
    u = t - (F(j) + _HALF) / _G_STEP_INV  # exact: centres are multiples of 1/8
    acc = _G_TABLE[j, 6]
    for i in range(5, 1, -1):
        acc = acc * u + _G_TABLE[j, i]
    return (acc * u + _G_TABLE[j, 1]) + _G_TABLE[j, 0]


@_kernel
def _root_poly(x: np.float32, at: np.ndarray, coef: np.ndarray) -> np.float32:
    """``d * R(d - dc)`` near a root ``x0`` (see the ``*_ROOT`` tables)."""
    d = (x - at[0]) - at[1]
    s = d - at[2]
    acc = coef[coef.size - 1]
    for i in range(coef.size - 2, 1, -1):
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

# ---------------------------------------------------------------- scalar kernels


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
def _erf_k(x: np.float32) -> np.float32:
    # Both branches are computed and one selected: a branch around either would stop LLVM
    # from vectorising the loop (likewise in the kernels below).
    z = x * x
    q = _Q0 + z * (_Q1 + z * (_Q2 + z * (_Q3 + z * (_Q4 + z * (_Q5 + z * _Q6)))))
    small = x + x * (_EFX + z * q)
    # erfc(a) = 2 exp(-a*a) G(sqrt2 a), with a*a kept exact as a hi/lo pair; erf(4) rounds to 1.
    a = _clip(abs(x), _ONE, _ERF_ONE)
    qh, ql = _two_prod(a, a)
    p, k = _exp_parts(-qh, -ql)
    big = _ONE - _pow2(_TWO * p * _gauss_g(a * _SQRT2), k)
    if x < _ZERO:
        big = -big
    return big if abs(x) >= _ONE else small

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

@_kernel
def _gelu_k(x: np.float32) -> np.float32:
    xc = _clip(x, -_GELU_TAIL, _GELU_TAIL)
    p, k = _gauss_tail(xc)
    m = p * _gauss_g(abs(xc))  # Phi(-|x|) = m * 2**k
    r = x * (_ONE - _pow2(m, k))
    if x <= _ZERO:
        r = _pow2(xc * m, k)
    if x != x:
        r = x
    return r

@_kernel
def _gelu_dx_k(x: np.float32) -> np.float32:
    xc = _clip(x, -_GELU_TAIL, _GELU_TAIL)
    ax = abs(xc)
    p, k = _gauss_tail(xc)
    g = _gauss_g(ax)
    r = _ONE + _pow2(p * (xc * _INV_SQRT2PI - g), k)  # Phi + x phi = 1 + e (x/sqrt(2pi) - G)
    if x <= _ZERO:
        r = _pow2(p * (g - ax * _INV_SQRT2PI), k)  # e (G - |x|/sqrt(2pi))
    if _GDX_LO_X <= x <= _GDX_HI_X:
        r = _root_poly(_clip(x, _GDX_LO_X, _GDX_HI_X), _GDX_ROOT_AT, _GDX_ROOT)
    if x != x:
        r = x
    return r

@_kernel
def _sigmoid_k(x: np.float32) -> np.float32:
    if x != x:
        return x
    m, k = _sigmoid_parts(x, _ZERO)
    return _pow2(m, k)


@_kernel
def _silu_k(x: np.float32) -> np.float32:
    if x != x or x == _INF:
        return x
    if x < _TAIL:
        return -_ZERO
    m, k = _sigmoid_parts(x, _ZERO)
    return _pow2(x * m, k)


@_kernel
def _gelu_apprx_sigmoid_k(x: np.float32) -> np.float32:
    xl = _clip(x, -_GSIG_TAIL, _INF)  # keeps +inf; below -70 the result is -0
    yh, yl = _mul_a(_clip(x, -_GSIG_TAIL, _GSIG_TAIL))
    m, k = _sigmoid_parts(yh, yl)
    r = _pow2(xl * m, k)
    if x != x:
        r = x
    return r

@_kernel
def _gelu_apprx_tanh_k(x: np.float32) -> np.float32:
    """``x * sigmoid(2u)``, ``2u = x (K1 + K3 x^2)`` in double-float: the exp argument reaches
    ~100 in the tail, where a float32-rounded one would cost tens of ulp."""
    xc = _clip(x, -_GTANH_TAIL, _GTANH_TAIL)
    q, ql = _two_prod(xc, xc)
    b, bl = _two_prod(_K3_HI, q)
    bl = bl + (_K3_HI * ql + _K3_LO * q)
    s = _K1_HI + b  # Knuth two-sum: either term may dominate
    bb = s - _K1_HI
    lo = ((_K1_HI - (s - bb)) + (b - bb)) + (bl + _K1_LO)
    wh = s + lo
    wl = lo - (wh - s)
    vh, vl = _two_prod(xc, wh)
    m, k = _sigmoid_parts(vh, vl + xc * wl)
    r = _pow2(_clip(x, -_GTANH_TAIL, _INF) * m, k)
    if x != x:
        r = x
    return r

@_kernel
def _softplus_k(x: np.float32) -> np.float32:
    """``max(x, 0) + log1p(exp(-|x|))``."""
    p, k = _exp_parts(-_clip(abs(x), _ZERO, _SIG_ARG_MAX), _ZERO)
    r = _log1p_k(_pow2(p, k))
    if x > _ZERO:
        r = x + r
    if x != x:
        r = x
    return r

@_kernel
def _mish_k(x: np.float32) -> np.float32:
    """``x tanh(softplus(x))``: with ``f = exp(-|x|)`` it is ``x (1 + 2f) / (1 + 2f + 2f^2)``
    for ``x > 0`` and ``x f (f + 2) / (f (f + 2) + 2)`` below (no overflow either way)."""
    p, k = _exp_parts(-_clip(abs(x), _ZERO, _SIG_ARG_MAX), _ZERO)
    f = _pow2(p, k)
    u = _ONE + _TWO * f
    r = x * (u / (u + _TWO * f * f))
    if x <= _ZERO:
        r = _pow2(_clip(x, _TAIL, _INF) * p * ((f + _TWO) / (f * (f + _TWO) + _TWO)), k)
    if x != x:
        r = x
    return r

@_kernel
def _silu_dx_k(x: np.float32) -> np.float32:
    r = _sig_dx(x, _ZERO)
    if _SDX_LO_X <= x <= _SDX_HI_X:
        r = _root_poly(_clip(x, _SDX_LO_X, _SDX_HI_X), _SDX_ROOT_AT, _SDX_ROOT)
    if x != x:
        r = x
    return r

@_kernel
def _gelu_apprx_sigmoid_dx_k(x: np.float32) -> np.float32:
    yh, yl = _mul_a(_clip(x, -_GSIG_TAIL, _GSIG_TAIL))
    r = _sig_dx(yh, yl)
    if _GSDX_LO_X <= x <= _GSDX_HI_X:
        r = _root_poly(_clip(x, _GSDX_LO_X, _GSDX_HI_X), _GSDX_ROOT_AT, _GSDX_ROOT)
    if x != x:
        r = x
    return r

@_kernel
def _erf_dx_k(x: np.float32) -> np.float32:
    ax = abs(x)
    if x != x:
        return x
    if ax > _ERF_DX_TAIL:
        return _ZERO
    q, ql = _two_prod(ax, ax)
    p, k = _exp_parts(-q, -ql)
    return _pow2(_TWO_OVER_SQRTPI * p, k)


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
def exp(x: np.ndarray) -> np.ndarray:
    """e**x.

    Max error 1 ulp. inf above 88.72283 (the last finite float32), 0 below -103.97, exact
    subnormal results (one rounding).

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _exp_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def log(x: np.ndarray) -> np.ndarray:
    """Natural logarithm.

    Max error 1 ulp, subnormal inputs included. log(+-0) = -inf, log(x < 0) = NaN,
    log(inf) = inf.

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _log_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def sin(x: np.ndarray) -> np.ndarray:
    """Sine.

    Max error 1 ulp for |x| < 4e8 (float64 argument reduction); beyond that the result is
    still in [-1, 1] but not accurate. sin(+-inf) = NaN; sin(-0) = -0.

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _sin_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def cos(x: np.ndarray) -> np.ndarray:
    """Cosine.

    Max error 1 ulp for |x| < 4e8 (float64 argument reduction); beyond that the result is
    still in [-1, 1] but not accurate. cos(+-inf) = NaN.

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _cos_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def tan(x: np.ndarray) -> np.ndarray:
    """Tangent, as sin/cos (or -cos/sin) of the reduced argument.

    Max error 2 ulp for |x| < 4e8. tan(+-inf) = NaN; tan(-0) = -0.

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _tan_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def arctan(x: np.ndarray) -> np.ndarray:
    """Arctangent.

    Max error 2 ulp. arctan(+-inf) = +-pi/2 (rounded to float32).

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _arctan_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def tanh(x: np.ndarray) -> np.ndarray:
    """Hyperbolic tangent.

    Max error 1 ulp. +-1 beyond |x| = 9.1; tanh(-0) = -0.

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _tanh_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function 1 / (1 + exp(-x)).

    Max error 2 ulp, subnormal results included (the exp scale is applied last).

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _sigmoid_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def erf(x: np.ndarray) -> np.ndarray:
    """Error function.

    Max error 1 ulp. |x| < 1: odd polynomial; above: 1 - 2 exp(-x^2) G(sqrt2 |x|) with the
    Gaussian-tail table G; exactly +-1 from |x| = 4.

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _erf_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)), as max(x, 0) + log1p(exp(-|x|)).

    Max error 2 ulp.

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _softplus_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def silu(x: np.ndarray) -> np.ndarray:
    """SiLU / swish: x * sigmoid(x).

    Max error 3 ulp, subnormal tail included; silu(-inf) = -0 (the limit).

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _silu_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU: x * Phi(x), Phi the standard normal CDF.

    Max error 3 ulp; relative accuracy holds down the whole negative tail because Phi(x) for
    x < 0 is exp(-x^2/2) G(-x) with x^2 kept exact. gelu(-inf) = -0 (the limit).

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _gelu_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def gelu_apprx_tanh(x: np.ndarray) -> np.ndarray:
    """Tanh-approximated GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

    Computed as x * sigmoid(2u) with 2u in double-float so the far tail keeps its accuracy.
    Max error 3 ulp; f(-inf) = -0 (the limit).

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _gelu_apprx_tanh_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def gelu_apprx_sigmoid(x: np.ndarray) -> np.ndarray:
    """Sigmoid-approximated GELU: x * sigmoid(1.702 x).

    1.702 x is formed exactly (hi/lo pair) so the tail keeps its accuracy. Max error 3 ulp;
    f(-inf) = -0 (the limit).

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _gelu_apprx_sigmoid_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def mish(x: np.ndarray) -> np.ndarray:
    """Mish: x * tanh(softplus(x)), rewritten in exp(-|x|) so nothing overflows.

    Max error 4 ulp; mish(-inf) = -0 (the limit).

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _mish_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def gelu_dx(x: np.ndarray) -> np.ndarray:
    """Derivative of the exact GELU: Phi(x) + x phi(x).

    Max error 6 ulp, worst at the ends of the root window [-2, -0.25], where a polynomial
    with the root x0 = -0.75179 factored out keeps relative accuracy through the sign change
    (3 ulp elsewhere). gelu_dx(-inf) = -0, gelu_dx(inf) = 1.

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _gelu_dx_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def silu_dx(x: np.ndarray) -> np.ndarray:
    """Derivative of silu: sigmoid(x) (1 + x sigmoid(-x)).

    Max error 5 ulp (the x < 0 tail: several roundings of e (1 + e + x) / (1 + e)^2); the
    root x0 = -1.27846 is handled by a polynomial with the root factored out, so relative
    accuracy holds through the sign change. silu_dx(-inf) = -0, silu_dx(inf) = 1.

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _silu_dx_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def erf_dx(x: np.ndarray) -> np.ndarray:
    """Derivative of erf: 2/sqrt(pi) exp(-x^2), x^2 kept exact.

    Max error 2 ulp; 0 from |x| = 10.5.

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _erf_dx_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def gelu_apprx_sigmoid_dx(x: np.ndarray) -> np.ndarray:
    """Derivative of x * sigmoid(1.702 x).

    sigmoid(y) (1 + y sigmoid(-y)) with y = 1.702 x exact; root x0 = -0.75115 handled as in
    silu_dx. Max error 5 ulp. f(-inf) = -0, f(inf) = 1.

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _gelu_apprx_sigmoid_dx_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def rsqrt(x: np.ndarray) -> np.ndarray:
    """1 / sqrt(x): two correctly rounded steps.

    Max error 1 ulp. rsqrt(0) = inf, rsqrt(-0) = -inf, rsqrt(x < 0) = NaN.

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _rsqrt_k(F(flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, nogil=True, error_model="numpy")
def reciprocal(x: np.ndarray) -> np.ndarray:
    """1 / x, correctly rounded (0 ulp); 1/+-0 = +-inf.

    Args:
        x: float32 array of any rank >= 1.

    Returns:
        A new float32 array of ``x``'s shape.
    """
    flat = x.ravel()
    out = np.empty(flat.size, np.float32)
    for i in range(flat.size):
        out[i] = _reciprocal_k(F(flat[i]))
    return out.reshape(x.shape)
