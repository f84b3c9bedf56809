"""Layer normalisation (bn_stats/bn_aggr statistics) and RMS normalisation, rows on partitions,
forward and backward.

Forward: ``layernorm(x, gamma, beta, eps)``, ``rmsnorm(x, gamma, eps)`` and
``rmsnorm_residual(x, residual, gamma, eps) -> (normed, x + residual)`` (the pre-norm block's
fused residual add) for ``x: [N, D]`` and per-feature weights ``[D]``. Rows go 128 per tile
on the partitions; every statistic is a free-dim reduction on the Vector/Scalar engines.
Weights are broadcast to all 128 partitions once by a DMA with a stride-0 partition dim.

Backward: ``layernorm_bwd(dy, x, gamma, eps) -> (dx, dgamma, dbeta)`` and
``rmsnorm_bwd(dy, x, gamma, eps) -> (dx, dgamma)`` recompute the row statistics from ``x``
(no saved activations needed). Per row tile, with ``x̂`` the normalised rows, ``g = dy·γ``
and ``rstd = 1/sqrt(var + eps)`` (or ``1/rms``):

* layernorm: ``dx = rstd · (g - mean(g) - x̂ · mean(g·x̂))``
* rmsnorm:   ``dx = rstd · (g - x̂ · mean(g·x̂))``

The weight gradients are sums over *rows*, i.e. over partitions, which the Vector engine
cannot do: the Tensor engine does them, as a ones-vector matmul ``ones[P, 1]ᵀ @ [dy·x̂ | dy]``
that accumulates every row tile into one ``[1, W]`` fp32 PSUM row (``accumulate=t > 0``).
Each row tile writes ``dy·x̂`` (and ``dy``, loaded straight there) into one ``[P, W]`` tile so
that one wide matmul per tile covers both gradients. Rows wider than the PSUM budget are
summed per tile into an fp32 SBUF row instead.
"""

from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

from .matmul import moving_tile

BN_FMAX = 512
PSUM_ROW_MAX = 2048     # fp32 columns of row-sum accumulators kept in PSUM (half of PSUM)


def _broadcast_rows(w, rows: int, dtype):
    """A [rows, D] SBUF tile whose every partition holds the vector ``w`` [D]."""
    tile = nl.ndarray((rows, w.shape[0]), dtype=dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=w.reshape((1, w.shape[0])).broadcast(0, rows))
    return tile


def _mean_rstd(tile, P: int, D: int, chunks: int, eps: float):
    """Per-row ``[mean, var]`` (``bn_stats`` per <= 512-column chunk, ``bn_aggr``) and
    ``1/sqrt(var + eps)`` of an SBUF tile [P, D]."""
    stats = nl.ndarray((P, 6 * chunks), dtype=nl.float32, buffer=nl.sbuf)
    for c in range(chunks):
        c0, c1 = c * BN_FMAX, min(D, (c + 1) * BN_FMAX)
        nisa.bn_stats(dst=stats[:, 6 * c:6 * c + 6], data=tile[:, c0:c1])
    mv = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.bn_aggr(dst=mv, data=stats)
    rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=rstd, data=mv[:, 1:2], op0=nl.add, operand0=float(eps),
                       op1=nl.rsqrt, operand1=None)
    return mv, rstd


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
        mv, rstd = _mean_rstd(tile, P, D, chunks, eps)
        # two VectorE passes: (x - mean) * gamma, then that * rstd + beta
        norm = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=norm, data=tile, op0=nl.subtract, operand0=mv[:, 0:1],
                                  op1=nl.multiply, operand1=g[0:P, :])
        res = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=res, data=norm, op0=nl.multiply, operand0=rstd,
                                  op1=nl.add, operand1=b[0:P, :])
        nisa.dma_copy(dst=out[p0:p1, :], src=res)
    return out


def _rms_rstd(tile, P: int, D: int, eps: float):
    """``1 / sqrt(mean(tile**2) + eps)`` per row, [P, 1] fp32."""
    sq = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
    ss = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation_reduce(dst=sq, op=nl.square, data=tile, reduce_op=nl.add, reduce_res=ss)
    rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=rstd, data=ss, op0=nl.multiply, operand0=1.0 / D,
                       op1=nl.add, operand1=float(eps))
    nisa.activation(dst=rstd, op=nl.rsqrt, data=rstd)
    return rstd


def _rms_tile(tile, g, P: int, D: int, eps: float, dtype):
    """``tile / rms(tile) * g`` of one row tile, as a new [P, D] SBUF tile of ``dtype``: one
    VectorE pass (times the row's rstd, rounded to fp32, then times gamma), not a tensor_scalar
    into an fp32 tile and a tensor_tensor over it (the same roundings, one tile less)."""
    rstd = _rms_rstd(tile, P, D, eps)
    res = nl.ndarray((P, D), dtype=dtype, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=res, data=tile, op0=nl.multiply, operand0=rstd,
                              op1=nl.multiply, operand1=g[0:P, :])
    return res


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
        res = _rms_tile(tile, g, P, D, eps, x.dtype)
        nisa.dma_copy(dst=out[p0:p1, :], src=res)
    return out


