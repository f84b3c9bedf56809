"""GELU, SiLU and the SwiGLU MLP block against torch."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from nki.kernels.mlp import (
    gelu,
    gelu_torch,
    silu,
    silu_mul,
    silu_mul_torch,
    silu_torch,
    swiglu_mlp,
    swiglu_mlp_torch,
)

import nki.language as nl
from nki.testing import check_kernel, parametrize_dtypes, parametrize_shapes, randn

NUMBA = ("numba",)
ACTS = {"gelu": (gelu, gelu_torch), "silu": (silu, silu_torch)}


@pytest.mark.parametrize("name", list(ACTS))
@parametrize_dtypes("dtype", ["float32", "bfloat16"])
@parametrize_shapes("shape", [(200, 333), (4096, 64), (7,), (3, 5, 130)])
def test_activation(shape, dtype, name):
    kernel, ref = ACTS[name]
    check_kernel(kernel, ref, randn(shape, dtype, seed=1, std=3.0), backends=NUMBA,
                 reference_as="torch")


@parametrize_dtypes("dtype", ["float32", "bfloat16"])
@parametrize_shapes("shape", [(200, 333), (4096, 64), (7,), (3, 5, 130)])
def test_silu_mul(shape, dtype):
    """``silu(gate) * up`` elementwise, tails and bf16 included."""
    check_kernel(silu_mul, silu_mul_torch, randn(shape, dtype, seed=3, std=3.0),
                 randn(shape, dtype, seed=4), backends=NUMBA, reference_as="torch")


def test_silu_mul_shape_mismatch():
    with pytest.raises(ValueError, match="same shape"):
        silu_mul(randn((4, 5), seed=1), randn((5, 4), seed=2))


def test_gelu_tanh():
    x = randn((200, 333), seed=2, std=3.0)
    check_kernel(gelu, lambda x: gelu_torch(x, "tanh"), x, backends=NUMBA,
                 reference_as="torch", kernel_kwargs={"approximate": "tanh"})


def _mlp_inputs(n, d, f, dtype):
    return (randn((n, d), dtype, seed=3), randn((d, f), dtype, seed=4, std=d ** -0.5),
            randn((d, f), dtype, seed=5, std=d ** -0.5),
            randn((f, d), dtype, seed=6, std=f ** -0.5))


@parametrize_dtypes("dtype", ["float32", "bfloat16"])
@parametrize_shapes("n,d,f", [(200, 96, 333), (600, 200, 300)])
def test_swiglu_mlp(n, d, f, dtype):
    """The kernel rounds the hidden activations to x's dtype (as torch in that dtype does);
    the reference does the same, everything else in float64."""
    hidden = torch.bfloat16 if dtype == "bfloat16" else None
    check_kernel(swiglu_mlp, lambda *a: swiglu_mlp_torch(*a, hidden_dtype=hidden),
                 *_mlp_inputs(n, d, f, dtype), backends=NUMBA, reference_as="torch")


def test_swiglu_mlp_3d_input():
    x, wg, wu, wd = _mlp_inputs(60, 64, 160, "float32")
    (out,) = check_kernel(swiglu_mlp, swiglu_mlp_torch, x.reshape(2, 30, 64), wg, wu, wd,
                          backends=NUMBA, reference_as="torch")
    assert out.shape == (2, 30, 64)


def test_mlp_both_backends():
    check_kernel(gelu, gelu_torch, randn((3, 5), seed=7, std=3.0), reference_as="torch")
    check_kernel(silu, silu_torch, randn((3, 5), seed=8, std=3.0), reference_as="torch")
    check_kernel(silu_mul, silu_mul_torch, randn((3, 5), seed=9, std=3.0),
                 randn((3, 5), seed=10), reference_as="torch")
    check_kernel(swiglu_mlp, swiglu_mlp_torch, *_mlp_inputs(5, 8, 12, "float32"),
                 reference_as="torch")


FP8 = ["float8_e4m3", "float8_e5m2"]


@pytest.mark.parametrize("name", list(ACTS))
@parametrize_dtypes("dtype", FP8)
def test_activation_fp8(dtype, name):
    """fp8 in, fp8 out (fp32 compute, one rounding): the table's fp8 tolerance."""
    kernel, ref = ACTS[name]
    (out,) = check_kernel(kernel, ref, randn((130, 77), dtype, seed=9, std=3.0),
                          backends=NUMBA, reference_as="torch")
    assert out.dtype == np.dtype(getattr(ml_dtypes, dtype))


def _fp8_weights(d, f, dtype):
    return tuple(w.astype(getattr(ml_dtypes, dtype))
                 for w in _mlp_inputs(1, d, f, "float32")[1:])


@parametrize_dtypes("wdtype", FP8)
@parametrize_shapes("n,d,f", [(200, 96, 333), (150, 200, 300)])
def test_swiglu_mlp_fp8_weights(n, d, f, wdtype):
    """Weight-only fp8: bf16 activations times fp8 weights on the Tensor engine (fp32
    PSUM), hidden activations in bf16, bf16 output; the table's bf16 tolerance."""
    x = randn((n, d), "bfloat16", seed=3)
    check_kernel(swiglu_mlp, lambda *a: swiglu_mlp_torch(*a, hidden_dtype=torch.bfloat16),
                 x, *_fp8_weights(d, f, wdtype), backends=NUMBA, reference_as="torch")


@pytest.mark.parametrize("out", [None, "bfloat16"])
@parametrize_dtypes("dtype", FP8)
def test_swiglu_mlp_fp8_activations(dtype, out):
    """fp8 activations and weights: fp8 × fp8 matmuls, hidden activations rounded to fp8
    (the reference rounds them the same way), output fp8 or — ``out_dtype`` — bf16, checked
    with the table's tolerance of the output dtype."""
    n, d, f = 200, 96, 333
    x = randn((n, d), dtype, seed=3)
    hidden = getattr(ml_dtypes, dtype)
    (y,) = check_kernel(swiglu_mlp, lambda *a: swiglu_mlp_torch(*a, hidden_dtype=hidden),
                        x, *_fp8_weights(d, f, dtype), backends=NUMBA, reference_as="torch",
                        kernel_kwargs={} if out is None else {"out_dtype": nl.bfloat16})
    assert y.dtype == np.dtype(hidden if out is None else ml_dtypes.bfloat16)


def test_swiglu_mlp_fp32_with_fp8_weights_is_rejected():
    x = randn((8, 16), "float32", seed=3)
    with pytest.raises(ValueError, match="pairs float32 only with float32"):
        swiglu_mlp(x, *_fp8_weights(16, 24, "float8_e4m3"))


def test_mlp_fp8_both_backends():
    x = randn((5, 8), "float8_e4m3", seed=10)
    check_kernel(swiglu_mlp, lambda *a: swiglu_mlp_torch(*a, hidden_dtype=ml_dtypes.float8_e4m3),
                 x, *_fp8_weights(8, 12, "float8_e4m3"), reference_as="torch",
                 kernel_kwargs={"out_dtype": nl.bfloat16})
    check_kernel(silu, silu_torch, randn((3, 5), "float8_e5m2", seed=11, std=3.0),
                 reference_as="torch")
