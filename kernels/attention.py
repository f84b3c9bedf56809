"""Flash attention forward (FlashAttention-2 style online softmax) in the current NKI API.

Kernels
-------
``flash_attention(q, k, v, mask=None, causal=False, scale=None) -> (o, lse)``
    Batched multi-head attention with grouped-query heads.

    ========  ======================  ==============================================
    tensor    shape                   notes
    ========  ======================  ==============================================
    ``q``     ``[B, H, Sq, d]``       fp32 or bf16; ``d <= 128``
    ``k, v``  ``[B, Hkv, Sk, d]``     q's dtype; ``H`` a multiple of ``Hkv`` (GQA:
                                      query head ``h`` reads kv head ``h // (H/Hkv)``)
    ``mask``  ``[Sq, Sk]`` or         optional additive float mask (fp32/bf16; ``-inf``
              ``[1|B, 1|H, Sq, Sk]``  allowed), added to the scaled scores; pass it
                                      positionally (4th argument)
    ``o``     ``[B, H, Sq, d]``       q's dtype
    ``lse``   ``[B, H, Sq]``          fp32, ``logsumexp_j(scale * q.k_j + mask_j)``
    ========  ======================  ==============================================

    This is torch's ``scaled_dot_product_attention`` layout (``[batch, heads, seq,
    head_dim]``); ``causal=True`` keeps key ``j <= i`` for query ``i`` (top-left aligned, as
    torch's ``is_causal``) and combines with ``mask``. ``scale`` defaults to ``1/sqrt(d)``.
    Any ``Sq``, ``Sk`` (tile edges are clipped with ``min``); ``lse`` is what the backward
    (``nki.kernels.attention_bwd``) needs to recompute the probabilities.

``flash_attention_fwd(q, k, v, causal=True, scale=None) -> o``
    One head, ``q: [Sq, d]``, ``k, v: [Sk, d]``: the same inner loop without ``lse``.

Tiling
------
Per kv head, ``Kᵀ`` ``[d, Sk]`` is loaded once with a single ``dma_transpose`` and ``V`` once
as 128-key tiles ``[128, Sk/128, d]`` (one ``dma_copy``); every query head of the GQA group
reuses them (for ``Sk = 8192``, fp32, ``d = 128``: 64 KiB per partition). Queries go 128 per
tile on the partitions (``qᵀ [d, 128]``, one ``dma_transpose``), four tiles (512 rows) at a
time. Keys are swept in steps of at most ``KEY_BLOCK = 512`` (one matmul's moving free size
and one fp32 PSUM bank on every target); a 512-key block that all four tiles see visits
them in turn, so its ``kᵀ`` and ``V`` slices are reused while hot. One step, for a query
tile ``[128, d]`` and 512 keys (17 instructions):

* scores ``S = q kᵀ`` ``[128, 512]`` fp32 in PSUM, one ``nc_matmul``;
* causal: only the 128x128 square on the diagonal is masked, by adding a precomputed
  triangle of ``-3e38`` in place in PSUM; keys right of the diagonal are never computed.
  Tile ``r`` of a group sweeps its own 512-block as one step of ``128 (r+1)`` keys, the
  triangle on its last 128 columns; the shared-block loop of group ``g`` has ``g`` trips,
  so the simulator folds every group into one triangular loop nest;
* user mask: ``t = S * scale + mask`` (one ``scalar_tensor_tensor``), else the scale is
  folded into the exponential;
* online softmax: row max (``tensor_reduce``), the new running max ``-m`` (one
  ``tensor_scalar`` with two ALU ops), ``p = exp(scale*S - m)`` (one ``activation`` straight
  from PSUM), ``alpha = exp(m_old - m)``;
* ``P V``: ``p`` is transposed 128 keys at a time on the Tensor engine (4 transposes fill
  one PSUM bank, copied to SBUF by one ``tensor_copy``), then one ``nc_matmul`` per 128 keys
  accumulates ``p V`` in PSUM, and ``acc = acc * alpha + p V`` (one
  ``scalar_tensor_tensor``) folds it into the tile's fp32 SBUF accumulator. For fp32, ``V``
  carries an extra column of ones, so the same matmuls also produce the row sums ``l`` of
  ``p`` (rescaled with ``acc``): no separate reduction. For bf16, ``p`` is rounded for the
  matmul, so ``l`` comes from the exponential's fp32 results (its ``reduce_res``) instead,
  which keeps ``lse`` fp32-accurate.

At the end ``o = acc / l`` and ``lse = m + log(l)``. bf16 inputs: ``q kᵀ`` and ``P V`` run on
bf16 operands with fp32 PSUM accumulation; max, exp, sums and the accumulator are fp32.
"""

