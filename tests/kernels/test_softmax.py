"""Row softmax and log-softmax against torch."""

from __future__ import annotations

import pytest
from nki.kernels.softmax import log_softmax, log_softmax_torch, softmax_rows, softmax_torch

from nki.testing import check_kernel, parametrize_dtypes, parametrize_shapes, randn

NUMBA = ("numba",)
KERNELS = {"softmax": (softmax_rows, softmax_torch), "log_softmax": (log_softmax,
                                                                     log_softmax_torch)}


@pytest.mark.parametrize("name", list(KERNELS))
@parametrize_dtypes("dtype", ["float32", "bfloat16"])
@parametrize_shapes("n,f", [(200, 333), (256, 512), (5, 3000)])
def test_softmax(n, f, dtype, name):
    kernel, ref = KERNELS[name]
    x = randn((n, f), dtype, seed=1, std=4.0)
    check_kernel(kernel, ref, x, backends=NUMBA, reference_as="torch")


@pytest.mark.parametrize("name", list(KERNELS))
def test_softmax_both_backends(name):
    kernel, ref = KERNELS[name]
    check_kernel(kernel, ref, randn((5, 9), seed=2, std=4.0), reference_as="torch")
