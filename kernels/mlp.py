"""Activations and the SwiGLU MLP block.

``gelu(x, approximate="none")``, ``silu(x)`` and ``silu_mul(gate, up) = silu(gate) * up``
(SwiGLU's elementwise half) for tensors of any shape: the tensor is viewed
as one flat run of elements cut into ``[128, C]`` tiles (C up to 8192), so that every
Scalar-engine ``activation`` instruction covers as many elements as possible whatever the
shape (a ``[4096, 64]`` input is one instruction on a ``[128, 2048]`` tile, not 32 on
``[128, 64]``); a tail of fewer than C elements is one ``[1, r]`` instruction.

``swiglu_mlp(x, w_gate, w_up, w_down) = (silu(x @ w_gate) * (x @ w_up)) @ w_down`` for
``x: [N, D]`` (leading dims allowed), ``w_gate, w_up: [D, F]``, ``w_down: [F, D]`` (the
math layout of the formula, i.e. torch's ``nn.Linear`` weights transposed). Tiling, per
block of ``R`` rows (R ≤ 512):

1. ``xᵀ`` is loaded transposed by the DMA engines: ``[D, R]`` as D/128 tiles.
2. The hidden activations are computed *transposed*, 128 hidden units at a time:
   ``gateᵀ = w_gate[:, f]ᵀ @ xᵀ`` and ``upᵀ`` in fp32 PSUM (``w_gate`` tiles are the
   stationary operand in their natural layout; ``xᵀ`` moves, R wide), then
   ``hᵀ = silu(gateᵀ) * upᵀ`` — the Scalar engine reads the gate from PSUM, the Vector
   engine multiplies by the up projection straight from PSUM and rounds to x's dtype into
   an SBUF block ``hᵀ [F, R]``. No transpose is ever needed: ``hᵀ`` is exactly the
   stationary layout of the second matmul.
3. ``out = h @ w_down``: per 128-row sub-tile and block of D columns, the ``F / 128`` tile
   products accumulate in one PSUM tile, which is copied out and stored.

All weights stay resident in SBUF when they fit half of it (loaded once, by one DMA per
tensor and 128-column strip), otherwise they are reloaded per row block.

fp8. The matmul operands are used in their storage dtypes, so fp8 weights
(``float8_e4m3`` / ``float8_e5m2``) go into ``nc_matmul`` as they are, with fp32 PSUM
accumulation: with bf16 or fp16 ``x`` (weight-only fp8) or with fp8 ``x`` too, in which case
``hᵀ`` is rounded to fp8 (x's dtype) and the down projection is fp8 × fp8. ``out_dtype``
(default x's dtype) gives fp8 activations a wider output. The Tensor engine pairs fp32 only
with fp32, so fp32 ``x`` needs fp32 weights. The activations (``gelu``, ``silu``) take fp8
tensors like any other float dtype (fp32 compute, one rounding).
"""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from .matmul import PMAX, _tiles, load_k_tiles, load_k_tiles_T, moving_tile, sbuf_budget

FREE_MAX = 8192          # elements per partition of one elementwise tile
ROWS_MAX = 512           # rows per block of the MLP (moving free size of the first matmuls)


