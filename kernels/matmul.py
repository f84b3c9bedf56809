"""Tiled matrix multiplication on the Tensor engine.

Three entry points, one tiling scheme:

* ``matmul_lhsT(lhsT, rhs)`` — ``lhsT.T @ rhs`` for ``lhsT: [K, M]``, ``rhs: [K, N]``, the
  Tensor engine's natural layout (the contraction dim K on partitions for both operands).
* ``matmul(a, b)`` — the natural ``a @ b`` for ``a: [M, K]``, ``b: [K, N]``. ``a`` has K on
  its columns, so its tiles are loaded *transposed* by the DMA engines (``dma_transpose``)
  into the ``[K, M]`` stationary layout.
* ``batched_matmul(a, b)`` — ``[B, M, K] @ [B, K, N]``, the same blocks per batch entry.

Tiling (all three). The output is cut into blocks of 128 rows (the stationary free-size
limit: output rows land on PSUM partitions) by ``NB`` columns, ``NB`` the widest moving tile
the target allows (512 on trn1/trn2; 2048 here on trn3, four PSUM banks of fp32). K is cut
into 128-row tiles (the partition limit). For each column block the ``[K, NB]`` block of the
right operand is loaded **once** — one DMA for all its full K tiles, laid out ``[128, KT,
NB]`` — and reused by every 128-row block of the output (blocking for SBUF reuse); each
output block loads its ``[K, 128]`` stationary strip with one DMA as well and accumulates
the ``KT`` tile products in fp32 PSUM (``accumulate=k > 0``). The PSUM block is evacuated to
SBUF with the cast to the output dtype and stored. When the ``[K, NB]`` block would not fit
its SBUF budget (half of SBUF), ``NB`` is halved, down to 512; if even that does not fit, K
is cut into chunks that are loaded per output block instead, still accumulating into the
same PSUM tile. Sizes need not be multiples of the tile sizes: the
edge tiles are clipped with ``min`` and a K remainder (``K % 128`` rows) is one extra,
shorter tile.

Dtypes: fp32, bf16/fp16 and fp8 (``float8_e4m3``/``float8_e5m2``/``float8_e4m3fn`` on trn3)
inputs; bf16/fp8 products are exact, and everything accumulates in fp32 PSUM. The output
dtype is the input dtype, or fp32 for fp8 inputs; pass ``out_dtype="bfloat16"`` (a dtype
name) to choose.

The loaders ``load_k_tiles`` / ``load_k_tiles_T`` are shared with ``linear`` and ``mlp``.
"""

from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

PMAX = 128                      # partitions
FP8 = ("float8_e4m3", "float8_e5m2", "float8_e4m3fn")


def _tiles(n: int, size: int):
    """(start, stop) of each tile of ``size`` covering ``range(n)``."""
    return [(s, min(n, s + size)) for s in range(0, n, size)]


def moving_tile(n: int) -> int:
    """The widest moving tile the target allows for ``n`` columns."""
    return min(n, 2048 if nisa.get_nc_version() >= nisa.nc_version.gen4 else 512)


def _dtype_name(dt) -> str:
    return str(getattr(dt, "name", dt))


def out_dtype_for(in_dtype, out_dtype=None):
    """The output dtype: ``out_dtype`` if given, else the input's (fp32 for fp8 inputs)."""
    if out_dtype is not None:
        return out_dtype
    return nl.float32 if _dtype_name(in_dtype) in FP8 else in_dtype


def load_k_tiles(src, dtype=None):
    """Load ``src`` [K, F] (HBM, K on rows) into SBUF as one ``[k, F]`` view per 128-row tile.

    The full tiles arrive in one DMA as a ``[128, K // 128, F]`` tile; the ``K % 128``
    remainder rows, if any, in a second one.
    """
    K, F = src.shape
    dtype = src.dtype if dtype is None else dtype
    KT, kr = divmod(K, PMAX)
    views = []
    if KT:
        rs, cs = src.strides
        g = nl.ndarray((PMAX, KT, F), dtype=dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=g, src=src.ap([[rs, PMAX], [PMAX * rs, KT], [cs, F]]))
        views += [g[:, kt, :] for kt in range(KT)]
    if kr:
        t = nl.ndarray((kr, F), dtype=dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=src[KT * PMAX:K, :])
        views.append(t)
    return views


def load_k_tiles_T(src):  # noqa: N802 - T for transposed
    """Load ``src`` [F, K] (HBM, K on columns) transposed: one ``[k, F]`` view per 128-column
    tile of K, by the DMA engines (``dma_transpose``, bit-exact, no PSUM)."""
    F, K = src.shape
    KT, kr = divmod(K, PMAX)
    views = []
    if KT:
        rs, cs = src.strides
        g = nl.ndarray((PMAX, KT, F), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=g, src=src.ap([[rs, F], [PMAX * cs, KT], [cs, PMAX]]))
        views += [g[:, kt, :] for kt in range(KT)]
    if kr:
        t = nl.ndarray((kr, F), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t, src=src[:, KT * PMAX:K])
        views.append(t)
    return views


def sbuf_budget() -> int:
    """SBUF bytes per partition a kernel gives its big resident block: half of the target's."""
    return nl.tile_size.total_available_sbuf_size // 2


