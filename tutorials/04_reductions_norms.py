# ruff: noqa: N999  (numbered tutorial; run as a script or with python -m tutorials.NN_name)
"""Tutorial 04 — reductions and normalisations: softmax, and layernorm with bn_stats/bn_aggr.

Rows go on the partitions, so a row reduction is a *free-axis* reduction: one instruction
reduces every partition's row at once and leaves a [P, 1] column. Per-row scalars like that
are exactly what ``tensor_scalar`` and ``activation`` take as operands (``operand0=`` /
``bias=``), broadcast along the row.

* softmax, first naively (max, subtract, exp, sum, divide: five passes over the row), then
  fused: ``activation`` computes ``exp(x + bias)`` with ``bias = -max`` *and* sums the row
  into ``reduce_res`` in the same pass; one reciprocal of a [P, 1] column replaces P x F
  divisions.
* layernorm: the Vector engine's ``bn_stats`` gives per-row (count, mean, variance) of up to
  512 elements in one pass; ``bn_aggr`` merges several chunks' statistics (Chan's parallel
  variance), so rows of any length cost one read for the statistics.

Run: ``python tutorials/04_reductions_norms.py``
"""

from __future__ import annotations

import sys

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.testing import assert_close, randn

BN_FMAX = nl.tile_size.bn_stats_fmax          # 512 elements per bn_stats


def _row_tiles(N: int):
    return [(p, min(N, p + 128)) for p in range(0, N, 128)]


@nki.jit
def softmax_naive(x):
    """Five instructions per tile, each a full pass over the row."""
    N, F = x.shape
    out = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for p0, p1 in _row_tiles(N):
        P = p1 - p0
        t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[p0:p1, :])
        mx = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=mx, op=nl.maximum, data=t, axis=1)          # row max
        nisa.tensor_scalar(dst=t, data=t, op0=nl.subtract, operand0=mx)    # x - max
        nisa.activation(dst=t, op=nl.exp, data=t)                           # exp
        total = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=total, op=nl.add, data=t, axis=1)           # row sum
        res = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=t, op0=nl.divide, operand0=total)  # divide
        nisa.dma_copy(dst=out[p0:p1, :], src=res)
    return out


@nki.jit
def softmax_fused(x):
    """Max (negated) on VectorE; exp with the row sum on ScalarE in one pass; one multiply."""
    N, F = x.shape
    out = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for p0, p1 in _row_tiles(N):
        P = p1 - p0
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[p0:p1, :])
        neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=t, axis=1, negate=True)
        e = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        total = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e, op=nl.exp, data=t, bias=neg_max, reduce_op=nl.add,
                        reduce_res=total, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv, data=total)                       # P reciprocals, not P*F
        res = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=e, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out[p0:p1, :], src=res)
    return out


@nki.jit
def layernorm_kernel(x, gamma, beta, eps=1e-5):
    """``(x - mean) / sqrt(var + eps) * gamma + beta`` over rows of any length."""
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    # gamma/beta [D] -> [128, D] tiles: a DMA whose source has a stride-0 partition dim
    # copies the same row into every partition
    rows = min(N, 128)
    g = nl.ndarray((rows, D), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=g, src=gamma.reshape((1, D)).broadcast(0, rows))
    b = nl.ndarray((rows, D), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=beta.reshape((1, D)).broadcast(0, rows))
    chunks = (D + BN_FMAX - 1) // BN_FMAX
    for p0, p1 in _row_tiles(N):
        P = p1 - p0
        t = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[p0:p1, :])
        stats = nl.ndarray((P, 6 * chunks), dtype=nl.float32, buffer=nl.sbuf)
        for c in range(chunks):               # 6 numbers per chunk, side by side
            c0, c1 = c * BN_FMAX, min(D, (c + 1) * BN_FMAX)
            nisa.bn_stats(dst=stats[:, 6 * c:6 * c + 6], data=t[:, c0:c1])
        mv = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=stats)                          # (mean, var) per row
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd, data=mv[:, 1:2], op0=nl.add, operand0=float(eps),
                           op1=nl.rsqrt, operand1=None)           # 1 / sqrt(var + eps)
        y = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=t, op0=nl.subtract, operand0=mv[:, 0:1],
                           op1=nl.multiply, operand1=rstd)        # (x - mean) * rstd
        nisa.tensor_tensor(dst=y, data1=y, data2=g[0:P, :], op=nl.multiply)
        res = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=res, data1=y, data2=b[0:P, :], op=nl.add)
        nisa.dma_copy(dst=out[p0:p1, :], src=res)
    return out


def softmax_reference(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def layernorm_reference(x, g, b, eps=1e-5):
    x = x.astype(np.float64)
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * g + b


def main() -> int:
    """Both softmaxes against numpy, instruction counts; layernorm with 1-3 bn_stats chunks."""
    x = randn((300, 1000), seed=0, std=4.0)
    # full-width passes over a [P, F] tile per row tile: naive 5 (max, subtract, exp, sum,
    # divide), fused 3 (max, exp+sum, multiply); the rest touch [P, 1] columns or move data
    for kernel, passes in ((softmax_naive, 5), (softmax_fused, 3)):
        c = assert_close(kernel(x), softmax_reference(x))
        per_tile = kernel.specialize(x[:128]).num_instructions
        print(f"{kernel.__name__:14s}: {per_tile} instructions per row tile, {passes} of them "
              f"over the whole row; max abs error {c.max_abs[0]:.2e}")
    xb = randn((300, 1000), "bf16", seed=1, std=4.0)
    c = assert_close(softmax_fused(xb), softmax_reference(xb))
    print(f"softmax_fused bf16: max rel error {c.max_rel[0]:.2e} (bf16 rtol {c.tol.rtol})")

    for D in (200, 512, 1300):                      # 1, 1 and 3 bn_stats chunks
        x = randn((200, D), seed=D, mean=1.0, std=3.0)
        g, b = randn(D, seed=1), randn(D, seed=2)
        c = assert_close(layernorm_kernel(x, g, b), layernorm_reference(x, g, b))
        print(f"layernorm [200, {D}]: {(D + BN_FMAX - 1) // BN_FMAX} bn_stats chunk(s), "
              f"max abs error {c.max_abs[0]:.2e}")
    print("tutorial 04 OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
