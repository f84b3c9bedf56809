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
cannot stay within 2 ulp near multiples of pi/2 at |x| ~ 1e5, and the Gaussian tail G, a
float64 rational function rounded once (it replaced a float32 table of polynomials whose
lookups were gathers: gelu is 4x faster). Error-free products (Dekker splitting, as there is
no FMA) feed ``exp`` the bits a rounded argument such as ``-x*x`` or
``1.702*x`` would lose, so the Gaussian and logistic tails keep their relative accuracy.

Performance, compiled, 4M float32 drawn from N(0, 3) (|x| for log/rsqrt), single thread, best
of 11 on this project's 2-core AMD EPYC (Zen 5, AVX-512); numpy's ``np.exp`` 1.6 ms, Numba's
``np.exp`` 8.6 ms (libm call per element). Every function's loop is vectorised:

    ==========================  =======
    function                    ms
    ==========================  =======
    exp                         1.1
    log                         2.3
    sin / cos / tan             2.9 / 3.1 / 2.8
    arctan                      1.4
    tanh                        2.2
    sigmoid                     2.0
    silu                        2.2
    mish                        2.6
    gelu_apprx_sigmoid          2.8
    erf_dx                      1.7
    softplus                    6.4
    rsqrt / reciprocal          0.8 / 0.9
    erf                         5.7
    gelu                        5.9
    gelu_dx                     5.9
    gelu_apprx_tanh             4.6
    silu_dx                     3.0
    gelu_apprx_sigmoid_dx       3.7
    ==========================  =======

What it took (each was once a scalar loop, 4-20x slower): no table lookups (a gather per
element: the Gaussian tail G is a float64 rational function, not a 60-interval table);
per-element kernels too big for LLVM's inliner are inlined by Numba (``_kernel_inline``), as
a call left in the loop keeps it scalar; inner loops have constant trip counts, so LLVM
unrolls them; and a large expression is never written inside a conditional, which LLVM does
not if-convert (compute every candidate into a variable, then select; see ``_gelu_k``).

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
    exp_affine,  # a row primitive of the activation helper, not an array function (not in __all__)
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
