"""GELU, SiLU and the SwiGLU MLP block against torch."""

from __future__ import annotations

import pytest
import torch
from nki.kernels.mlp import gelu, gelu_torch, silu, silu_torch, swiglu_mlp, swiglu_mlp_torch

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
    check_kernel(swiglu_mlp, swiglu_mlp_torch, *_mlp_inputs(5, 8, 12, "float32"),
                 reference_as="torch")
