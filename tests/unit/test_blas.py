"""nki_sgemm (nki/sim/blas.py): the bound BLAS and the fallback adapter compute the same
row-major products as numpy, for every transpose combination and strided leading dims."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from nki.sim import blas


def _call(fn, ta, tb, a, b, c, alpha, beta):
    M, N = c.shape
    K = a.shape[0] if ta else a.shape[1]
    ptr = ctypes.c_void_p
    fn(blas.ROW_MAJOR, blas.TRANS if ta else blas.NO_TRANS, blas.TRANS if tb else
       blas.NO_TRANS, M, N, K, alpha, ptr(a.ctypes.data), a.strides[0] // 4,
       ptr(b.ctypes.data), b.strides[0] // 4, beta, ptr(c.ctypes.data), c.strides[0] // 4)


@pytest.fixture(scope="module")
def adapter():
    return blas._CTYPES_SIGNATURE(blas._xxgemm_adapter())


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("which", ["bound", "adapter"])
def test_sgemm_matches_numpy(which, ta, tb, adapter):
    rng = np.random.default_rng(0)
    M, N, K = 37, 53, 29
    # operands are windows of wider arrays: leading dims larger than the row length
    a = rng.standard_normal((K, M + 7) if ta else (M, K + 7)).astype(np.float32)
    b = rng.standard_normal((N, K + 5) if tb else (K, N + 5)).astype(np.float32)
    a = a[:, :M] if ta else a[:, :K]
    b = b[:, :K] if tb else b[:, :N]
    c0 = rng.standard_normal((M, N + 3)).astype(np.float32)
    c = c0.copy()[:, :N]
    fn = blas.nki_sgemm_py if which == "bound" else adapter
    _call(fn, ta, tb, a, b, c, 0.5, 1.0)
    opa = (a.T if ta else a).astype(np.float64)
    opb = (b.T if tb else b).astype(np.float64)
    expected = 0.5 * opa @ opb + c0[:, :N]
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)

