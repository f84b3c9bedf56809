# ruff: noqa: N999  (numbered tutorial; run as a script or with python -m tutorials.NN_name)
"""Tutorial 05 — flash attention from scratch: one head, online softmax, causal mask.

``O = softmax(Q Kᵀ / sqrt(d)) V`` for ``Q: [Sq, d]``, ``K, V: [Sk, d]``. Queries go on the
partitions, 128 per tile. Built in three steps:

1. **naive**: for a query tile, all scores ``S = Q Kᵀ`` at once (one [128, Sk] PSUM tile),
   a row softmax as in tutorial 04, then ``P V``. Simple, but the score row must fit on
   chip: Sk is bounded by PSUM (16 KiB per partition) and SBUF.
2. **online softmax** (flash attention): walk the keys 128 at a time keeping, per query row,
   the running max ``m``, the running sum ``l`` and an unnormalised accumulator ``acc``.
   When a new tile raises the max from ``m`` to ``m'``, everything so far is rescaled by
   ``alpha = exp(m - m')``. Memory no longer depends on Sk.
3. **causal**: query i may only see keys j <= i. Key tiles entirely above the diagonal are
   skipped (the loop bound depends on the query tile: a triangular loop nest), and only the
   tiles crossing the diagonal are masked, with ``affine_select``.

Matmul layouts (tutorial 03): TensorE contracts over partitions, so ``S = Q Kᵀ`` needs
``Qᵀ`` [d, 128] and ``Kᵀ`` [d, F] (loaded transposed by ``dma_transpose``), and ``P V``
needs ``Pᵀ`` [F, 128] (transposed on TensorE by ``nc_transpose``) against V [F, d].

Run: ``python tutorials/05_flash_attention.py``
"""

from __future__ import annotations

import math
import sys

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.testing import assert_close, randn

NEG = -3.0e38      # a finite "minus infinity": exp(NEG - m) is exactly 0, max() stays finite


def load_transposed(src, rows: int, cols: int, dtype):
    """An HBM [rows, cols] block as an SBUF [cols, rows] tile."""
    t = nl.ndarray((cols, rows), dtype=dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=src)
    return t


def scores(q_t, k, k0: int, k1: int, P: int, scale: float):
    """``(Q Kᵀ)[:, k0:k1] * scale`` as an fp32 SBUF tile [P, k1 - k0]."""
    d = k.shape[1]
    k_t = load_transposed(k[k0:k1, :], k1 - k0, d, k.dtype)
    s_psum = nl.ndarray((P, k1 - k0), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=s_psum, stationary=q_t, moving=k_t)      # [P, F] = (q_t).T @ k_t
    s = nl.ndarray((P, k1 - k0), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=s, data=s_psum, op0=nl.multiply, operand0=scale)
    return s


def pv_into(acc_psum, p, v, k0: int, k1: int, P: int, accumulate: bool) -> None:
    """``acc_psum (+)= p @ v[k0:k1]`` for p [P, F]: transpose p on TensorE, then matmul."""
    F = k1 - k0
    p_t_psum = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_transpose(dst=p_t_psum, data=p)
    p_t = nl.ndarray((F, P), dtype=v.dtype, buffer=nl.sbuf)     # matmul inputs live in SBUF
    nisa.tensor_copy(dst=p_t, src=p_t_psum)
    v_tile = nl.ndarray((F, v.shape[1]), dtype=v.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=v_tile, src=v[k0:k1, :])
    nisa.nc_matmul(dst=acc_psum, stationary=p_t, moving=v_tile, accumulate=accumulate)


def store_scaled(out, q0: int, acc, l_sum, P: int) -> None:
    """``out[q0:q0+P] = acc / l_sum`` (one reciprocal per row, then a multiply)."""
    inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(dst=inv, data=l_sum)
    res = nl.ndarray((P, acc.shape[1]), dtype=out.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=res, data=acc, op0=nl.multiply, operand0=inv)
    nisa.dma_copy(dst=out[q0:q0 + P, :], src=res)


