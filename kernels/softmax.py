"""Row softmax: ``softmax(x, axis=-1)`` for ``x: [N, F]``, rows tiled over partitions.

Per 128-row tile: the row max on the Vector engine, ``exp(x - max)`` on the Scalar engine with
the row sums accumulated in the same instruction, one reciprocal, one scale.
"""

from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


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
        tile = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[p0:p1, :])
        neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=tile, axis=1, negate=True)
        total = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        expx = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=expx, op=nl.exp, data=tile, bias=neg_max, reduce_op=nl.add,
                        reduce_res=total, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv, data=total)
        res = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=expx, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out[p0:p1, :], src=res)
    return out


def softmax_reference(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
