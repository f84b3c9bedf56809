# ruff: noqa: N999  (numbered tutorial; run as a script or with python -m tutorials.NN_name)
"""Tutorial 02 — tiling, and the partial tiles at the edges.

A tile has at most 128 partitions, and an instruction should not stream an unbounded free
dimension either. Real tensors are bigger, and their sizes are rarely multiples of the tile
size. So a kernel loops over tiles and *clips* the last one with ``min()`` — current NKI's
replacement for the masks of the old API and for Triton's ``mask=``.

The kernel here is a sigmoid written the way ScalarE likes it: ``0.5 * tanh(0.5 x) + 0.5``
— one ``activation`` (the Scalar engine applies ``scale`` before the function for free) and
one ``tensor_scalar`` on the Vector engine (two fused ops: multiply, then add).

Run: ``python tutorials/02_tiling.py``
"""

from __future__ import annotations

import sys

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.testing import assert_close, randn

P_TILE = nl.tile_size.pmax      # 128 partitions
F_TILE = 2048                   # columns per tile: 8 KiB of fp32 per partition


@nki.jit
def sigmoid_kernel(x):
    """``sigmoid(x)`` for a [N, F] tensor of any size."""
    N, F = x.shape
    out = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    # ceil-divide: the last row tile and the last column tile may be partial
    for i in nl.affine_range((N + P_TILE - 1) // P_TILE):
        p0, p1 = i * P_TILE, min(N, (i + 1) * P_TILE)          # clip: rows p0..p1
        for j in nl.affine_range((F + F_TILE - 1) // F_TILE):
            f0, f1 = j * F_TILE, min(F, (j + 1) * F_TILE)      # clip: columns f0..f1
            # tiles are sized to what this iteration needs, so an edge tile is smaller
            t = nl.ndarray((p1 - p0, f1 - f0), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[p0:p1, f0:f1])
            th = nl.ndarray((p1 - p0, f1 - f0), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=th, op=nl.tanh, data=t, scale=0.5)     # tanh(0.5 x)
            res = nl.ndarray((p1 - p0, f1 - f0), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=res, data=th, op0=nl.multiply, operand0=0.5,
                               op1=nl.add, operand1=0.5)
            nisa.dma_copy(dst=out[p0:p1, f0:f1], src=res)
    return out


def sigmoid_reference(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


def show_tiles(N: int, F: int) -> None:
    """Print the tile grid the kernel walks for an [N, F] input."""
    rows = [(p, min(N, p + P_TILE)) for p in range(0, N, P_TILE)]
    cols = [(f, min(F, f + F_TILE)) for f in range(0, F, F_TILE)]
    print(f"[{N}, {F}]: {len(rows)} row tiles x {len(cols)} column tiles; "
          f"last row tile {rows[-1][1] - rows[-1][0]} partitions, "
          f"last column tile {cols[-1][1] - cols[-1][0]} columns")


def main() -> int:
    """Run on sizes with and without edge tiles; show that IR size does not grow with N."""
    for N, F, dtype in [(1000, 3000, "float32"), (256, 4096, "float32"), (300, 700, "bf16")]:
        show_tiles(N, F)
        x = randn((N, F), dtype, seed=N, std=3.0)
        y = sigmoid_kernel(x)
        c = assert_close(y, sigmoid_reference(x))
        print(f"  {c.dtype}: max abs error {c.max_abs[0]:.2e}  (tolerance atol={c.tol.atol:.2e})")

    # Python unrolls the loops while tracing, but the simulator folds iterations that differ
    # only by an affine offset back into loops: the program has the same few instructions
    # whether there are 8 row tiles or 64 (compile time does not grow with tensor size).
    for N in (1000, 8000):
        spec = sigmoid_kernel.specialize(randn((N, 3000), seed=0))
        print(f"N={N}: {spec.num_instructions} instructions in the IR")
    print("\nIR instructions for N=1000 (tensor declarations left out): a loop over the 7 full "
          "row tiles, its body one full and one partial column tile, then the peeled partial "
          "row tile of 104 partitions:")
    ir = sigmoid_kernel.specialize(randn((1000, 3000), seed=0)).ir
    print("\n".join(line for line in ir.splitlines() if not line.startswith("  tensor ")))
    print("tutorial 02 OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
