"""Flash attention backward (FlashAttention-2 style) in the current NKI API.

``flash_attention_bwd(q, k, v, o, dout, lse, mask=None, causal=False, scale=None,
mask_grad=False)`` returns ``(dq, dk, dv)``, the gradients of ``o = flash_attention(q, k, v,
mask, causal, scale)[0]`` (``nki.kernels.attention``) for the upstream gradient ``dout``,
and with ``mask_grad=True`` also ``dmask``, the gradient of the additive mask.

========================  ======================  ==========================================
tensor                    shape                   notes
========================  ======================  ==========================================
``q``, ``o``, ``dout``    ``[B, H, Sq, d]``       fp32 or bf16, ``d <= 128``
``k``, ``v``              ``[B, Hkv, Sk, d]``     ``H`` a multiple of ``Hkv`` (GQA)
``lse``                   ``[B, H, Sq]``          fp32, the forward's log-sum-exp
``mask``                  ``[Sq, Sk]`` or         optional additive mask, as in the forward
                          ``[1|B, 1|H, Sq, Sk]``  (positional)
``dq``                    ``[B, H, Sq, d]``       q's dtype
``dk``, ``dv``            ``[B, Hkv, Sk, d]``     q's dtype; summed over the query heads of
                                                  each GQA group
``dmask``                 ``mask``'s shape        fp32; only with ``mask_grad=True``
========================  ======================  ==========================================

The probabilities are recomputed tile by tile from ``lse`` instead of being stored:

    P  = exp(scale * q kᵀ + mask - lse)        D  = rowsum(dO ∘ O)
    dV = Pᵀ dO                                  dP = dO Vᵀ
    dS = P ∘ (dP - D)                           dQ = dS K · scale,   dK = dSᵀ Q · scale

Tiling. Per kv head, ``Kᵀ`` and ``Vᵀ`` ``[d, Sk]`` (one ``dma_transpose`` each) and ``K`` as
128-key tiles ``[128, Sk/128, d]`` stay in SBUF, next to fp32 accumulators for ``dK`` and
``dV`` of the same layout (for ``Sk = 8192``, fp32, ``d = 128``: 160 KiB per partition).
Every query head of the GQA group then sweeps its 128-row query tiles, four (512 rows) at
a time — ``qᵀ``, ``dOᵀ`` (for the two score-shaped matmuls), ``q``, ``dO`` (for the two
key-shaped ones), ``-lse`` and ``D`` loaded once per tile — over the same key steps as the
forward (512-key blocks shared by the four tiles, each block visiting them in turn while
its slices are hot; then per tile one step over its own 512-block up to the causal
diagonal, masked by the triangle). Queries sit on the partitions of the score tiles, so
``lse`` and ``D`` are per-partition scalars and

* ``P``  is one ``activation`` (``exp``, bias ``-lse``) straight from the PSUM scores;
* ``dS`` is one ``scalar_tensor_tensor`` ``(dP - D) * P`` straight from the PSUM ``dP``;
* ``dV += Pᵀ dO`` and ``dK += dSᵀ Q`` need no transpose: ``P``/``dS`` already have the
  contraction (queries) on the partitions; the up to 4 chunk results of a step share one
  PSUM bank and are added to the SBUF accumulators with one ``tensor_tensor`` each;
* ``dQ += dS K`` contracts over keys: ``dS`` is transposed 128 keys at a time on the Tensor
  engine (as ``P`` in the forward) and the step's sum added to an SBUF accumulator.

``dQ``, ``dK`` are scaled once at the end.

Mask gradient. The mask is added to the scaled scores, so its gradient is ``dS`` itself,
summed over the dims the mask is broadcast along (SDPA's autograd of a float ``attn_mask``).
Each step stores its fp32 ``dS`` block into ``dmask``: a plain DMA when the mask has one
row per (batch, head); a DMA read-modify-write add (``dma_compute``) when the mask is shared
by several, with the (batch, kv head) loop then sequential. ``dmask`` is zero-filled first
when it accumulates or when causal masking skips key blocks (their gradient is 0). Masked
positions (``-inf`` or above the causal diagonal) have ``P = 0``, so ``dS = 0`` there.

bf16: all five matmuls take bf16 operands (``P``
and ``dS`` rounded to bf16) with fp32 PSUM accumulation; exp, ``D``, ``dP - D`` and every
accumulator are fp32.
"""

