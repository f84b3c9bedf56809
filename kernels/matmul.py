"""Tiled matrix multiplication on the Tensor engine.

``matmul_lhsT(lhsT, rhs)`` computes ``lhsT.T @ rhs`` for ``lhsT: [K, M]``, ``rhs: [K, N]`` —
the Tensor engine's natural layout (the contraction dim on partitions). Tiles: K by 128
(partitions), M by 128 (stationary free size), N by the target's moving free-size limit (512
on trn1/trn2, 2048 here on trn3 to keep the PSUM tile within four banks). Each rhs column
block is loaded once and reused for every M tile (blocking for SBUF reuse); K tiles
accumulate in fp32 PSUM. Sizes need not be multiples of the tile sizes: edge tiles are
clipped with ``min``.
"""

from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


def _tiles(n: int, size: int):
    """(start, stop) of each tile of ``size`` covering ``range(n)``."""
    return [(s, min(n, s + size)) for s in range(0, n, size)]


def moving_tile(n: int) -> int:
    """The widest moving tile the target allows for ``n`` columns."""
    return min(n, 2048 if nisa.get_nc_version() >= nisa.nc_version.gen4 else 512)


@nki.jit
def matmul_lhsT(lhsT, rhs):  # noqa: N802 - lhsT is the NKI name of the layout
    """``lhsT.T @ rhs`` with fp32 accumulation; output dtype = input dtype.

    Example:
        >>> out = matmul_lhsT(a.T.copy(), b)   # a: [M, K], b: [K, N]   # doctest: +SKIP
    """
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    k_tiles = _tiles(K, 128)
    for n0, n1 in _tiles(N, moving_tile(N)):
        rhs_block = []                      # the K x (n1-n0) column block, loaded once
        for k0, k1 in k_tiles:
            t = nl.ndarray((k1 - k0, n1 - n0), dtype=rhs.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=rhs[k0:k1, n0:n1])
            rhs_block.append(t)
        for m0, m1 in _tiles(M, 128):
            acc = nl.ndarray((m1 - m0, n1 - n0), dtype=nl.float32, buffer=nl.psum)
            for k, (k0, k1) in enumerate(k_tiles):
                lt = nl.ndarray((k1 - k0, m1 - m0), dtype=lhsT.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lt, src=lhsT[k0:k1, m0:m1])
                nisa.nc_matmul(dst=acc, stationary=lt, moving=rhs_block[k], accumulate=k > 0)
            res = nl.ndarray((m1 - m0, n1 - n0), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m0:m1, n0:n1], src=res)
    return out


def matmul_reference(lhsT: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """numpy reference in float64 of the exactly decoded inputs."""
    return lhsT.astype(np.float64).T @ rhs.astype(np.float64)