@nki.jit
def rmsnorm_residual(x, residual, gamma, eps=1e-6):
    """Pre-norm block entry: ``h = x + residual`` (rounded to x's dtype, as torch would), then
    ``rmsnorm(h)``. Returns ``(normed, h)``; ``h`` is the residual stream for the next block.

    Example:
        >>> y, h = rmsnorm_residual(x, r, g)   # x, r: [N, D], g: [D]   # doctest: +SKIP
    """
    N, D = x.shape
    normed = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    new_res = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    g = _broadcast_rows(gamma, min(N, 128), nl.float32)
    for t in nl.affine_range((N + 127) // 128):
        p0, p1 = t * 128, min(N, t * 128 + 128)
        P = p1 - p0
        a = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[p0:p1, :])
        b = nl.ndarray((P, D), dtype=residual.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=residual[p0:p1, :])
        h = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=h, data1=a, data2=b, op=nl.add)
        nisa.dma_copy(dst=new_res[p0:p1, :], src=h)
        res = _rms_tile(h, g, P, D, eps, x.dtype)
        nisa.dma_copy(dst=normed[p0:p1, :], src=res)
    return normed, new_res


# ----- backward ------------------------------------------------------------------------------
class _RowSums(nl.NKIObject):
    """Column sums of ``[P, W]`` fp32 tiles over their rows and over successive row tiles:
    ones-vector matmuls on the Tensor engine, accumulated in PSUM (or, for rows wider than
    ``PSUM_ROW_MAX``, per tile into an fp32 SBUF row)."""

    def __init__(self, W: int, rows: int):
        self.W = W
        self.cw = moving_tile(W)
        self.chunks = [(c, min(W, c + self.cw)) for c in range(0, W, self.cw)]
        self.ones = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=self.ones, value=1.0)
        self.in_psum = W <= PSUM_ROW_MAX
        if self.in_psum:
            self.acc = [nl.ndarray((1, c1 - c0), dtype=nl.float32, buffer=nl.psum)
                        for c0, c1 in self.chunks]
        else:
            self.acc = nl.ndarray((1, W), dtype=nl.float32, buffer=nl.sbuf)
        self.first = True

    def add(self, tile, P: int):
        for i, (c0, c1) in enumerate(self.chunks):
            if self.in_psum:
                nisa.nc_matmul(dst=self.acc[i], stationary=self.ones[0:P, :],
                               moving=tile[:, c0:c1], accumulate=not self.first)
            else:
                part = nl.ndarray((1, c1 - c0), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=part, stationary=self.ones[0:P, :],
                               moving=tile[:, c0:c1], accumulate=False)
                if self.first:
                    nisa.tensor_copy(dst=self.acc[:, c0:c1], src=part)
                else:
                    nisa.tensor_tensor(dst=self.acc[:, c0:c1], data1=self.acc[:, c0:c1],
                                       data2=part, op=nl.add)
        self.first = False

    def store(self, dsts):
        """Write columns ``[c0, c1)`` to each ``(c0, c1, hbm_vector)`` of ``dsts``."""
        res = self.acc
        if self.in_psum:
            res = nl.ndarray((1, self.W), dtype=nl.float32, buffer=nl.sbuf)
            for i, (c0, c1) in enumerate(self.chunks):
                nisa.tensor_copy(dst=res[:, c0:c1], src=self.acc[i])
        for c0, c1, vec in dsts:
            n = vec.shape[0]
            if vec.dtype == nl.float32:
                nisa.dma_copy(dst=vec.reshape((1, n)), src=res[:, c0:c1])
            else:
                cast = nl.ndarray((1, n), dtype=vec.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=cast, src=res[:, c0:c1])
                nisa.dma_copy(dst=vec.reshape((1, n)), src=cast)


