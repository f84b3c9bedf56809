"""tensor_tensor / tensor_scalar / tensor_copy / memset / dma_copy against numpy, both backends."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl

BF16 = ml_dtypes.bfloat16


def _binary_kernel(op):
    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        P = a.shape[0]
        for t in nl.affine_range((P + 127) // 128):
            p0, p1 = t * 128, min(P, t * 128 + 128)
            x = nl.ndarray((p1 - p0, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
            y = nl.ndarray((p1 - p0, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a[p0:p1, :])
            nisa.dma_copy(dst=y, src=b[p0:p1, :])
            nisa.tensor_tensor(dst=x, data1=x, data2=y, op=op)
            nisa.dma_copy(dst=out[p0:p1, :], src=x)
        return out
    return kernel


@pytest.mark.parametrize("op,ref", [(nl.add, np.add), (nl.subtract, np.subtract),
                                    (nl.multiply, np.multiply), (nl.maximum, np.maximum)])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_tensor_tensor_matches_numpy(backend, rng, op, ref, dtype):
    a = rng.standard_normal((200, 48)).astype(dtype)   # 200: one full and one partial tile
    b = rng.standard_normal((200, 48)).astype(dtype)
    y = nki.jit(_binary_kernel(op), backend=backend)(a, b)
    expect = ref(a.astype(np.float32), b.astype(np.float32)).astype(dtype)
    assert y.dtype == expect.dtype
    np.testing.assert_array_equal(y.view(np.uint8), expect.view(np.uint8))


@pytest.mark.parametrize("op,ref", [(nl.bitwise_and, np.bitwise_and),
                                    (nl.bitwise_xor, np.bitwise_xor), (nl.add, np.add)])
def test_tensor_tensor_int32_exact(backend, rng, op, ref):
    a = rng.integers(-2**30, 2**30, (64, 32)).astype(np.int32)
    b = rng.integers(-2**30, 2**30, (64, 32)).astype(np.int32)
    y = nki.jit(_binary_kernel(op), backend=backend)(a, b)
    np.testing.assert_array_equal(y, ref(a, b).astype(np.int32))
