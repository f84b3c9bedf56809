"""LayerNorm / RMSNorm forward, fused residual RMSNorm, and both backward kernels against
torch (float64 autograd of the exact inputs)."""

from __future__ import annotations

import torch
from nki.kernels.norms import (
    layernorm,
    layernorm_bwd,
    layernorm_torch,
    rmsnorm,
    rmsnorm_bwd,
    rmsnorm_residual,
    rmsnorm_torch,
)

from nki.testing import check_kernel, parametrize_dtypes, parametrize_shapes, randn

NUMBA = ("numba",)
DTYPES = ["float32", "bfloat16"]
# (200, 333): odd sizes; (256, 1100): bn_stats chunks; (130, 2500): weight-gradient row sums
# wider than PSUM's budget, summed in SBUF
SHAPES = [(200, 333), (256, 1100), (130, 2500)]


def _grads(fn, dy, x, *params):
    """torch autograd: gradients of ``sum(fn(x, *params) * dy)`` wrt x and params."""
    leaves = [t.detach().clone().requires_grad_() for t in (x, *params)]
    fn(*leaves).backward(dy)
    return tuple(t.grad for t in leaves)


def layernorm_bwd_torch(dy, x, gamma):
    beta = torch.zeros_like(gamma)
    return _grads(lambda x, g, b: layernorm_torch(x, g, b), dy, x, gamma, beta)


def rmsnorm_bwd_torch(dy, x, gamma):
    return _grads(rmsnorm_torch, dy, x, gamma)


def rmsnorm_residual_torch(x, res, gamma):
    h = x + res
    return rmsnorm_torch(h, gamma), h


def _x(n, d, dtype, seed=1):
    return randn((n, d), dtype, seed=seed, mean=0.5, std=2.0)


@parametrize_dtypes("dtype", DTYPES)
@parametrize_shapes("n,d", SHAPES[:2])
def test_layernorm(n, d, dtype):
    check_kernel(layernorm, layernorm_torch, _x(n, d, dtype), randn(d, dtype, seed=2),
                 randn(d, dtype, seed=3), backends=NUMBA, reference_as="torch")


@parametrize_dtypes("dtype", DTYPES)
@parametrize_shapes("n,d", SHAPES[:2])
def test_rmsnorm(n, d, dtype):
    check_kernel(rmsnorm, rmsnorm_torch, _x(n, d, dtype), randn(d, dtype, seed=2),
                 backends=NUMBA, reference_as="torch")


@parametrize_dtypes("dtype", DTYPES)
@parametrize_shapes("n,d", SHAPES[:2])
def test_rmsnorm_residual(n, d, dtype):
    """(normed, x + residual); in bf16 the sum is rounded before the norm, as in torch."""
    x, r, g = _x(n, d, dtype), randn((n, d), dtype, seed=4), randn(d, dtype, seed=2)
    if dtype == "float32":
        check_kernel(rmsnorm_residual, rmsnorm_residual_torch, x, r, g, backends=NUMBA,
                     reference_as="torch")
    else:   # the reference rounds h to bf16 like the kernel (and torch in bf16) does
        def ref(x, r, g):
            h = (x + r).to(torch.bfloat16).double()
            return rmsnorm_torch(h, g), h
        check_kernel(rmsnorm_residual, ref, x, r, g, backends=NUMBA, reference_as="torch")


@parametrize_dtypes("dtype", DTYPES)
@parametrize_shapes("n,d", SHAPES)
def test_layernorm_bwd(n, d, dtype):
    dy, x, g = randn((n, d), dtype, seed=5), _x(n, d, dtype), randn(d, dtype, seed=2)
    check_kernel(layernorm_bwd, layernorm_bwd_torch, dy, x, g, backends=NUMBA,
                 reference_as="torch")


@parametrize_dtypes("dtype", DTYPES)
@parametrize_shapes("n,d", SHAPES)
def test_rmsnorm_bwd(n, d, dtype):
    dy, x, g = randn((n, d), dtype, seed=5), _x(n, d, dtype), randn(d, dtype, seed=2)
    check_kernel(rmsnorm_bwd, rmsnorm_bwd_torch, dy, x, g, backends=NUMBA,
                 reference_as="torch")


def test_norms_both_backends():
    n, d = 5, 9
    dy, x, g, b = randn((n, d), seed=5), _x(n, d, "float32"), randn(d, seed=2), randn(d, seed=3)
    check_kernel(layernorm_bwd, layernorm_bwd_torch, dy, x, g, reference_as="torch")
    check_kernel(rmsnorm_bwd, rmsnorm_bwd_torch, dy, x, g, reference_as="torch")
    check_kernel(rmsnorm_residual, rmsnorm_residual_torch, x, dy, g, reference_as="torch")
    check_kernel(layernorm, layernorm_torch, x, g, b, reference_as="torch")
