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
    erf                         16       all but G
    gelu                        18       all but G
    gelu_dx                     58       no
    gelu_apprx_tanh             66       no
    silu_dx                     44       no
    gelu_apprx_sigmoid_dx       52       no
    ==========================  =======  ==========

erf and gelu were 50 and 43 ms: the table lookup of the Gaussian tail G is a gather, which
LLVM does not vectorise on this CPU, and it kept their whole loop scalar. They now run in
blocks of three loops (G's argument, G alone, the rest), so only G is scalar. The last four
stay scalar: LLVM gives up once a body holds two ``2**k`` scalings plus a table gather or a
root-polynomial select, and it does not if-convert a large expression written inside a
conditional (compute every candidate into a variable, then select; see ``_gelu_k``).

Modules: ``base`` (constants, tables, shared building blocks), ``elementary`` (exp, log,
trigonometric, tanh, rsqrt, reciprocal), ``activations`` (sigmoid, erf and the activation
functions with their derivatives). Import the functions from this package.
"""

from nki.sim.transcend.activations import (  # noqa: F401
    erf,
    erf_dx,
    gelu,
    gelu_apprx_sigmoid,
    gelu_apprx_sigmoid_dx,
    gelu_apprx_tanh,
    gelu_dx,
    mish,
    sigmoid,
    silu,
    silu_dx,
    softplus,
)
from nki.sim.transcend.elementary import (  # noqa: F401
    arctan,
    cos,
    exp,
    log,
    reciprocal,
    rsqrt,
    sin,
    tan,
    tanh,
)

__all__ = [
    "exp", "log", "sin", "cos", "tan", "arctan", "tanh", "sigmoid", "erf", "softplus",
    "silu", "gelu", "gelu_apprx_tanh", "gelu_apprx_sigmoid", "mish", "gelu_dx", "silu_dx",
    "erf_dx", "gelu_apprx_sigmoid_dx", "rsqrt", "reciprocal",
]
