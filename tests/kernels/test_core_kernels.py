"""The realistic kernels of the core issue against float64 numpy references."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from nki.kernels.attention import attention_reference, flash_attention_fwd
from nki.kernels.matmul import matmul_lhsT, matmul_reference
from nki.kernels.norms import layernorm, layernorm_reference, rmsnorm, rmsnorm_reference
from nki.kernels.softmax import softmax_reference, softmax_rows

import nki

BF16 = ml_dtypes.bfloat16
TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), BF16: dict(rtol=2e-2, atol=2e-2)}


def _run(kernel, backend, *args, **kw):
    return nki.jit(kernel.fn, backend=backend)(*args, **kw)


@pytest.mark.parametrize("shape", [(256, 384, 640), (200, 130, 300)], ids=["tiles", "edges"])
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["fp32", "bf16"])
def test_matmul(backend, rng, shape, dtype):
    K, M, N = shape
    lhsT = rng.standard_normal((K, M)).astype(dtype)
    rhs = rng.standard_normal((K, N)).astype(dtype)
    out = _run(matmul_lhsT, backend, lhsT, rhs)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype is np.float32 else dict(rtol=1e-2, atol=5e-2)
    np.testing.assert_allclose(out.astype(np.float64), matmul_reference(lhsT, rhs), **tol)


@pytest.mark.parametrize("shape", [(256, 512), (100, 70)], ids=["tiles", "edges"])
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["fp32", "bf16"])
def test_softmax(backend, rng, shape, dtype):
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    out = _run(softmax_rows, backend, x)
    np.testing.assert_allclose(out.astype(np.float64), softmax_reference(x), **TOL[dtype])


@pytest.mark.parametrize("shape", [(256, 1100), (60, 96)], ids=["chunks", "edges"])
def test_layernorm(backend, rng, shape):
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    g = rng.standard_normal(shape[1]).astype(np.float32)
    b = rng.standard_normal(shape[1]).astype(np.float32)
    out = _run(layernorm, backend, x, g, b)
    np.testing.assert_allclose(out, layernorm_reference(x, g, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(256, 512), (90, 200)], ids=["tiles", "edges"])
def test_rmsnorm(backend, rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    g = rng.standard_normal(shape[1]).astype(np.float32)
    out = _run(rmsnorm, backend, x, g)
    np.testing.assert_allclose(out, rmsnorm_reference(x, g), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("seq,d", [(256, 64), (200, 128)], ids=["s256-d64", "s200-d128"])
def test_flash_attention(backend, rng, causal, seq, d):
    q, k, v = (rng.standard_normal((seq, d)).astype(np.float32) for _ in range(3))
    out = _run(flash_attention_fwd, backend, q, k, v, causal=causal)
    np.testing.assert_allclose(out, attention_reference(q, k, v, causal), rtol=1e-4,
                               atol=1e-4)
