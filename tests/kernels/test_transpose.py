"""2-D transpose of any size: bit-exact against torch for every dtype."""

from __future__ import annotations

from nki.kernels.transpose import transpose2d, transpose_torch

from nki.testing import (
    assert_bitwise_equal,
    check_kernel,
    parametrize_dtypes,
    parametrize_shapes,
    randn,
)

NUMBA = ("numba",)


@parametrize_dtypes("dtype", ["float32", "bfloat16", "float8_e4m3fn"])
@parametrize_shapes("m,n", [(200, 333), (256, 1000), (5000, 300), (1, 129), (129, 1)])
def test_transpose2d(m, n, dtype):
    x = randn((m, n), dtype, seed=1)
    (out,) = check_kernel(transpose2d, transpose_torch, x, backends=NUMBA, reference_as="torch",
                          rtol=0, atol=0)
    assert_bitwise_equal(out, x.T.copy())


def test_transpose2d_both_backends():
    x = randn((5, 3), "bfloat16", seed=2)
    (out,) = check_kernel(transpose2d, transpose_torch, x, reference_as="torch", rtol=0, atol=0)
    assert_bitwise_equal(out, x.T.copy())
