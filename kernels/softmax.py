"""Row softmax and log-softmax over the last axis of ``x: [N, F]``, rows tiled over partitions.

``softmax_rows(x)``: per 128-row tile, the row max on the Vector engine, ``exp(x - max)`` on
the Scalar engine with the row sums accumulated in the same instruction, one reciprocal, one
scale.

``log_softmax(x)`` = ``x - max - log(sum(exp(x - max)))``: the same max and exp-with-row-sum
(the exponentials themselves are discarded), ``log`` of the ``[P, 1]`` sums, and one
Vector-engine pass ``x + (-max - log(sum))`` that writes the result in x's dtype. Rows of any
length up to what one SBUF tile holds; any number of rows (the last tile is clipped).
"""

from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


def _exp_rows(rows, P: int, F: int):
    """Load ``rows`` [P, F]; return the tile, ``-max`` per row, ``exp(x - max)`` and its row
    sums (the Scalar engine sums while it exponentiates)."""
    tile = nl.ndarray((P, F), dtype=rows.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=rows)
    neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=tile, axis=1, negate=True)
    total = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    expx = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=expx, op=nl.exp, data=tile, bias=neg_max, reduce_op=nl.add,
                    reduce_res=total, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    return tile, neg_max, expx, total


@nki.jit
def softmax_rows(x):
    """Numerically stable softmax over the last axis of a 2-D tensor.

    Example:
        >>> y = softmax_rows(np.random.rand(1000, 512).astype(np.float32))  # doctest: +SKIP
    """
    N, F = x.shape
    out = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range((N + 127) // 128):
        p0, p1 = t * 128, min(N, t * 128 + 128)
        P = p1 - p0
        tile, neg_max, expx, total = _exp_rows(x[p0:p1, :], P, F)
        inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv, data=total)
        res = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=expx, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out[p0:p1, :], src=res)
    return out


@nki.jit
def log_softmax(x):
    """Numerically stable log-softmax over the last axis of a 2-D tensor.

    Example:
        >>> y = log_softmax(np.random.rand(200, 333).astype(np.float32))  # doctest: +SKIP
    """
    N, F = x.shape
    out = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range((N + 127) // 128):
        p0, p1 = t * 128, min(N, t * 128 + 128)
        P = p1 - p0
        tile, neg_max, expx, total = _exp_rows(x[p0:p1, :], P, F)
        log_total = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=log_total, op=nl.log, data=total)
        shift = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)      # -max - log(sum)
        nisa.tensor_tensor(dst=shift, data1=neg_max, data2=log_total, op=nl.subtract)
        res = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=tile, op0=nl.add, operand0=shift)
        nisa.dma_copy(dst=out[p0:p1, :], src=res)
    return out


def softmax_torch(x):
    """torch reference in float64."""
    import torch

    return torch.softmax(x.double(), dim=-1)


def log_softmax_torch(x):
    """torch reference in float64."""
    import torch

    return torch.log_softmax(x.double(), dim=-1)


def softmax_reference(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