from __future__ import annotations

import math

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

from .attention import (
    KEY_BLOCK,
    causal_triangle,
    check_shapes,
    load_row_tiles,
    load_transposed,
    loop,
    mask_rows,
    masked_scores,
    query_groups,
    rest_steps,
    shared_blocks,
    transpose_block,
)
from .matmul import _tiles


def add_chunks(acc, t0: int, ps, F: int):
    """``acc[:, t0:t0+n, :] += ps[:, 0:n, :]`` for the ``n`` 128-row chunks of an F-key step
    (a ragged last chunk adds only its rows)."""
    n = (F + 127) // 128
    w = F - (n - 1) * 128
    full = n if w == 128 else n - 1
    if full:
        view = acc[:, t0:t0 + full, :]
        nisa.tensor_tensor(dst=view, data1=view, data2=ps[:, 0:full, :], op=nl.add)
    if full < n:
        view = acc[0:w, t0 + full, :]
        nisa.tensor_tensor(dst=view, data1=view, data2=ps[0:w, full, :], op=nl.add)


def scores_grad(dp, D, p, dm, q0: int, q1: int, k0: int, k1: int):
    """``dS = (dP - D) * P`` in ``p``'s dtype (the matmuls' operand). With ``dm = (dmask_h,
    accumulate)`` the fp32 ``dS`` also goes to the mask gradient's ``[q0:q1, k0:k1]``
    block: copied, or added into it (a mask shared by several heads or batches)."""
    P, F = q1 - q0, k1 - k0
    ds = nl.ndarray((P, F), dtype=p.dtype, buffer=nl.sbuf)
    exact = ds
    if dm is not None and p.dtype != nl.float32:
        exact = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=exact, data=dp, op0=nl.subtract, operand0=D,
                              op1=nl.multiply, operand1=p)
    if exact is not ds:                 # the same rounding as writing ds directly
        nisa.tensor_copy(dst=ds, src=exact)
    if dm is not None:
        view = dm[0][q0:q1, k0:k1]
        if dm[1]:
            nisa.dma_compute(dst=view, srcs=[view, exact], reduce_op=nl.add)
        else:
            nisa.dma_copy(dst=view, src=exact)
    return ds


