"""Cross-entropy (per-row loss and mean) and its gradient against torch autograd."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from nki.kernels.losses import cross_entropy, cross_entropy_bwd, cross_entropy_torch

from nki.testing import check_kernel, parametrize_dtypes, parametrize_shapes, randint, randn

NUMBA = ("numba",)
# (130, 9000): several class chunks (4096 columns each)
SHAPES = [(200, 333), (256, 1000), (130, 9000)]


def cross_entropy_bwd_torch(logits, targets, ignore_index=-100, reduction="mean"):
    """torch autograd of ``F.cross_entropy(..., ignore_index, reduction)`` in float64."""
    x = logits.detach().clone().requires_grad_()
    F.cross_entropy(x, targets.long(), ignore_index=ignore_index,
                    reduction=reduction).backward()
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


def _ignored_inputs(n, c, dtype, ignore_index=-100, every=3):
    """Every ``every``-th row (and the first) targets ``ignore_index``."""
    x, t = _inputs(n, c, dtype)
    t[::every] = ignore_index
    return x, t


@parametrize_dtypes("dtype", ["float32", "bfloat16"])
@parametrize_shapes("n,c", [(200, 333), (130, 4100)])
def test_cross_entropy_ignore_index(n, c, dtype):
    """Ignored rows: loss 0, left out of the mean (torch's ``ignore_index=-100``)."""
    x, t = _ignored_inputs(n, c, dtype)
    loss, _ = check_kernel(cross_entropy, cross_entropy_torch, x, t, backends=NUMBA,
                           reference_as="torch")
    assert np.all(loss[::3] == 0.0) and np.all(loss[1::3] > 0.0)
    check_kernel(cross_entropy_bwd, cross_entropy_bwd_torch, x, t, backends=NUMBA,
                 reference_as="torch")


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_bwd_custom_ignore_index(reduction):
    """An ``ignore_index`` inside ``[0, C)``: rows targeting that class are ignored (their
    gradient row is 0, not a one-hot at that class); ``reduction="sum"`` drops the 1/n."""
    x, t = _ignored_inputs(150, 37, "float32", ignore_index=5, every=4)
    grad, = check_kernel(cross_entropy_bwd, lambda a, b: cross_entropy_bwd_torch(a, b, 5,
                                                                                 reduction),
                         x, t, backends=NUMBA, reference_as="torch",
                         kernel_kwargs={"ignore_index": 5, "reduction": reduction})
    assert np.all(grad[::4] == 0.0)
    check_kernel(cross_entropy, lambda a, b: cross_entropy_torch(a, b, 5), x, t,
                 backends=NUMBA, reference_as="torch", kernel_kwargs={"ignore_index": 5})


def test_cross_entropy_all_ignored():
    """Every row ignored: losses 0, mean NaN (0 / 0, as torch) and a zero gradient."""
    x, t = _ignored_inputs(20, 9, "float32", every=1)
    loss, mean = cross_entropy(x, t)
    assert np.all(loss == 0.0) and np.isnan(mean[0])
    assert torch.isnan(cross_entropy_torch(torch.from_numpy(x), torch.from_numpy(t))[1][0])
    check_kernel(cross_entropy_bwd, cross_entropy_bwd_torch, x, t, backends=NUMBA,
                 reference_as="torch")
    assert np.all(cross_entropy_bwd(x, t) == 0.0)


def test_cross_entropy_bad_reduction():
    x, t = _inputs(4, 5, "float32")
    with pytest.raises(ValueError, match="reduction"):
        cross_entropy_bwd(x, t, reduction="none")


def test_ignore_index_both_backends():
    x, t = _ignored_inputs(6, 7, "bfloat16", every=2)
    check_kernel(cross_entropy, cross_entropy_torch, x, t, reference_as="torch")
    check_kernel(cross_entropy_bwd, cross_entropy_bwd_torch, x, t, reference_as="torch")