def _elementwise(out, x, op, times=None):
    """``out = op(x)`` (or ``op(x) * times``) elementwise over the flat element order, in
    [128, C] tiles and one [1, r] tail."""
    total = 1
    for d in x.shape:
        total *= d
    C = max(1, min(FREE_MAX, total // PMAX))
    R = total // C                                    # full rows of C elements
    flat = [None if t is None else t.reshape((total,)) for t in (x, times, out)]
    rows = [None if t is None else t[0:R * C].reshape((R, C)) for t in flat]
    tiles = _tiles(R, PMAX)
    for i in nl.affine_range(len(tiles)):
        p0, p1 = tiles[i]
        _elementwise_tile(*(None if t is None else t[p0:p1, :] for t in rows), op)
    rem = total - R * C
    if rem:
        _elementwise_tile(*(None if t is None else t[R * C:total].reshape((1, rem))
                            for t in flat), op)


def _elementwise_tile(x, times, out, op):
    """One tile: load, ``op`` on the Scalar engine (into fp32 when a product follows, so the
    result is rounded once), the product on the Vector engine, store."""
    shape = tuple(x.shape)
    t = nl.ndarray(shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.ndarray(shape, dtype=out.dtype if times is None else nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=r, op=op, data=t)
    if times is not None:
        u = nl.ndarray(shape, dtype=times.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=u, src=times)
        prod = nl.ndarray(shape, dtype=out.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=prod, data1=r, data2=u, op=nl.multiply)
        r = prod
    nisa.dma_copy(dst=out, src=r)


@nki.jit
def gelu(x, approximate="none"):
    """GELU of any-shape ``x``: ``x · Φ(x)`` (erf), or the tanh approximation with
    ``approximate="tanh"`` (torch's argument names).

    Example:
        >>> y = gelu(x)   # doctest: +SKIP
    """
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    _elementwise(out, x, nl.gelu_apprx_tanh if approximate == "tanh" else nl.gelu)
    return out


@nki.jit
def silu(x):
    """SiLU (swish) of any-shape ``x``: ``x · sigmoid(x)``.

    Example:
        >>> y = silu(x)   # doctest: +SKIP
    """
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    _elementwise(out, x, nl.silu)
    return out


@nki.jit
def silu_mul(gate, up):
    """SwiGLU's elementwise half, ``silu(gate) * up``, for two same-shape tensors of any
    shape (the product rounded once to ``gate``'s dtype; ``silu(gate)`` stays fp32).

    Example:
        >>> h = silu_mul(gate, up)   # doctest: +SKIP
    """
    if tuple(gate.shape) != tuple(up.shape):
        raise ValueError(f"silu_mul: gate {tuple(gate.shape)} and up {tuple(up.shape)} "
                         "must have the same shape")
    out = nl.ndarray(gate.shape, dtype=gate.dtype, buffer=nl.shared_hbm)
    _elementwise(out, gate, nl.silu, times=up)
    return out


def _rows_per_block(N: int, D: int, F: int, itemsize: int) -> int:
    """Rows per block: up to 512, fewer if ``xᵀ`` and ``hᵀ`` of a block would crowd SBUF."""
    tiles = (D + PMAX - 1) // PMAX + (F + PMAX - 1) // PMAX
    R = min(N, ROWS_MAX, moving_tile(N))
    while R > PMAX and tiles * R * itemsize > sbuf_budget() // 2:
        R //= 2
    return R


def _check_mlp_dtypes(x, weights) -> None:
    """fp32 activations pair only with fp32 weights (the Tensor engine's rule), and the
    other way round; raise a ValueError naming the dtypes instead of a matmul's error."""
    for w in weights:
        if (x.dtype == nl.float32) != (w.dtype == nl.float32):
            raise ValueError(f"swiglu_mlp: x is {x.dtype.name} and a weight is {w.dtype.name}; "
                             "the Tensor engine pairs float32 only with float32 (use bf16 "
                             "or fp8 activations with fp8 weights)")


def _hidden_tile(xT, wg, wu, dtype):
    """Step 2 for 128 hidden units: ``silu(gateᵀ) * upᵀ`` ``[f, rw]`` in ``dtype``, from the
    gate and up tiles ``wg``, ``wu`` (one ``[k, f]`` view per 128 rows of D) and ``xT``."""
    f, rw = wg[0].shape[1], xT[0].shape[1]
    g_ps = nl.ndarray((f, rw), dtype=nl.float32, buffer=nl.psum)
    u_ps = nl.ndarray((f, rw), dtype=nl.float32, buffer=nl.psum)
    for k in range(len(xT)):
        nisa.nc_matmul(dst=g_ps, stationary=wg[k], moving=xT[k], accumulate=k > 0)
    for k in range(len(xT)):
        nisa.nc_matmul(dst=u_ps, stationary=wu[k], moving=xT[k], accumulate=k > 0)
    act = nl.ndarray((f, rw), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=act, op=nl.silu, data=g_ps)
    h = nl.ndarray((f, rw), dtype=dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=h, data1=act, data2=u_ps, op=nl.multiply)
    return h


@nki.jit
def swiglu_mlp(x, w_gate, w_up, w_down, out_dtype=None):
    """``(silu(x @ w_gate) * (x @ w_up)) @ w_down``; ``x: [..., D]``, ``w_gate, w_up: [D,
    F]``, ``w_down: [F, D]``; output shaped like ``x``, of ``out_dtype`` (default x's dtype).
    fp32 accumulation; the hidden activations are rounded to x's dtype (as torch does in
    that dtype) before the down projection. fp8 weights and/or activations are supported.

    Example:
        >>> # x: [200, 96], wg, wu: [96, 333], wd: [333, 96]
        >>> y = swiglu_mlp(x, wg, wu, wd)   # doctest: +SKIP
        >>> y16 = swiglu_mlp(x8, wg8, wu8, wd8, out_dtype=nl.bfloat16)   # doctest: +SKIP
    """
    _check_mlp_dtypes(x, (w_gate, w_up, w_down))
    D = x.shape[-1]
    F = w_gate.shape[1]
    N = 1
    for d in x.shape[:-1]:
        N *= d
    out = nl.ndarray(x.shape, dtype=x.dtype if out_dtype is None else out_dtype,
                     buffer=nl.shared_hbm)
    x2 = x.reshape((N, D)) if x.ndim != 2 else x
    o2 = out.reshape((N, D)) if x.ndim != 2 else out
    isz = w_gate.dtype.itemsize
    f_tiles = _tiles(F, PMAX)
    nb = moving_tile(D)
    d_blocks = _tiles(D, nb)
    KT = (D + PMAX - 1) // PMAX
    FT = len(f_tiles)
    resident = (2 * KT * F + FT * D) * isz <= sbuf_budget()

    def gate_up(f0, f1):
        return load_k_tiles(w_gate[:, f0:f1]), load_k_tiles(w_up[:, f0:f1])

    def down(d0, d1):
        return load_k_tiles(w_down[:, d0:d1])

    if resident:
        w_gu = [gate_up(f0, f1) for f0, f1 in f_tiles]
        w_dn = [down(d0, d1) for d0, d1 in d_blocks]

    R = _rows_per_block(N, D, F, x.dtype.itemsize)
    blocks = _tiles(N, R)
    for b in nl.affine_range(len(blocks)):
        r0, r1 = blocks[b]
        rw = r1 - r0
        xT = load_k_tiles_T(x2[r0:r1, :])                      # D/128 tiles of [k, rw]
        hT = [_hidden_tile(xT, *(w_gu[j] if resident else gate_up(f0, f1)), x.dtype)
              for j, (f0, f1) in enumerate(f_tiles)]           # F/128 tiles of [f, rw]
        for di, (d0, d1) in enumerate(d_blocks):
            wd = w_dn[di] if resident else down(d0, d1)
            for s0, s1 in _tiles(rw, PMAX):
                acc = nl.ndarray((s1 - s0, d1 - d0), dtype=nl.float32, buffer=nl.psum)
                for j in range(FT):
                    nisa.nc_matmul(dst=acc, stationary=hT[j][:, s0:s1], moving=wd[j],
                                   accumulate=j > 0)
                res = nl.ndarray((s1 - s0, d1 - d0), dtype=out.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=acc)
                nisa.dma_copy(dst=o2[r0 + s0:r0 + s1, d0:d1], src=res)
    return out


def gelu_torch(x, approximate="none"):
    """torch reference in float64."""
    import torch.nn.functional as F

    return F.gelu(x.double(), approximate=approximate)


def silu_torch(x):
    """torch reference in float64."""
    import torch.nn.functional as F

    return F.silu(x.double())


def silu_mul_torch(gate, up):
    """torch reference in float64."""
    import torch.nn.functional as F

    return F.silu(gate.double()) * up.double()


def swiglu_mlp_torch(x, w_gate, w_up, w_down, hidden_dtype=None):
    """torch reference in float64; ``hidden_dtype`` (a torch or numpy/ml_dtypes dtype)
    rounds the hidden activations to that dtype first (as the kernel and torch in bf16 do)."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    x, wg, wu, wd = (t.double() for t in (x, w_gate, w_up, w_down))
    h = F.silu(x @ wg) * (x @ wu)
    if isinstance(hidden_dtype, torch.dtype):
        h = h.to(hidden_dtype).double()
    elif hidden_dtype is not None:          # a numpy / ml_dtypes dtype (fp8 e4m3: no torch twin)
        h = torch.from_numpy(h.numpy().astype(hidden_dtype).astype(np.float64))
    return h @ wd
