"""``nki.testing``: check NKI kernels against numpy/torch references in a few lines.

* :func:`assert_close` — compare under the tolerance of the result's dtype (one table,
  :data:`TOLERANCES`, reasoned in ulps in ``nki/testing/tolerance.py``), with a report of
  what is wrong and where; :func:`assert_bitwise_equal` for exact agreement.
* :func:`rand`, :func:`randn`, :func:`rand_like`, :func:`randint`, :func:`randperm` —
  seeded inputs exactly representable in their dtype (ml_dtypes arrays for bf16/fp8, or
  torch tensors with ``as_torch=True``).
* :func:`check_kernel` — run a kernel on both backends, require bit-identical results,
  compare with a reference; :func:`run_backends` for the first half alone.
* :func:`parametrize_shapes`, :func:`parametrize_dtypes`, :func:`param_id` — readable test
  ids; ``nki.testing.pytest_plugin`` — the ``nki_backend``, ``nki_rng``, ``nki_check``
  fixtures (``pytest_plugins = ["nki.testing.pytest_plugin"]`` in a conftest).

Example:
    >>> from nki.testing import check_kernel, randn                        # doctest: +SKIP
    >>> check_kernel(softmax_rows, lambda x: scipy.special.softmax(x, -1),
    ...              randn((256, 512), "bf16", seed=0))

torch is optional: it is imported only when a torch tensor is passed or requested.
"""

from nki.testing.compare import Comparison, assert_bitwise_equal, assert_close, compare
from nki.testing.dtypes import dtype_name, resolve_dtype
from nki.testing.factories import rand, rand_like, randint, randn, randperm
from nki.testing.kernel import BACKENDS, check_kernel, run_backends
from nki.testing.params import param_id, parametrize_dtypes, parametrize_shapes
from nki.testing.tolerance import TOLERANCES, Tolerance, tolerance

__all__ = [
    "assert_close", "assert_bitwise_equal", "compare", "Comparison",
    "TOLERANCES", "Tolerance", "tolerance", "dtype_name", "resolve_dtype",
    "rand", "randn", "rand_like", "randint", "randperm",
    "check_kernel", "run_backends", "BACKENDS",
    "parametrize_shapes", "parametrize_dtypes", "param_id",
]
