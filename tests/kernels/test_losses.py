"""Cross-entropy (per-row loss and mean) and its gradient against torch autograd."""

from __future__ import annotations

import numpy as np
import torch
from nki.kernels.losses import cross_entropy, cross_entropy_bwd, cross_entropy_torch

from nki.testing import check_kernel, parametrize_dtypes, parametrize_shapes, randint, randn

NUMBA = ("numba",)
# (130, 9000): several class chunks (4096 columns each)
SHAPES = [(200, 333), (256, 1000), (130, 9000)]


def cross_entropy_bwd_torch(logits, targets):
    x = logits.detach().clone().requires_grad_()
    cross_entropy_torch(x, targets)[1].sum().backward()
    return x.grad


def _inputs(n, c, dtype):
    return randn((n, c), dtype, seed=1, std=3.0), randint((n,), 0, c, "int32", seed=2)


@parametrize_dtypes("dtype", ["float32", "bfloat16"])
@parametrize_shapes("n,c", SHAPES)
def test_cross_entropy(n, c, dtype):
    """Loss and mean in fp32 whatever the logits' dtype (computed from the exact inputs)."""
    outs = check_kernel(cross_entropy, cross_entropy_torch, *_inputs(n, c, dtype),
                        backends=NUMBA, reference_as="torch")
    assert [o.dtype for o in outs] == [np.float32, np.float32]


@parametrize_dtypes("dtype", ["float32", "bfloat16"])
@parametrize_shapes("n,c", SHAPES)
def test_cross_entropy_bwd(n, c, dtype):
    check_kernel(cross_entropy_bwd, cross_entropy_bwd_torch, *_inputs(n, c, dtype),
                 backends=NUMBA, reference_as="torch")


def test_cross_entropy_extreme_logits():
    """Large-magnitude logits: the max shift keeps exp finite."""
    x, t = _inputs(64, 50, "float32")
    x = x * 1000.0
    check_kernel(cross_entropy, cross_entropy_torch, x, t, backends=NUMBA, reference_as="torch")


def test_losses_both_backends():
    x, t = _inputs(5, 7, "float32")
    check_kernel(cross_entropy, cross_entropy_torch, x, t, reference_as="torch")
    check_kernel(cross_entropy_bwd, cross_entropy_bwd_torch, x, t, reference_as="torch")
    assert torch.is_tensor(cross_entropy_bwd_torch(torch.zeros(1, 2), torch.zeros(1).long()))
