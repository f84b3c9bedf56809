"""2-D transpose of any size: ``transpose2d(x)`` = ``x.T`` for ``x: [M, N]``, any dtype.

The DMA engines transpose while they copy (``dma_transpose``, bit-exact, no compute engine
or PSUM involved). Column tiles of ``x`` (128 columns) become row tiles of the output (128
rows = the partitions of the SBUF tile). One ``dma_transpose`` moves a whole block — a
group of up to ``G`` full column tiles by ``Mb`` rows, viewed as ``[Mb, G, 128]`` and landing
as a ``[128, G, Mb]`` SBUF tile — and one ``dma_copy`` stores it to the ``G`` matching
128-row strips of the output. So the instruction count is two per block, not two per
128 × 128 tile; ``G · Mb`` is chosen to fill the SBUF budget. The ``N % 128`` remainder
columns, if any, are one more (shorter) tile per row block.
"""

from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

from .matmul import PMAX, _tiles

BLOCK_BYTES = 64 * 1024      # SBUF bytes per partition of one transposed block
ROWS_MAX = 4096


@nki.jit
def transpose2d(x):
    """``x.T`` for a 2-D ``x`` of any size and dtype.

    Example:
        >>> x = np.arange(200 * 333, dtype=np.float32).reshape(200, 333)
        >>> y = transpose2d(x)   # doctest: +SKIP
    """
    M, N = x.shape
    out = nl.ndarray((N, M), dtype=x.dtype, buffer=nl.shared_hbm)
    NF, nr = divmod(N, PMAX)
    isz = x.dtype.itemsize
    Mb = min(M, ROWS_MAX)
    G = max(1, min(NF, BLOCK_BYTES // (Mb * isz))) if NF else 1
    row_blocks = _tiles(M, Mb)
    for i in nl.affine_range(len(row_blocks)):
        m0, m1 = row_blocks[i]
        mb = m1 - m0
        for g0, g1 in _tiles(NF, G):
            g = g1 - g0
            t = nl.ndarray((PMAX, g, mb), dtype=x.dtype, buffer=nl.sbuf)
            src = x[m0:m1, g0 * PMAX:g1 * PMAX]       # [mb, g·128] viewed as [mb, g, 128]
            nisa.dma_transpose(dst=t, src=src.ap([[N, mb], [PMAX, g], [1, PMAX]]))
            dst = out[g0 * PMAX:g1 * PMAX, m0:m1]     # [g·128, mb] viewed as [128, g, mb]
            nisa.dma_copy(dst=dst.ap([[M, PMAX], [PMAX * M, g], [1, mb]]), src=t)
        if nr:
            t = nl.ndarray((nr, mb), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_transpose(dst=t, src=x[m0:m1, NF * PMAX:N])
            nisa.dma_copy(dst=out[NF * PMAX:N, m0:m1], src=t)
    return out


def transpose_reference(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.T)


def transpose_torch(x):
    return x.t().contiguous()