from __future__ import annotations

import math

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

NEG_INF = -3.0e38   # finite "minus infinity": exp() of it is exactly 0 and max() stays finite
Q_TILE = 128        # queries per tile (partitions)
KEY_BLOCK = 512     # keys per online-softmax step: one matmul, one PSUM bank of fp32


def loop(n: int, sequential: bool = False):
    """``nl.affine_range(n)`` (``nl.sequential_range`` if ``sequential``), or a plain
    ``range`` for a single trip: a one-trip loop level buys nothing and the simulator's
    generated code supports at most 8 nested loop levels."""
    if n <= 1:
        return range(n)
    return nl.sequential_range(n) if sequential else nl.affine_range(n)


# ----- shared pieces (plain functions: inlined into the kernels) ----------------------------
def causal_triangle():
    """[128, 128] fp32 SBUF tile: 0 where column <= row (key <= query), NEG_INF above."""
    zero = nl.ndarray((Q_TILE, Q_TILE), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0.0)
    tri = nl.ndarray((Q_TILE, Q_TILE), dtype=nl.float32, buffer=nl.sbuf)
    nisa.affine_select(dst=tri, pattern=[[-1, Q_TILE]], channel_multiplier=1,
                       on_true_tile=zero, on_false_value=NEG_INF, cmp_op=nl.greater_equal)
    return tri


def load_transposed(src, rows: int, cols: int):
    """HBM ``src [rows, cols]`` → SBUF ``[cols, rows]`` with one ``dma_transpose``."""
    t = nl.ndarray((cols, rows), dtype=src.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=src)
    return t


def load_row_tiles(src, n: int, d: int, ones_column: bool = False):
    """HBM ``src [n, d]`` → SBUF ``[128, ceil(n/128), d]``, row ``t*128 + p`` at ``[p, t]``.

    Full tiles arrive in one ``dma_copy`` (a permuted HBM view), the ragged last one in a
    second. ``ones_column`` appends a column of ones (``[128, T, d+1]``)."""
    T, full = (n + 127) // 128, n // 128
    t = nl.ndarray((128, T, d + ones_column), dtype=src.dtype, buffer=nl.sbuf)
    if full:
        view = src[0:full * 128, :].reshape((full, 128, d)).permute((1, 0, 2))
        nisa.dma_copy(dst=t[:, 0:full, 0:d], src=view)
    if full < T:
        nisa.dma_copy(dst=t[0:n - full * 128, full, 0:d], src=src[full * 128:n, :])
    if ones_column:
        nisa.memset(dst=t[:, :, d:d + 1], value=1.0)
    return t


def mask_rows(mask, b: int, h: int):
    """The ``[Sq, Sk]`` slice of an additive mask for batch ``b``, head ``h`` (or None)."""
    if mask is None or len(mask.shape) == 2:
        return mask
    return mask[b if mask.shape[0] > 1 else 0, h if mask.shape[1] > 1 else 0]