def k_chunks(K: int, row_bytes: int, budget: int | None = None):
    """Cut K into chunks (multiples of 128 rows) whose ``[chunk, row]`` SBUF block fits
    ``budget`` bytes per partition, ``row_bytes`` = bytes of one row of the block."""
    budget = sbuf_budget() if budget is None else budget
    per = max(1, budget // max(1, row_bytes)) * PMAX
    return _tiles(K, per)


def block_cols(N: int, K: int, itemsize: int) -> int:
    """Columns per block of a ``[K, N]`` right operand: the widest moving tile whose whole
    ``[K, cols]`` block fits the SBUF budget (halving down to 512), so that it can stay
    resident; 512 (or N) when even that does not fit and K must be chunked."""
    nb = moving_tile(N)
    tiles_k = (K + PMAX - 1) // PMAX
    while nb > 512 and tiles_k * nb * itemsize > sbuf_budget():
        nb = (nb + 1) // 2
    return nb


def tiled_matmul(out, a, b, a_transposed: bool, b_transposed: bool = False, bias=None,
                 act=None):
    """``out[M, N] = act(op_a(a) @ op_b(b) + bias)`` for 2-D HBM views, the library's one
    blocked matmul loop (see the module docstring).

    ``op_a(a) = a.T`` with ``a: [K, M]`` if ``a_transposed`` else ``a: [M, K]`` (loaded
    transposed); ``op_b(b) = b.T`` with ``b: [N, K]`` if ``b_transposed`` (loaded
    transposed) else ``b: [K, N]``. ``bias`` [N] (HBM) is added by one extra rank-1 matmul
    into the same PSUM tile (ones ``[1, rows]`` times the bias row); ``act`` is a Scalar
    engine activation applied while evacuating PSUM (``None``: a plain cast-copy).
    """
    if b_transposed:
        N, K = b.shape
    else:
        K, N = b.shape
    M = a.shape[1] if a_transposed else a.shape[0]
    nb = block_cols(N, K, b.dtype.itemsize)
    chunks = k_chunks(K, nb * b.dtype.itemsize)
    resident = len(chunks) == 1

    def b_tiles_of(c0, c1, n0, n1):
        return load_k_tiles_T(b[n0:n1, c0:c1]) if b_transposed else load_k_tiles(b[c0:c1, n0:n1])

    ones = None
    if bias is not None:
        ones = nl.ndarray((1, min(M, PMAX)), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=ones, value=1.0)
    for n0, n1 in _tiles(N, nb):
        b_tiles = b_tiles_of(0, K, n0, n1) if resident else None
        bias_row = None
        if bias is not None:
            bias_row = nl.ndarray((1, n1 - n0), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=bias_row, src=bias.reshape((1, N))[:, n0:n1])
        m_tiles = _tiles(M, PMAX)
        for i in nl.affine_range(len(m_tiles)):
            m0, m1 = m_tiles[i]
            acc = nl.ndarray((m1 - m0, n1 - n0), dtype=nl.float32, buffer=nl.psum)
            first = True
            if bias is not None:
                nisa.nc_matmul(dst=acc, stationary=ones[:, 0:m1 - m0], moving=bias_row,
                               accumulate=False)
                first = False
            for c0, c1 in chunks:
                bt = b_tiles if resident else b_tiles_of(c0, c1, n0, n1)
                at = (load_k_tiles(a[c0:c1, m0:m1]) if a_transposed
                      else load_k_tiles_T(a[m0:m1, c0:c1]))
                for kt in range(len(at)):
                    nisa.nc_matmul(dst=acc, stationary=at[kt], moving=bt[kt],
                                   accumulate=not first)
                    first = False
            res = nl.ndarray((m1 - m0, n1 - n0), dtype=out.dtype, buffer=nl.sbuf)
            if act is None:
                nisa.tensor_copy(dst=res, src=acc)
            else:
                nisa.activation(dst=res, op=act, data=acc)
            nisa.dma_copy(dst=out[m0:m1, n0:n1], src=res)


@nki.jit
def matmul_lhsT(lhsT, rhs, out_dtype=None):  # noqa: N802 - lhsT is the NKI name of the layout
    """``lhsT.T @ rhs`` with fp32 accumulation; output dtype = input dtype (fp32 for fp8).

    Example:
        >>> out = matmul_lhsT(a.T.copy(), b)   # a: [M, K], b: [K, N]   # doctest: +SKIP
    """
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=out_dtype_for(lhsT.dtype, out_dtype), buffer=nl.shared_hbm)
    tiled_matmul(out, lhsT, rhs, a_transposed=True)
    return out


@nki.jit
def matmul(a, b, out_dtype=None):
    """``a @ b`` for ``a: [M, K]``, ``b: [K, N]``; fp32 accumulation; output dtype = input
    dtype (fp32 for fp8 inputs) unless ``out_dtype`` names one.

    Example:
        >>> c = matmul(a, b)   # a: [200, 333], b: [333, 96]   # doctest: +SKIP
    """
    M, K = a.shape
    _, N = b.shape
    out = nl.ndarray((M, N), dtype=out_dtype_for(a.dtype, out_dtype), buffer=nl.shared_hbm)
    tiled_matmul(out, a, b, a_transposed=False)
    return out


@nki.jit
def batched_matmul(a, b, out_dtype=None):
    """``a @ b`` per batch entry for ``a: [B, M, K]``, ``b: [B, K, N]`` → ``[B, M, N]``.

    Example:
        >>> c = batched_matmul(a, b)   # a: [4, 200, 64], b: [4, 64, 96]   # doctest: +SKIP
    """
    B, M, K = a.shape
    N = b.shape[2]
    out = nl.ndarray((B, M, N), dtype=out_dtype_for(a.dtype, out_dtype), buffer=nl.shared_hbm)
    for i in nl.affine_range(B):
        tiled_matmul(out[i], a[i], b[i], a_transposed=False)
    return out


def matmul_reference(lhsT: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """numpy reference of ``matmul_lhsT`` in float64 of the exactly decoded inputs."""
    return lhsT.astype(np.float64).T @ rhs.astype(np.float64)


def matmul_torch(a, b):
    """torch reference of ``matmul`` / ``batched_matmul`` in float64."""
    return a.double() @ b.double()
