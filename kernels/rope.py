"""Rotary position embedding (RoPE), the half-rotation layout of Llama / the torch references.

``rope(x, cos, sin)`` for ``x: [..., S, D]`` (e.g. ``[S, D]``, ``[H, S, D]`` or
``[B, H, S, D]``) and tables ``cos, sin: [S, D]`` (the torch layout, ``cat(freqs, freqs)``)
or ``[S, D/2]`` (the half tables): ::

    out = x * cos + rotate_half(x) * sin,     rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])

Tiling: positions go on the partitions, 128 per tile, and every leading index (batch ×
head) of the same positions goes into the free dims, so one tile is ``[128, L, D]`` and a
position's table row is loaded once and broadcast over the ``L`` heads by a stride-0 view
(no copies). Per tile five Vector-engine instructions: ``x·cos`` over the whole tile (with
half tables, the ``[P, 1, 1, D/2]`` table is broadcast over heads *and* halves), the two
half products with ``sin``, and the two signed sums that write the result in x's dtype.
The leading dims are chunked when a tile would exceed 8192 elements per partition.

``offset`` shifts the positions to ``offset .. offset+S-1`` (decoding, or continuing a KV
cache): the tables then hold at least ``offset + S`` rows and the kernel reads rows
``offset + p`` of them. A Python int is a compile-time constant (one compiled program per
offset); a one-element int32 tensor is read into a register at run time, so one program
serves every decoding step (the table DMAs are moved by the register, and a row outside
the tables faults at run time).

Dtypes: ``x`` fp32, bf16, fp16 or fp8 (``float8_e4m3`` / ``float8_e5m2`` storage), tables
any float dtype; the products and sums are fp32 and the result is rounded once, to x's dtype.
"""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from .matmul import PMAX, _tiles

FREE_MAX = 8192


def _positions(offset, S: int, cos, sin):
    """The first position: ``offset`` itself (a checked int) or a register loaded from a
    one-element int32 tensor."""
    if tuple(cos.shape) != tuple(sin.shape):
        raise ValueError(f"rope: cos {cos.shape} and sin {sin.shape} must have one shape")
    if not isinstance(offset, int):
        return nisa.register_alloc(offset)
    if offset < 0 or offset + S > cos.shape[0]:
        raise ValueError(f"rope: positions {offset}..{offset + S - 1} need tables of at "
                         f"least {offset + S} rows, got {cos.shape[0]}")
    return offset


def _table_rows(table, start, p0: int, p1: int):
    """Rows ``start + p0 .. start + p1`` of a table (``start`` an int or a register)."""
    if isinstance(start, int):
        return table[start + p0:start + p1, :]
    return table[nl.ds(start + p0, p1 - p0), :]


@nki.jit
def rope(x, cos, sin, offset=0):
    """Apply rotary embeddings to ``x: [..., S, D]`` at positions ``offset .. offset+S-1``
    with ``cos, sin: [>= offset+S, D]`` or ``[>= offset+S, D/2]``; ``offset`` is an int or a
    one-element int32 tensor (read at run time).

    Example:
        >>> q_rot = rope(q, cos, sin)   # q: [H, S, D], cos, sin: [S, D]   # doctest: +SKIP
        >>> k_new = rope(k_step, cos, sin, offset=pos)   # pos: int32 [1]   # doctest: +SKIP
    """
    S, D = x.shape[-2], x.shape[-1]
    start = _positions(offset, S, cos, sin)
    h = D // 2
    half_table = cos.shape[1] == h and h != D
    L = 1
    for d in x.shape[:-2]:
        L *= d
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    # [S, L, D] views of x and out: positions first, leading dims flattened after them
    xs = x.reshape((L, S, D)).permute((1, 0, 2))
    os_ = out.reshape((L, S, D)).permute((1, 0, 2))
    Lc = max(1, min(L, FREE_MAX // D))
    W = cos.shape[1]
    pos = _tiles(S, PMAX)
    for t in nl.affine_range(len(pos)):
        p0, p1 = pos[t]
        P = p1 - p0
        c = nl.ndarray((P, 1, W), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=c[:, 0, :], src=_table_rows(cos, start, p0, p1))
        s = nl.ndarray((P, 1, W), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s[:, 0, :], src=_table_rows(sin, start, p0, p1))
        for l0, l1 in _tiles(L, Lc):
            n = l1 - l0
            xt = nl.ndarray((P, n, D), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=xt, src=xs[p0:p1, l0:l1, :])
            xc = nl.ndarray((P, n, D), dtype=nl.float32, buffer=nl.sbuf)     # x · cos
            if half_table:
                cb = c.reshape((P, 1, 1, h)).broadcast(1, n).broadcast(2, 2)
                nisa.tensor_tensor(dst=xc.reshape((P, n, 2, h)),
                                   data1=xt.reshape((P, n, 2, h)), data2=cb, op=nl.multiply)
                s_lo = s.broadcast(1, n)
                s_hi = s_lo
            else:
                nisa.tensor_tensor(dst=xc, data1=xt, data2=c.broadcast(1, n), op=nl.multiply)
                s_lo = s[:, :, 0:h].broadcast(1, n)
                s_hi = s[:, :, h:D].broadcast(1, n)
            xs_ = nl.ndarray((P, n, D), dtype=nl.float32, buffer=nl.sbuf)    # swapped x · sin
            nisa.tensor_tensor(dst=xs_[:, :, 0:h], data1=xt[:, :, h:D], data2=s_lo,
                               op=nl.multiply)
            nisa.tensor_tensor(dst=xs_[:, :, h:D], data1=xt[:, :, 0:h], data2=s_hi,
                               op=nl.multiply)
            res = nl.ndarray((P, n, D), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=res[:, :, 0:h], data1=xc[:, :, 0:h], data2=xs_[:, :, 0:h],
                               op=nl.subtract)
            nisa.tensor_tensor(dst=res[:, :, h:D], data1=xc[:, :, h:D], data2=xs_[:, :, h:D],
                               op=nl.add)
            nisa.dma_copy(dst=os_[p0:p1, l0:l1, :], src=res)
    return out


def rotate_half_torch(x):
    import torch

    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_torch(x, cos, sin, offset=0):
    """torch reference in float64 (the Llama ``apply_rotary_pos_emb``) at positions
    ``offset .. offset+S-1`` (the tables indexed at those rows); half tables are duplicated
    to the full layout first."""
    import torch

    S = x.shape[-2]
    first = int(offset.reshape(-1)[0]) if hasattr(offset, "reshape") else int(offset)
    pos = torch.arange(first, first + S)
    x, cos, sin = x.double(), cos.double()[pos], sin.double()[pos]
    if cos.shape[-1] * 2 == x.shape[-1]:
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    return x * cos + rotate_half_torch(x) * sin


def rope_tables(S: int, D: int, base: float = 10000.0, half: bool = False):
    """numpy float32 ``(cos, sin)`` tables ``[S, D]`` (or ``[S, D/2]``) for positions 0..S-1."""
    import numpy as np

    inv = 1.0 / base ** (np.arange(0, D, 2, dtype=np.float64) / D)
    freqs = np.outer(np.arange(S, dtype=np.float64), inv)
    if not half:
        freqs = np.concatenate((freqs, freqs), -1)
    return np.cos(freqs).astype(np.float32), np.sin(freqs).astype(np.float32)