@nki.jit
def layernorm_bwd(dy, x, gamma, eps=1e-5):
    """Gradients of ``layernorm(x, gamma, beta, eps)``: returns ``(dx, dgamma, dbeta)``.

    Example:
        >>> dx, dg, db = layernorm_bwd(dy, x, g)   # dy, x: [N, D], g: [D]   # doctest: +SKIP
    """
    N, D = x.shape
    dx = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    dgamma = nl.ndarray((D,), dtype=gamma.dtype, buffer=nl.shared_hbm)
    dbeta = nl.ndarray((D,), dtype=gamma.dtype, buffer=nl.shared_hbm)
    rows = min(N, 128)
    g_b = _broadcast_rows(gamma, rows, nl.float32)
    sums = _RowSums(2 * D, rows)
    chunks = (D + BN_FMAX - 1) // BN_FMAX
    for t in nl.sequential_range((N + 127) // 128):
        p0, p1 = t * 128, min(N, t * 128 + 128)
        P = p1 - p0
        xt = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[p0:p1, :])
        cat = nl.ndarray((P, 2 * D), dtype=nl.float32, buffer=nl.sbuf)   # [dy·x̂ | dy]
        dyt = cat[:, D:2 * D]
        nisa.dma_copy(dst=dyt, src=dy[p0:p1, :])
        mv, rstd = _mean_rstd(xt, P, D, chunks, eps)
        xhat = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=xhat, data=xt, op0=nl.subtract, operand0=mv[:, 0:1],
                           op1=nl.multiply, operand1=rstd)
        nisa.tensor_tensor(dst=cat[:, 0:D], data1=dyt, data2=xhat, op=nl.multiply)
        sums.add(cat, P)
        g = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=g, data1=dyt, data2=g_b[0:P, :], op=nl.multiply)
        means = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)   # mean(g), mean(g·x̂)
        nisa.tensor_reduce(dst=means[:, 0:1], op=nl.add, data=g, axis=1)
        _row_sum_of_product(means[:, 1:2], g, xhat, P, D)
        nisa.tensor_scalar(dst=means, data=means, op0=nl.multiply, operand0=1.0 / D)
        tmp = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)       # g - x̂·mean(g·x̂)
        nisa.scalar_tensor_tensor(dst=tmp, data=xhat, op0=nl.multiply, operand0=means[:, 1:2],
                                  op1=nl.subtract, operand1=g, reverse1=True)
        res = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=tmp, op0=nl.subtract, operand0=means[:, 0:1],
                           op1=nl.multiply, operand1=rstd)
        nisa.dma_copy(dst=dx[p0:p1, :], src=res)
    sums.store([(0, D, dgamma), (D, 2 * D, dbeta)])
    return dx, dgamma, dbeta


def _row_sum_of_product(dst, a, b, P: int, D: int):
    """``dst[P, 1] = sum(a * b)`` per row: one product pass, one reduction."""
    prod = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=prod, data1=a, data2=b, op=nl.multiply)
    nisa.tensor_reduce(dst=dst, op=nl.add, data=prod, axis=1)


@nki.jit
def rmsnorm_bwd(dy, x, gamma, eps=1e-6):
    """Gradients of ``rmsnorm(x, gamma, eps)``: returns ``(dx, dgamma)``.

    Example:
        >>> dx, dg = rmsnorm_bwd(dy, x, g)   # dy, x: [N, D], g: [D]   # doctest: +SKIP
    """
    N, D = x.shape
    dx = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    dgamma = nl.ndarray((D,), dtype=gamma.dtype, buffer=nl.shared_hbm)
    rows = min(N, 128)
    g_b = _broadcast_rows(gamma, rows, nl.float32)
    sums = _RowSums(D, rows)
    for t in nl.sequential_range((N + 127) // 128):
        p0, p1 = t * 128, min(N, t * 128 + 128)
        P = p1 - p0
        xt = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[p0:p1, :])
        dyt = nl.ndarray((P, D), dtype=dy.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=dyt, src=dy[p0:p1, :])
        rstd = _rms_rstd(xt, P, D, eps)
        xhat = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=xhat, data=xt, op0=nl.multiply, operand0=rstd)
        dyx = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=dyx, data1=dyt, data2=xhat, op=nl.multiply)
        sums.add(dyx, P)
        g = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=g, data1=dyt, data2=g_b[0:P, :], op=nl.multiply)
        mean_gx = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        _row_sum_of_product(mean_gx, g, xhat, P, D)
        nisa.tensor_scalar(dst=mean_gx, data=mean_gx, op0=nl.multiply, operand0=1.0 / D)
        tmp = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)       # g - x̂·mean(g·x̂)
        nisa.scalar_tensor_tensor(dst=tmp, data=xhat, op0=nl.multiply, operand0=mean_gx,
                                  op1=nl.subtract, operand1=g, reverse1=True)
        res = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=tmp, op0=nl.multiply, operand0=rstd)
        nisa.dma_copy(dst=dx[p0:p1, :], src=res)
    sums.store([(0, D, dgamma)])
    return dx, dgamma


def layernorm_reference(x, gamma, beta, eps=1e-5):
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma.astype(np.float64) + beta.astype(np.float64)


def rmsnorm_reference(x, gamma, eps=1e-6):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * gamma.astype(np.float64)


def layernorm_torch(x, gamma, beta, eps=1e-5):
    """torch reference in float64 (differentiable: use with autograd for the backward)."""
    import torch.nn.functional as F

    return F.layer_norm(x.double(), (x.shape[-1],), gamma.double(), beta.double(), eps)


def rmsnorm_torch(x, gamma, eps=1e-6):
    """torch reference in float64 (differentiable)."""
    import torch.nn.functional as F

    return F.rms_norm(x.double(), (x.shape[-1],), gamma.double(), eps)
