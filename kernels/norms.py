"""Layer normalisation (bn_stats/bn_aggr statistics) and RMS normalisation, rows on partitions.

``layernorm(x, gamma, beta, eps)`` and ``rmsnorm(x, gamma, eps)`` for ``x: [N, D]`` and
per-feature weights ``[D]``. Weights are broadcast to all 128 partitions once by a DMA with a
stride-0 partition dim.
"""

from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

BN_FMAX = 512


def _broadcast_rows(w, rows: int, dtype):
    """A [rows, D] SBUF tile whose every partition holds the vector ``w`` [D]."""
    tile = nl.ndarray((rows, w.shape[0]), dtype=dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=w.reshape((1, w.shape[0])).broadcast(0, rows))
    return tile


@nki.jit
def layernorm(x, gamma, beta, eps=1e-5):
    """``(x - mean) / sqrt(var + eps) * gamma + beta`` over the last axis.

    Example:
        >>> y = layernorm(x, g, b)   # x: [N, D], g, b: [D]   # doctest: +SKIP
    """
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    g = _broadcast_rows(gamma, min(N, 128), nl.float32)
    b = _broadcast_rows(beta, min(N, 128), nl.float32)
    chunks = (D + BN_FMAX - 1) // BN_FMAX
    for t in nl.affine_range((N + 127) // 128):
        p0, p1 = t * 128, min(N, t * 128 + 128)
        P = p1 - p0
        tile = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[p0:p1, :])
        stats = nl.ndarray((P, 6 * chunks), dtype=nl.float32, buffer=nl.sbuf)
        for c in range(chunks):
            c0, c1 = c * BN_FMAX, min(D, (c + 1) * BN_FMAX)
            nisa.bn_stats(dst=stats[:, 6 * c:6 * c + 6], data=tile[:, c0:c1])
        mv = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=stats)
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd, data=mv[:, 1:2], op0=nl.add, operand0=float(eps),
                           op1=nl.rsqrt, operand1=None)
        norm = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=norm, data=tile, op0=nl.subtract, operand0=mv[:, 0:1],
                           op1=nl.multiply, operand1=rstd)
        nisa.tensor_tensor(dst=norm, data1=norm, data2=g[0:P, :], op=nl.multiply)
        res = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=res, data1=norm, data2=b[0:P, :], op=nl.add)
        nisa.dma_copy(dst=out[p0:p1, :], src=res)
    return out


@nki.jit
def rmsnorm(x, gamma, eps=1e-6):
    """``x / sqrt(mean(x**2) + eps) * gamma`` over the last axis.

    Example:
        >>> y = rmsnorm(x, g)   # x: [N, D], g: [D]   # doctest: +SKIP
    """
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    g = _broadcast_rows(gamma, min(N, 128), nl.float32)
    for t in nl.affine_range((N + 127) // 128):
        p0, p1 = t * 128, min(N, t * 128 + 128)
        P = p1 - p0
        tile = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[p0:p1, :])
        sq = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        ss = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(dst=sq, op=nl.square, data=tile, reduce_op=nl.add,
                               reduce_res=ss)
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd, data=ss, op0=nl.multiply, operand0=1.0 / D,
                           op1=nl.add, operand1=float(eps))
        nisa.activation(dst=rstd, op=nl.rsqrt, data=rstd)
        norm = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=norm, data=tile, op0=nl.multiply, operand0=rstd)
        res = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=res, data1=norm, data2=g[0:P, :], op=nl.multiply)
        nisa.dma_copy(dst=out[p0:p1, :], src=res)
    return out


def layernorm_reference(x, gamma, beta, eps=1e-5):
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma.astype(np.float64) + beta.astype(np.float64)


def rmsnorm_reference(x, gamma, eps=1e-6):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * gamma.astype(np.float64)
