"""Fused linear (x @ Wᵀ + b, optional activation; nn.Linear layout) against torch."""

from __future__ import annotations

import pytest
from nki.kernels.linear import linear, linear_torch

from nki.testing import check_kernel, parametrize_dtypes, parametrize_shapes, randn

NUMBA = ("numba",)


def _inputs(n, k, o, dtype, bias, lead=()):
    x = randn(lead + (n, k), dtype, seed=1)
    w = randn((o, k), dtype, seed=2, std=k ** -0.5)
    b = randn((o,), dtype, seed=3) if bias else None
    return x, w, b


@pytest.mark.parametrize("act", [None, "gelu", "silu", "relu"], ids=lambda a: a or "none")
@parametrize_dtypes("dtype", ["float32", "bfloat16"])
@parametrize_shapes("n,k,o", [(200, 333, 96), (256, 512, 640)])
def test_linear(n, k, o, dtype, act):
    x, w, b = _inputs(n, k, o, dtype, True)
    check_kernel(linear, linear_torch, x, w, b, act, backends=NUMBA, reference_as="torch")


@parametrize_shapes("n,k,o", [(130, 200, 2100)])
def test_linear_no_bias_gelu_tanh(n, k, o):
    x, w, _ = _inputs(n, k, o, "float32", False)
    check_kernel(linear, linear_torch, x, w, None, "gelu_tanh", backends=NUMBA,
                 reference_as="torch")


@parametrize_shapes("b,s,k,o", [(2, 100, 64, 40)])
def test_linear_3d_input(b, s, k, o):
    x, w, bias = _inputs(s, k, o, "float32", True, lead=(b,))
    (out,) = check_kernel(linear, linear_torch, x, w, bias, None, backends=NUMBA,
                          reference_as="torch")
    assert out.shape == (b, s, o)


@parametrize_dtypes("dtype", ["float8_e4m3fn"])
@parametrize_shapes("n,k,o", [(200, 333, 96)])
def test_linear_fp8(n, k, o, dtype):
    """fp8 x and W, fp32 bias and output."""
    x, w, _ = _inputs(n, k, o, dtype, False)
    b = randn((o,), "float32", seed=4)
    check_kernel(linear, linear_torch, x, w, b, "relu", backends=NUMBA, reference_as="torch")


def test_linear_both_backends():
    x, w, b = _inputs(5, 7, 3, "float32", True)
    check_kernel(linear, linear_torch, x, w, b, "silu", reference_as="torch")


def test_linear_rejects_unknown_activation():
    x, w, b = _inputs(5, 7, 3, "float32", True)
    with pytest.raises(ValueError, match="activation"):
        linear(x, w, b, "tanh")