@nki.jit
def attention_naive(q, k, v):
    """Step 1: full score rows; needs Sk small enough for one PSUM tile (non-causal)."""
    Sq, d = q.shape
    Sk = k.shape[0]
    out = nl.ndarray((Sq, d), dtype=q.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range((Sq + 127) // 128):
        q0 = i * 128
        P = min(Sq, q0 + 128) - q0
        q_t = load_transposed(q[q0:q0 + P, :], P, d, q.dtype)
        s = scores(q_t, k, 0, Sk, P, 1.0 / math.sqrt(d))              # [P, Sk] at once
        neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=s, axis=1, negate=True)
        l_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=s, op=nl.exp, data=s, bias=neg_max, reduce_op=nl.add,
                        reduce_res=l_sum, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        acc_psum = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.psum)
        for j in nl.affine_range((Sk + 127) // 128):   # P V, contracted 128 keys at a time
            k0, k1 = j * 128, min(Sk, j * 128 + 128)
            pv_into(acc_psum, s[:, k0:k1], v, k0, k1, P, accumulate=k0 > 0)
        store_scaled(out, q0, acc_psum, l_sum, P)
    return out


def online_update(s, m, l_sum, acc, v, k0: int, k1: int, P: int) -> None:
    """Fold the scores ``s`` [P, F] of keys k0..k1 into the running (m, l_sum, acc)."""
    F, d = k1 - k0, v.shape[1]
    m_new = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=m_new, op=nl.maximum, data=s, axis=1)
    nisa.tensor_tensor(dst=m_new, data1=m_new, data2=m, op=nl.maximum)   # m' = max(m, rowmax)
    neg = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=neg, data=m_new, op0=nl.multiply, operand0=-1.0)
    p = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    row_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=p, op=nl.exp, data=s, bias=neg, reduce_op=nl.add,      # exp(s - m')
                    reduce_res=row_sum, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    alpha = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=alpha, op=nl.exp, data=m, bias=neg)                    # exp(m - m')
    nisa.scalar_tensor_tensor(dst=l_sum, data=l_sum, op0=nl.multiply, operand0=alpha,
                              op1=nl.add, operand1=row_sum)                    # l = l*a + sum
    pv = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.psum)
    pv_into(pv, p, v, k0, k1, P, accumulate=False)
    nisa.scalar_tensor_tensor(dst=acc, data=acc, op0=nl.multiply, operand0=alpha,
                              op1=nl.add, operand1=pv)                         # acc*a + p v
    nisa.tensor_copy(dst=m, src=m_new)


@nki.jit
def flash_attention(q, k, v, causal=False):
    """Steps 2 and 3: online softmax over 128-key tiles; with ``causal``, key tiles above
    the diagonal are skipped and diagonal tiles masked."""
    Sq, d = q.shape
    Sk = k.shape[0]
    out = nl.ndarray((Sq, d), dtype=q.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range((Sq + 127) // 128):
        q0, q1 = i * 128, min(Sq, i * 128 + 128)
        P = q1 - q0
        q_t = load_transposed(q[q0:q1, :], P, d, q.dtype)
        m = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=m, value=NEG)
        l_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=l_sum, value=0.0)
        acc = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        k_end = min(Sk, q1) if causal else Sk           # causal: stop at the diagonal
        for j in nl.affine_range((k_end + 127) // 128):
            k0, k1 = j * 128, min(Sk, j * 128 + 128)
            s = scores(q_t, k, k0, k1, P, 1.0 / math.sqrt(d))
            if causal and k1 - 1 > q0:     # this tile crosses the diagonal
                # keep s[p, f] where (q0 + p) - (k0 + f) >= 0, i.e. key <= query; the
                # affine value is offset + channel_multiplier * p + (-1) * f
                nisa.affine_select(dst=s, pattern=[[-1, k1 - k0]], channel_multiplier=1,
                                   on_true_tile=s, on_false_value=NEG,
                                   cmp_op=nl.greater_equal, offset=q0 - k0)
            online_update(s, m, l_sum, acc, v, k0, k1, P)
        store_scaled(out, q0, acc, l_sum, P)
    return out


def attention_reference(q, k, v, causal=False):
    """float64 numpy attention."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = q @ k.T / math.sqrt(q.shape[1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape, bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def main() -> int:
    """Each step against numpy, fp32 and bf16; the work causal attention skips."""
    q, k, v = (randn((384, 64), seed=s) for s in range(3))
    c = assert_close(attention_naive(q, k, v), attention_reference(q, k, v))
    print(f"step 1, naive [384 x 384] score rows : max abs error {c.max_abs[0]:.2e}")
    c = assert_close(flash_attention(q, k, v), attention_reference(q, k, v))
    print(f"step 2, online softmax             : max abs error {c.max_abs[0]:.2e}")
    c = assert_close(flash_attention(q, k, v, causal=True), attention_reference(q, k, v, True))
    print(f"step 3, causal                     : max abs error {c.max_abs[0]:.2e}")

    # sequences the naive kernel cannot hold on chip, with edge tiles, in bf16
    q, k, v = (randn((1000, 128), "bf16", seed=s) for s in range(3, 6))
    c = assert_close(flash_attention(q, k, v, causal=True), attention_reference(q, k, v, True))
    print(f"causal, 1000 x 128, bf16           : max abs error {c.max_abs[0]:.2e} "
          f"(bf16 tolerance {c.tol.atol} + {c.tol.rtol} * |expected|)")
    tiles = (1000 + 127) // 128
    print(f"causal attention computes {tiles * (tiles + 1) // 2} of {tiles * tiles} score "
          f"tiles; {tiles} of them need a mask")
    print("tutorial 05 OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
