"""matmul / matmul_lhsT / batched_matmul against torch (float64 of the exact inputs)."""

from __future__ import annotations

from nki.kernels.matmul import batched_matmul, matmul, matmul_lhsT, matmul_torch

import nki
from nki.testing import check_kernel, parametrize_dtypes, parametrize_shapes, randn

NUMBA = ("numba",)
DTYPES = ["float32", "bfloat16"]


def lhsT_torch(lhsT, rhs):  # noqa: N802
    return lhsT.T @ rhs


@parametrize_dtypes("dtype", DTYPES)
@parametrize_shapes("m,k,n", [(200, 333, 96), (256, 384, 640), (130, 300, 2100), (1, 1, 1)])
def test_matmul(m, k, n, dtype):
    a, b = randn((m, k), dtype, seed=1), randn((k, n), dtype, seed=2)
    check_kernel(matmul, matmul_torch, a, b, backends=NUMBA, reference_as="torch")


@parametrize_dtypes("dtype", ["float8_e4m3fn", "float8_e5m2"])
@parametrize_shapes("m,k,n", [(200, 333, 96)])
def test_matmul_fp8(m, k, n, dtype):
    """fp8 inputs, exact products, fp32 accumulation and output."""
    a, b = randn((m, k), dtype, seed=3), randn((k, n), dtype, seed=4)
    (out,) = check_kernel(matmul, matmul_torch, a, b, backends=NUMBA, reference_as="torch")
    assert out.dtype.name == "float32"


def test_matmul_out_dtype():
    """fp8 inputs with a bf16 output, chosen by name."""
    a, b = randn((200, 333), "float8_e4m3fn", seed=3), randn((333, 96), "float8_e4m3fn", seed=4)
    (out,) = check_kernel(matmul, matmul_torch, a, b, backends=NUMBA, reference_as="torch",
                          kernel_kwargs={"out_dtype": "bfloat16"})
    assert out.dtype.name == "bfloat16"


@parametrize_shapes("m,k,n", [(130, 8232, 520)])
def test_matmul_trn1_k_chunks(m, k, n):
    """On trn1 (moving tile 512, smaller SBUF) the [K, 512] block of b does not fit its
    budget: K is chunked and b reloaded per output block, accumulating in one PSUM tile."""
    a, b = randn((m, k), "float32", seed=5), randn((k, n), "float32", seed=6)
    check_kernel(nki.jit(matmul.fn, target="trn1"), matmul_torch, a, b, backends=NUMBA,
                 reference_as="torch")


@parametrize_dtypes("dtype", DTYPES)
@parametrize_shapes("k,m,n", [(333, 200, 96), (256, 128, 640)])
def test_matmul_lhsT(k, m, n, dtype):  # noqa: N802
    lhsT, rhs = randn((k, m), dtype, seed=7), randn((k, n), dtype, seed=8)
    check_kernel(matmul_lhsT, lhsT_torch, lhsT, rhs, backends=NUMBA, reference_as="torch")


@parametrize_dtypes("dtype", DTYPES)
@parametrize_shapes("b,m,k,n", [(3, 200, 70, 50), (2, 128, 256, 130)])
def test_batched_matmul(b, m, k, n, dtype):
    a, bb = randn((b, m, k), dtype, seed=9), randn((b, k, n), dtype, seed=10)
    check_kernel(batched_matmul, matmul_torch, a, bb, backends=NUMBA, reference_as="torch")


def test_matmul_both_backends():
    """Tiny cases on both backends: bit-identical results, and correct."""
    check_kernel(matmul, matmul_torch, randn((5, 7), seed=11), randn((7, 3), seed=12),
                 reference_as="torch")
    check_kernel(matmul_lhsT, lhsT_torch, randn((7, 5), "bfloat16", seed=13),
                 randn((7, 3), "bfloat16", seed=14), reference_as="torch")
    check_kernel(batched_matmul, matmul_torch, randn((2, 3, 4), seed=15),
                 randn((2, 4, 5), seed=16), reference_as="torch")
