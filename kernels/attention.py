"""Flash attention forward for one head, with online softmax and an optional causal mask.

``flash_attention_fwd(q, k, v, causal=True)`` for ``q: [Sq, d]``, ``k, v: [Sk, d]``, d ≤ 128.
Queries go 128 per tile on the partitions. For each key tile: scores ``q kᵀ`` on the Tensor
engine into PSUM, the causal mask by ``affine_select`` on diagonal tiles only, the running
max/sum update, ``exp`` with the row sums from the same Scalar-engine instruction, the
probabilities transposed on the Tensor engine and multiplied into V, and the accumulator
rescaled — never materialising the [Sq, Sk] score matrix. With ``causal`` the key loop of
query tile ``i`` stops at the diagonal, so its trip count grows with ``i`` (a triangular nest
that the simulator folds into one loop nest).
"""

from __future__ import annotations

import math

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

NEG_INF = -3.0e38   # finite "minus infinity": exp() of it is exactly 0 and max() stays finite


def _transposed(src, rows: int, cols: int, dtype):
    """Load ``src`` [rows, cols] from HBM as an SBUF tile [cols, rows]."""
    t = nl.ndarray((cols, rows), dtype=dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=src)
    return t


def _online_softmax_step(s, m, l_sum, acc, v_tile, P, F, d, v_dtype):
    """Fold one [P, F] tile of scaled scores ``s`` into the running (m, l_sum, acc)."""
    mx = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=mx, op=nl.maximum, data=s, axis=1)
    m_new = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=m_new, data1=m, data2=mx, op=nl.maximum)
    neg = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=neg, data=m_new, op0=nl.multiply, operand0=-1.0)
    p = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    row_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=p, op=nl.exp, data=s, bias=neg, reduce_op=nl.add, reduce_res=row_sum,
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    alpha = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=alpha, op=nl.exp, data=m, bias=neg)            # exp(m_old - m_new)
    nisa.scalar_tensor_tensor(dst=l_sum, data=l_sum, op0=nl.multiply, operand0=alpha,
                              op1=nl.add, operand1=row_sum)
    p_t_psum = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_transpose(dst=p_t_psum, data=p)
    p_t = nl.ndarray((F, P), dtype=v_dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=p_t, src=p_t_psum)
    pv = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=pv, stationary=p_t, moving=v_tile)
    nisa.scalar_tensor_tensor(dst=acc, data=acc, op0=nl.multiply, operand0=alpha,
                              op1=nl.add, operand1=pv)
    nisa.tensor_copy(dst=m, src=m_new)


@nki.jit
def flash_attention_fwd(q, k, v, causal=True, scale=None):
    """softmax(q kᵀ · scale [+ causal mask]) v for one head; returns [Sq, d] in q's dtype.

    Example:
        >>> o = flash_attention_fwd(q, k, v, causal=True)   # doctest: +SKIP
    """
    Sq, d = q.shape
    Sk = k.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    out = nl.ndarray((Sq, d), dtype=q.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range((Sq + 127) // 128):
        q0, q1 = i * 128, min(Sq, i * 128 + 128)
        P = q1 - q0
        q_t = _transposed(q[q0:q1, :], P, d, q.dtype)
        m = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=m, value=NEG_INF)
        l_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=l_sum, value=0.0)
        acc = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        k_end = min(Sk, q1) if causal else Sk
        for j in nl.affine_range((k_end + 127) // 128):
            k0, k1 = j * 128, min(Sk, j * 128 + 128)
            F = k1 - k0
            k_t = _transposed(k[k0:k1, :], F, d, k.dtype)
            s_psum = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=s_psum, stationary=q_t, moving=k_t)
            s = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=s, data=s_psum, op0=nl.multiply, operand0=scale)
            if causal and k1 - 1 > q0:      # the tile crosses the diagonal: mask key > query
                nisa.affine_select(dst=s, pattern=[[-1, F]], channel_multiplier=1,
                                   on_true_tile=s, on_false_value=NEG_INF,
                                   cmp_op=nl.greater_equal, offset=q0 - k0)
            v_tile = nl.ndarray((F, d), dtype=v.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=v_tile, src=v[k0:k1, :])
            _online_softmax_step(s, m, l_sum, acc, v_tile, P, F, d, v.dtype)
        inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv, data=l_sum)
        res = nl.ndarray((P, d), dtype=q.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=acc, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out[q0:q1, :], src=res)
    return out


def attention_reference(q, k, v, causal=True, scale=None):
    """float64 numpy reference."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[1]) if scale is None else scale
    s = q @ k.T * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape, bool)), s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v
