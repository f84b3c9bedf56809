"""The one tolerance table of nki's tests, keyed by the dtype of the result being checked.

An element passes when ``|actual - expected| <= atol + rtol * |expected|`` (numpy's rule).
Every number is a multiple of the dtype's machine epsilon ``eps`` (the spacing of values just
above 1.0, i.e. one ulp at 1.0 = 2**-mantissa_bits); the unit roundoff is ``u = eps / 2``,
the worst relative error of one round-to-nearest-even.

Why these multiples:

* **Low-precision results (bf16, fp16, fp8).** nki's engines compute in fp32 and round once on
  every write. A kernel's result is rounded at least once into the output dtype, and typical
  kernels keep one to three intermediates in that same dtype (exp() written to a bf16 tile
  before a matmul, a bf16 accumulator copy, ...). Each rounding adds at most ``u`` relative
  error, so four roundings cost ``4u = 2 eps``: ``rtol = 2 eps``. fp32 arithmetic in between
  is ~2**16 times finer and does not show. ``atol = rtol``: inputs of tests are O(1), so a
  result that cancels to near zero carries an absolute error of the order of the ulp of the
  O(1) terms it came from. (For bf16, 2 eps = 2**-6 = 1.56e-2, close to torch.testing's
  1.6e-2; at 1.0 the bound is 4 ulps.)
* **fp32 results.** One final rounding is only 0.5 ulp, but fp32 kernels accumulate: a K-long
  fp32 PSUM sum has a worst-case relative error of ``K u`` and a typical one of ``sqrt(K) u``
  (K = 4096: 32 ulps), and nki's vectorised exp/log/rsqrt are accurate to a few ulps. 128
  ulps (``rtol = 128 eps = 2**-16 = 1.5e-5``) covers a few of those stacked. The absolute
  part is wider, ``atol = 1024 eps = 2**-13 = 1.2e-4``: a dot product of K O(1) terms that
  cancels to near zero still carries the rounding errors of partial sums of size
  ~sqrt(K), about ``sqrt(K) * sqrt(K) u = K u`` in total (K = 256: 1.5e-5, measured on the
  library's matmul; K = 2048: 1.2e-4).
* **fp64** (references compared with each other): ``2**-40`` (4096 ulps of 2**-52).
* **Integers, bool and fp8 e8m0** (exponent-only MX scales): exact, ``rtol = atol = 0``.

Override per call with ``rtol=``/``atol=`` when a kernel is known to need more (long
reductions in bf16, say) and write down why next to the call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nki.testing.dtypes import dtype_name, finfo, is_float, resolve_dtype


@dataclass(frozen=True)
class Tolerance:
    """``atol + rtol * |expected|`` bounds the error of one element.

    Attributes:
        rtol: relative tolerance.
        atol: absolute tolerance.
    """

    rtol: float
    atol: float

    @property
    def exact(self) -> bool:
        return self.rtol == 0 and self.atol == 0


def _ulps(dtype: str, rtol_ulps: float, atol_ulps: float | None = None) -> Tolerance:
    """A tolerance in multiples of ``dtype``'s epsilon (atol defaults to the rtol multiple)."""
    eps = float(finfo(dtype).eps)
    return Tolerance(rtol=rtol_ulps * eps, atol=(atol_ulps or rtol_ulps) * eps)


#: short dtype name -> tolerance. The single source of truth; see the module docstring.
TOLERANCES: dict[str, Tolerance] = {
    "fp64": _ulps("fp64", 4096),
    "fp32": _ulps("fp32", 128, 1024),
    "fp16": _ulps("fp16", 2),
    "bf16": _ulps("bf16", 2),
    "fp8e4m3": _ulps("fp8e4m3", 2),
    "fp8e4m3fn": _ulps("fp8e4m3fn", 2),
    "fp8e5m2": _ulps("fp8e5m2", 2),
    "fp8e8m0": Tolerance(0.0, 0.0),
}
_EXACT = Tolerance(0.0, 0.0)


def tolerance(dtype: Any) -> Tolerance:
    """The table's tolerance for results of ``dtype`` (any spelling); exact for integers.

    Example:
        >>> tolerance("bf16").rtol == 2 ** -6
        True
    """
    name = dtype_name(dtype)
    if name in TOLERANCES:
        return TOLERANCES[name]
    if is_float(dtype):
        return _ulps(name, 2) if resolve_dtype(dtype).itemsize < 4 else TOLERANCES["fp32"]
    return _EXACT


def coarser(a: Any, b: Any) -> np.dtype:
    """Of two dtypes, the one whose tolerance is looser (the comparison's precision limit)."""
    ta, tb = tolerance(a), tolerance(b)
    return resolve_dtype(a) if (ta.rtol, ta.atol) >= (tb.rtol, tb.atol) else resolve_dtype(b)