def transpose_block(p, P: int, F: int, dtype):
    """SBUF ``pT [128, n, P]`` with ``pT[:, c, :] = p[:, 128c:128c+128].T`` (F ≤ 512): n
    Tensor-engine transposes into one PSUM bank, one copy back to SBUF."""
    n = (F + 127) // 128
    w = F - (n - 1) * 128                          # width of the last (maybe ragged) chunk
    pT_ps = nl.ndarray((128, n, P), dtype=dtype, buffer=nl.psum)
    for c in range(n):
        x1 = min(F, c * 128 + 128)
        nisa.nc_transpose(dst=pT_ps[0:x1 - c * 128, c, :], data=p[:, c * 128:x1])
    pT = nl.ndarray((128, n, P), dtype=dtype, buffer=nl.sbuf)
    if w == 128:
        nisa.tensor_copy(dst=pT, src=pT_ps)
    else:                                          # copy only the written rows
        if n > 1:
            nisa.tensor_copy(dst=pT[:, 0:n - 1, :], src=pT_ps[:, 0:n - 1, :])
        nisa.tensor_copy(dst=pT[0:w, n - 1, :], src=pT_ps[0:w, n - 1, :])
    return pT


def new_tile(q_h, q0: int, q1: int, d: int):
    """One query tile's state: ``qᵀ``, ``negm = -(running max)`` (scaled) and the fp32
    SBUF accumulator of ``P V``. fp32: ``acc [P, d+1] = [P V | rowsum P]``, the ones column of
    ``v_sb`` making the Tensor engine sum the probabilities. bf16: ``P`` is rounded for the
    matmul, so the row sums come from the exponential's fp32 results into ``l [P, 1]``
    (keeping ``lse`` fp32-accurate)."""
    P = q1 - q0
    exact = q_h.dtype == nl.float32
    return {"qT": load_transposed(q_h[q0:q1, :], P, d), "q0": q0, "q1": q1, "d": d,
            "negm": nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf),
            "acc": nl.ndarray((P, d + exact), dtype=nl.float32, buffer=nl.sbuf),
            "l": None if exact else nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf),
            "started": False}


def masked_scores(qT, kT, tri, mask_h, q0: int, q1: int, k0: int, k1: int, diag,
                  scale: float):
    """Scores of queries ``[q0, q1)`` against keys ``[k0, k1)``, ready for the exponential:
    ``(src, sc)`` with ``exp(sc * src + bias)`` the wanted probabilities. ``src`` is the raw
    ``q.k`` in PSUM (``sc = scale``), its causal diagonal block pushed to -3e38 from column
    ``diag``; with a user mask it is ``s * scale + mask`` in SBUF (``sc = 1``)."""
    P, F = q1 - q0, k1 - k0
    f32 = nl.float32
    s = nl.ndarray((P, F), dtype=f32, buffer=nl.psum)              # raw scores q.k
    nisa.nc_matmul(dst=s, stationary=qT, moving=kT[:, k0:k1])
    if diag is not None:                                           # key > query: -3e38
        view = s[:, diag:F]
        nisa.tensor_tensor(dst=view, data1=view, data2=tri[0:P, 0:F - diag], op=nl.add)
    if mask_h is None:
        return s, scale
    mt = nl.ndarray((P, F), dtype=mask_h.dtype, buffer=nl.sbuf)    # t = s * scale + mask
    nisa.dma_copy(dst=mt, src=mask_h[q0:q1, k0:k1])
    src = nl.ndarray((P, F), dtype=f32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=src, data=s, op0=nl.multiply, operand0=scale,
                              op1=nl.add, operand1=mt)
    return src, 1.0