def backward_step(tile, kv, tri, mask_h, k0: int, k1: int, diag, scale: float, dm=None):
    """Keys ``[k0, k1)`` (at most one 512 block) against one query tile: recompute ``P``,
    form ``dS`` (stored into the mask gradient ``dm``, if any), add this step's ``dV``,
    ``dK`` and ``dQ`` contributions."""
    qT, q_nat, doT, do_nat, neg_lse, D, dq_acc, q0, q1 = tile
    kT, vT, k_nat, dk_acc, dv_acc = kv
    P, F = q1 - q0, k1 - k0
    dt, f32 = qT.dtype, nl.float32
    d = q_nat.shape[1]
    n = (F + 127) // 128
    src, sc = masked_scores(qT, kT, tri, mask_h, q0, q1, k0, k1, diag, scale)
    p = nl.ndarray((P, F), dtype=dt, buffer=nl.sbuf)               # exp(sc*src - lse)
    nisa.activation(dst=p, op=nl.exp, data=src, bias=neg_lse, scale=sc)
    dp = nl.ndarray((P, F), dtype=f32, buffer=nl.psum)             # dO vᵀ
    nisa.nc_matmul(dst=dp, stationary=doT, moving=vT[:, k0:k1])
    ds = scores_grad(dp, D, p, dm, q0, q1, k0, k1)                 # (dP - D) * P
    dv_ps = nl.ndarray((128, n, d), dtype=f32, buffer=nl.psum)     # Pᵀ dO per 128 keys
    dk_ps = nl.ndarray((128, n, d), dtype=f32, buffer=nl.psum)     # dSᵀ q per 128 keys
    for c in range(n):
        x0, x1 = c * 128, min(F, c * 128 + 128)
        nisa.nc_matmul(dst=dv_ps[0:x1 - x0, c, :], stationary=p[:, x0:x1], moving=do_nat)
        nisa.nc_matmul(dst=dk_ps[0:x1 - x0, c, :], stationary=ds[:, x0:x1], moving=q_nat)
    add_chunks(dv_acc, k0 // 128, dv_ps, F)
    add_chunks(dk_acc, k0 // 128, dk_ps, F)
    dsT = transpose_block(ds, P, F, dt)                            # [128 keys, n, P]
    dq_ps = nl.ndarray((P, d), dtype=f32, buffer=nl.psum)          # dS k
    for c in range(n):
        w = min(F, c * 128 + 128) - c * 128
        nisa.nc_matmul(dst=dq_ps, stationary=dsT[0:w, c, :],
                       moving=k_nat[0:w, k0 // 128 + c, :], accumulate=c > 0)
    nisa.tensor_tensor(dst=dq_acc, data1=dq_acc, data2=dq_ps, op=nl.add)


def load_query_tile(q_h, o_h, do_h, lse_h, q0: int, q1: int, d: int):
    """Everything a query tile needs, loaded once: ``qᵀ``, ``q``, ``dOᵀ``, ``dO``, ``-lse``,
    ``D = rowsum(dO ∘ O)`` and a zeroed fp32 ``dQ`` accumulator."""
    P = q1 - q0
    f32 = nl.float32
    qT = load_transposed(q_h[q0:q1, :], P, d)
    doT = load_transposed(do_h[q0:q1, :], P, d)
    q_nat = nl.ndarray((P, d), dtype=q_h.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=q_nat, src=q_h[q0:q1, :])
    do_nat = nl.ndarray((P, d), dtype=do_h.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=do_nat, src=do_h[q0:q1, :])
    o_t = nl.ndarray((P, d), dtype=o_h.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=o_t, src=o_h[q0:q1, :])
    prod = nl.ndarray((P, d), dtype=f32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=prod, data1=do_nat, data2=o_t, op=nl.multiply)
    D = nl.ndarray((P, 1), dtype=f32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=D, op=nl.add, data=prod, axis=1)
    neg_lse = nl.ndarray((P, 1), dtype=f32, buffer=nl.sbuf)
    nisa.dma_copy(dst=neg_lse, src=lse_h[q0:q1])
    nisa.tensor_scalar(dst=neg_lse, data=neg_lse, op0=nl.multiply, operand0=-1.0)
    dq_acc = nl.ndarray((P, d), dtype=f32, buffer=nl.sbuf)
    nisa.memset(dst=dq_acc, value=0.0)
    return qT, q_nat, doT, do_nat, neg_lse, D, dq_acc, q0, q1


def store_row_tiles(dst, acc, n: int, d: int, factor: float):
    """``dst [n, d] = acc [128, ceil(n/128), d] * factor`` in dst's dtype (one DMA for the
    full tiles, one for the ragged last)."""
    T, full = (n + 127) // 128, n // 128
    res = nl.ndarray((128, T, d), dtype=dst.dtype, buffer=nl.sbuf)
    if full:
        nisa.tensor_scalar(dst=res[:, 0:full, :], data=acc[:, 0:full, :], op0=nl.multiply,
                           operand0=factor)
        view = dst[0:full * 128, :].reshape((full, 128, d)).permute((1, 0, 2))
        nisa.dma_copy(dst=view, src=res[:, 0:full, :])
    if full < T:
        w = n - full * 128
        nisa.tensor_scalar(dst=res[0:w, full, :], data=acc[0:w, full, :], op0=nl.multiply,
                           operand0=factor)
        nisa.dma_copy(dst=dst[full * 128:n, :], src=res[0:w, full, :])


def backward_group(q_h, o_h, do_h, lse_h, dq_h, kv, tri, mask_h, tiles, Sk: int, d: int,
                   causal: bool, scale: float, dm=None):
    """Up to 4 query tiles (rows ``[g0, g0+512)``) of one query head: the 512-key blocks
    they all see are swept once, each block visiting the tiles in turn (its ``kᵀ``, ``vᵀ``,
    ``k`` slices and ``dK``/``dV`` accumulators stay hot); then each tile finishes its own
    keys (ragged tail, or its causal diagonal block) and stores ``dQ``."""
    state = []
    for r in loop(len(tiles)):
        state.append(load_query_tile(q_h, o_h, do_h, lse_h, tiles[r][0], tiles[r][1], d))
    shared = shared_blocks(tiles[0][0], Sk, causal)
    for j in loop(shared):
        for r in loop(len(tiles)):
            backward_step(state[r], kv, tri, mask_h, j * KEY_BLOCK, (j + 1) * KEY_BLOCK,
                          None, scale, dm)
    for r in loop(len(tiles)):
        q0, q1 = tiles[r]
        for k0, k1, diag in rest_steps(q0, q1, Sk, causal, shared * KEY_BLOCK):
            backward_step(state[r], kv, tri, mask_h, k0, k1, diag, scale, dm)
        res = nl.ndarray((q1 - q0, d), dtype=dq_h.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=state[r][6], op0=nl.multiply, operand0=scale)
        nisa.dma_copy(dst=dq_h[q0:q1, :], src=res)


def zero_fill(t, cols: int):
    """Zeros over all of HBM ``t``, viewed as rows of ``cols``: a zero ``[128, <=2048]``
    tile broadcast over the full 128-row tiles (one DMA per column chunk), then the rest."""
    rows = 1
    for n in t.shape:
        rows *= n
    rows //= cols
    flat = t.reshape((rows, cols))
    w = min(cols, 2048)
    z = nl.ndarray((128, 1, w), dtype=t.dtype, buffer=nl.sbuf)
    nisa.memset(dst=z, value=0.0)
    full, rest = divmod(rows, 128)
    for c0, c1 in _tiles(cols, w):
        if full:
            view = flat[0:full * 128, c0:c1].reshape((full, 128, c1 - c0)).permute((1, 0, 2))
            nisa.dma_copy(dst=view, src=z[:, :, 0:c1 - c0].broadcast(1, full))
        if rest:
            nisa.dma_copy(dst=flat[full * 128:rows, c0:c1], src=z[0:rest, 0, 0:c1 - c0])


def new_mask_grad(mask, B: int, H: int, Sk: int, causal: bool):
    """The fp32 mask gradient ``dmask`` (mask's shape) and whether its blocks accumulate,
    i.e. whether the mask is shared by several (batch, head) pairs."""
    if mask is None:
        raise ValueError("flash_attention_bwd: mask_grad=True needs a mask")
    shared = (len(mask.shape) == 2 and B * H > 1) or (
        len(mask.shape) == 4 and (mask.shape[0] < B or mask.shape[1] < H))
    dmask = nl.ndarray(tuple(mask.shape), dtype=nl.float32, buffer=nl.shared_hbm)
    if shared or causal:
        zero_fill(dmask, Sk)
    return dmask, shared


@nki.jit
def flash_attention_bwd(q, k, v, o, dout, lse, mask=None, causal=False, scale=None,
                        mask_grad=False):
    """Gradients ``(dq, dk, dv)`` of ``flash_attention`` (see the module docstring), and
    ``dmask`` (fp32, the mask's shape) after them with ``mask_grad=True``.

    Example:
        >>> o, lse = flash_attention(q, k, v, causal=True)                       # doctest: +SKIP
        >>> dq, dk, dv = flash_attention_bwd(q, k, v, o, do, lse, causal=True)   # doctest: +SKIP
        >>> *_, dm = flash_attention_bwd(q, k, v, o, do, lse, m, mask_grad=True)  # doctest: +SKIP
    """
    B, H, Hkv, Sq, Sk, d = check_shapes(q, k, v, mask)
    G = H // Hkv
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    dq = nl.ndarray((B, H, Sq, d), dtype=q.dtype, buffer=nl.shared_hbm)
    dk = nl.ndarray((B, Hkv, Sk, d), dtype=q.dtype, buffer=nl.shared_hbm)
    dv = nl.ndarray((B, Hkv, Sk, d), dtype=q.dtype, buffer=nl.shared_hbm)
    tri = causal_triangle() if causal else None
    Tk = (Sk + 127) // 128
    dmask, shared = new_mask_grad(mask, B, H, Sk, causal) if mask_grad else (None, False)
    for bh in loop(B * Hkv, sequential=shared):               # (batch, kv head) pairs
        b, hk = divmod(bh, Hkv)
        kT = load_transposed(k[b, hk], Sk, d)              # [d, Sk]
        vT = load_transposed(v[b, hk], Sk, d)              # [d, Sk]
        k_nat = load_row_tiles(k[b, hk], Sk, d)           # [128, Tk, d]
        dk_acc = nl.ndarray((128, Tk, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=dk_acc, value=0.0)
        dv_acc = nl.ndarray((128, Tk, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=dv_acc, value=0.0)
        kv = (kT, vT, k_nat, dk_acc, dv_acc)
        for g in loop(G, sequential=True):                  # dK, dV summed over the group
            h = hk * G + g
            mask_h = mask_rows(mask, b, h)
            dm = None if dmask is None else (mask_rows(dmask, b, h), shared)
            for tiles in query_groups(Sq):
                backward_group(q[b, h], o[b, h], dout[b, h], lse[b, h], dq[b, h], kv,
                               tri, mask_h, tiles, Sk, d, causal, scale, dm)
        store_row_tiles(dk[b, hk], dk_acc, Sk, d, scale)
        store_row_tiles(dv[b, hk], dv_acc, Sk, d, 1.0)
    return (dq, dk, dv, dmask) if mask_grad else (dq, dk, dv)


# ----- reference ----------------------------------------------------------------------------
def attention_bwd_reference_torch(q, k, v, dout, mask=None, causal=False, scale=None,
                                  dtype="float64", mask_grad=False):
    """torch autograd reference: ``(dq, dk, dv)`` of
    ``torch.nn.functional.scaled_dot_product_attention`` (kv heads repeated for GQA, so the
    kv gradients sum over each group) for the upstream gradient ``dout``, in ``dtype``; with
    ``mask_grad`` also the additive mask's gradient (SDPA sums it over broadcast dims)."""
    import torch

    def t(x, grad=False):
        x = x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x, np.float64))
        return x.detach().to(getattr(torch, dtype)).requires_grad_(grad)

    q, k, v = t(q, True), t(k, True), t(v, True)
    G = q.shape[1] // k.shape[1]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    m = None if mask is None else t(mask, mask_grad)
    full = m
    if causal:
        Sq, Sk = q.shape[2], k.shape[2]
        tri = torch.zeros(Sq, Sk, dtype=q.dtype).masked_fill(
            ~torch.ones(Sq, Sk, dtype=torch.bool).tril(), float("-inf"))
        full = tri if full is None else full + tri
    o = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1), attn_mask=full,
        scale=scale)
    o.backward(t(dout))
    return (q.grad, k.grad, v.grad) + ((m.grad,) if mask_grad else ())