def softmax_step(tile, kT, v_sb, tri, mask_h, k0: int, k1: int, diag, scale: float):
    """Fold keys ``[k0, k1)`` (at most one 512 block) into query tile ``tile``. With
    ``diag`` (causal) the tile's first query is key ``k0 + diag``: the triangle masks the
    keys ``[k0 + diag, k1)``.

    After a tile's first step every step is the same instruction sequence, so the simulator
    folds the key loops."""
    qT, negm, acc, q0, q1 = tile["qT"], tile["negm"], tile["acc"], tile["q0"], tile["q1"]
    first = not tile["started"]
    P, F = q1 - q0, k1 - k0
    dt, f32 = qT.dtype, nl.float32
    src, sc = masked_scores(qT, kT, tri, mask_h, q0, q1, k0, k1, diag, scale)
    mx = nl.ndarray((P, 1), dtype=f32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=mx, op=nl.maximum, data=src, axis=1)
    if first:                                                      # -m = -sc*mx
        new = negm
        nisa.tensor_scalar(dst=new, data=mx, op0=nl.multiply, operand0=-sc)
    else:                                                          # -m = min(-m_old, -sc*mx)
        new = nl.ndarray((P, 1), dtype=f32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=new, data=mx, op0=nl.multiply, operand0=-sc,
                           op1=nl.minimum, operand1=negm)
    p = nl.ndarray((P, F), dtype=dt, buffer=nl.sbuf)               # exp(sc*src - m)
    l_sum = tile["l"]
    if l_sum is None:                                              # fp32: sums by the matmul
        nisa.activation(dst=p, op=nl.exp, data=src, bias=new, scale=sc)
    else:                                                          # bf16: fp32 row sums
        row_sum = l_sum if first else nl.ndarray((P, 1), dtype=f32, buffer=nl.sbuf)
        nisa.activation(dst=p, op=nl.exp, data=src, bias=new, scale=sc, reduce_op=nl.add,
                        reduce_res=row_sum, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    if not first:                                                  # alpha = exp(m_old - m)
        alpha = nl.ndarray((P, 1), dtype=f32, buffer=nl.sbuf)
        nisa.activation(dst=alpha, op=nl.exp, data=negm, bias=new, scale=-1.0)
        if l_sum is not None:
            nisa.scalar_tensor_tensor(dst=l_sum, data=l_sum, op0=nl.multiply,
                                      operand0=alpha, op1=nl.add, operand1=row_sum)
        nisa.tensor_copy(dst=negm, src=new)
    pT = transpose_block(p, P, F, dt)
    pv = nl.ndarray(acc.shape, dtype=f32, buffer=nl.psum)          # [p V | rowsum p]
    for c in range((F + 127) // 128):
        w = min(F, c * 128 + 128) - c * 128
        nisa.nc_matmul(dst=pv, stationary=pT[0:w, c, :],
                       moving=v_sb[0:w, k0 // 128 + c, :], accumulate=c > 0)
    if first:
        nisa.tensor_copy(dst=acc, src=pv)
    else:                                                          # acc = acc * alpha + pv
        nisa.scalar_tensor_tensor(dst=acc, data=acc, op0=nl.multiply, operand0=alpha,
                                  op1=nl.add, operand1=pv)
    tile["started"] = True


def shared_blocks(g0: int, Sk: int, causal: bool) -> int:
    """512-key blocks from key 0 that every query tile of the group starting at row ``g0``
    (a multiple of 512) sees in full: all of them, or (causal) those before row ``g0``."""
    return (min(Sk, g0) if causal else Sk) // KEY_BLOCK


def rest_steps(q0: int, q1: int, Sk: int, causal: bool, start: int):
    """The keys of query tile ``[q0, q1)`` after the shared blocks (from ``start``), as at
    most one step ``(k0, k1, diag)`` (always ≤ 512 keys): non-causal, the ragged tail;
    causal, the keys ``[start, min(q1, Sk))`` of the tile's own 512-block, with the triangle
    from column ``diag = q0 - start`` (None when all those keys precede the tile)."""
    k_end = Sk if not causal else min(Sk, q1)
    if start >= k_end:
        return []
    return [(start, k_end, q0 - start if causal and k_end > q0 else None)]


def finish_tile(tile, o_h, lse_h, d: int):
    """``o = acc[:, :d] / l`` in o's dtype and ``lse = m + log(l)``."""
    acc, negm, q0, q1 = tile["acc"], tile["negm"], tile["q0"], tile["q1"]
    P, f32 = q1 - q0, nl.float32
    l_sum = acc[:, d:d + 1] if tile["l"] is None else tile["l"]
    inv = nl.ndarray((P, 1), dtype=f32, buffer=nl.sbuf)
    nisa.reciprocal(dst=inv, data=l_sum)
    res = nl.ndarray((P, d), dtype=o_h.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=res, data=acc[:, 0:d], op0=nl.multiply, operand0=inv)
    nisa.dma_copy(dst=o_h[q0:q1, :], src=res)
    if lse_h is not None:               # lse = m + log(l) = log(l) - negm
        lse_t = nl.ndarray((P, 1), dtype=f32, buffer=nl.sbuf)
        nisa.activation(dst=lse_t, op=nl.log, data=l_sum)
        nisa.tensor_tensor(dst=lse_t, data1=lse_t, data2=negm, op=nl.subtract)
        nisa.dma_copy(dst=lse_h[q0:q1], src=lse_t)


def attend_query_group(q_h, kT, v_sb, o_h, lse_h, mask_h, tri, tiles, Sk: int, d: int,
                       causal: bool, scale: float):
    """Up to 4 query tiles ``tiles`` (rows ``[g0, g0+512)``) of one head against the kv
    head in SBUF (``kT [d, Sk]``, ``v_sb [128, Sk/128, d]``).

    The 512-key blocks all tiles see are swept once, each block visiting the 4 tiles in
    turn while its ``kᵀ`` and ``V`` slices are hot in cache; then every tile finishes its own
    keys (the ragged tail, or its causal diagonal block)."""
    g0 = tiles[0][0]
    state = []
    for r in loop(len(tiles)):
        state.append(new_tile(q_h, tiles[r][0], tiles[r][1], d))
    shared = shared_blocks(g0, Sk, causal)
    for j in loop(shared):
        for r in loop(len(tiles)):
            softmax_step(state[r], kT, v_sb, tri, mask_h, j * KEY_BLOCK, (j + 1) * KEY_BLOCK,
                         None, scale)
    for r in loop(len(tiles)):
        q0, q1 = tiles[r]
        for k0, k1, diag in rest_steps(q0, q1, Sk, causal, shared * KEY_BLOCK):
            softmax_step(state[r], kT, v_sb, tri, mask_h, k0, k1, diag, scale)
        finish_tile(state[r], o_h, lse_h, d)


def query_groups(Sq: int):
    """The 128-row query tiles ``[(q0, q1), ...]`` of each 512-row group, one
    ``affine_range`` iteration per group. Group ``g`` sweeps ``g`` shared blocks (causal),
    a trip count affine in the loop index, so the simulator folds the groups into one
    triangular loop nest."""
    n = (Sq + Q_TILE - 1) // Q_TILE
    per = KEY_BLOCK // Q_TILE
    for g in loop((n + per - 1) // per):
        yield [(i * Q_TILE, min(Sq, (i + 1) * Q_TILE))
               for i in range(g * per, min(n, (g + 1) * per))]


def check_shapes(q, k, v, mask=None):
    """Validate the layouts documented above; returns (B, H, Hkv, Sq, Sk, d)."""
    B, H, Sq, d = q.shape
    Bk, Hkv, Sk, dk = k.shape
    if tuple(v.shape) != tuple(k.shape) or Bk != B or dk != d:
        raise ValueError(f"k {k.shape} and v {v.shape} must be [B={B}, Hkv, Sk, d={d}]")
    if d > 128:
        raise ValueError(f"head dim {d} > 128 is not supported (one partition tile)")
    if H % Hkv:
        raise ValueError(f"query heads {H} must be a multiple of kv heads {Hkv}")
    if mask is not None:
        ok = (len(mask.shape) == 2 and tuple(mask.shape) == (Sq, Sk)) or (
            len(mask.shape) == 4 and tuple(mask.shape[2:]) == (Sq, Sk)
            and mask.shape[0] in (1, B) and mask.shape[1] in (1, H))
        if not ok:
            raise ValueError(f"mask {mask.shape} must be [Sq, Sk] or [1|B, 1|H, Sq, Sk] "
                             f"with Sq={Sq}, Sk={Sk}")
    return B, H, Hkv, Sq, Sk, d


# ----- kernels ------------------------------------------------------------------------------
@nki.jit
def flash_attention(q, k, v, mask=None, causal=False, scale=None):
    """softmax(q kᵀ · scale + mask [causal]) v for ``[B, H, S, d]`` tensors; returns
    ``(o [B, H, Sq, d], lse [B, H, Sq] fp32)``. See the module docstring for layouts.

    Example:
        >>> o, lse = flash_attention(q, k, v, causal=True)          # doctest: +SKIP
        >>> o, lse = flash_attention(q, k, v, mask, causal=False)   # doctest: +SKIP
    """
    B, H, Hkv, Sq, Sk, d = check_shapes(q, k, v, mask)
    G = H // Hkv
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    o = nl.ndarray((B, H, Sq, d), dtype=q.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((B, H, Sq), dtype=nl.float32, buffer=nl.shared_hbm)
    tri = causal_triangle() if causal else None
    for bh in loop(B * Hkv):                                  # (batch, kv head) pairs
        b, hk = divmod(bh, Hkv)
        kT = load_transposed(k[b, hk], Sk, d)              # [d, Sk], once per kv head
        v_sb = load_row_tiles(v[b, hk], Sk, d, q.dtype == nl.float32)   # [128, Sk/128, d(+1)]
        for g in loop(G):
            h = hk * G + g
            for tiles in query_groups(Sq):
                attend_query_group(q[b, h], kT, v_sb, o[b, h], lse[b, h],
                                   mask_rows(mask, b, h), tri, tiles, Sk, d, causal,
                                   scale)
    return o, lse


@nki.jit
def flash_attention_fwd(q, k, v, causal=True, scale=None):
    """softmax(q kᵀ · scale [+ causal mask]) v for one head, ``q [Sq, d]``, ``k, v [Sk, d]``;
    returns ``[Sq, d]`` in q's dtype.

    Example:
        >>> o = flash_attention_fwd(q, k, v, causal=True)   # doctest: +SKIP
    """
    Sq, d = q.shape
    Sk = k.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    out = nl.ndarray((Sq, d), dtype=q.dtype, buffer=nl.shared_hbm)
    tri = causal_triangle() if causal else None
    kT = load_transposed(k, Sk, d)
    v_sb = load_row_tiles(v, Sk, d, q.dtype == nl.float32)
    for tiles in query_groups(Sq):
        attend_query_group(q, kT, v_sb, out, None, None, tri, tiles, Sk, d, causal, scale)
    return out


# ----- references ---------------------------------------------------------------------------
def attention_reference(q, k, v, causal=True, scale=None):
    """float64 numpy reference for one head (``flash_attention_fwd``)."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[1]) if scale is None else scale
    s = q @ k.T * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape, bool)), s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v


def attention_reference_torch(q, k, v, mask=None, causal=False, scale=None,
                              dtype="float64"):
    """torch reference of ``flash_attention``: ``(o, lse)`` from
    ``torch.nn.functional.scaled_dot_product_attention`` (kv heads repeated for GQA) and
    ``torch.logsumexp`` of the masked, scaled scores. Inputs are numpy or torch arrays,
    computed in ``dtype`` (default float64 of the exactly decoded inputs)."""
    import torch

    def t(x):
        x = x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x, np.float64))
        return x.to(getattr(torch, dtype))

    q, k, v = t(q), t(k), t(v)
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    full = None if mask is None else t(mask)
    if causal:
        Sq, Sk = q.shape[2], k.shape[2]
        tri = torch.zeros(Sq, Sk, dtype=q.dtype).masked_fill(
            ~torch.ones(Sq, Sk, dtype=torch.bool).tril(), float("-inf"))
        full = tri if full is None else full + tri
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=full, scale=scale)
    s = (q @ k.transpose(-1, -2)) * scale
    if full is not None:
        s = s + full
    return o, torch.logsumexp(s, dim=-1)
