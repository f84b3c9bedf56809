# ruff: noqa: N999  (numbered tutorial; run as a script or with python -m tutorials.NN_name)
"""Tutorial 01 — your first NKI kernel: elementwise add, HBM → SBUF → HBM.

A NeuronCore computes on tiles that live in its on-chip *State Buffer* (SBUF): a memory of
128 *partitions* (rows), each holding a few hundred KiB. Kernel inputs and outputs live in
HBM, the device's DRAM. So every kernel has the same three movements:

1. DMA the inputs from HBM into SBUF tiles (``nisa.dma_copy``);
2. run instructions on the compute engines, tile in, tile out (here the Vector engine's
   ``nisa.tensor_tensor``);
3. DMA the result from SBUF back to an HBM tensor the kernel returns.

Run: ``python tutorials/01_first_kernel.py``
"""

from __future__ import annotations

import sys

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.testing import assert_bitwise_equal, assert_close, rand


@nki.jit
def add_kernel(a, b):
    """``a + b`` for two [P, F] HBM tensors with P <= 128 (one tile; tutorial 02 tiles)."""
    # The output: an HBM tensor the kernel creates and returns. shared_hbm is the HBM
    # visible to every core, and the buffer every returned tensor must use.
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)

    # Two SBUF tiles. Dimension 0 is the partition dimension (at most 128 rows); the rest
    # is laid out inside each partition. Creating them costs nothing: the simulator, like
    # the compiler, gives each tile an address in SBUF before the kernel runs.
    a_tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    b_tile = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)

    # 1. HBM -> SBUF. Current NKI puts the destination first in every instruction.
    nisa.dma_copy(dst=a_tile, src=a)
    nisa.dma_copy(dst=b_tile, src=b)

    # 2. Compute: the Vector engine reads both tiles row by row (all 128 partitions in
    #    parallel), adds in fp32 and rounds once into the destination's dtype.
    nisa.tensor_tensor(dst=a_tile, data1=a_tile, data2=b_tile, op=nl.add)

    # 3. SBUF -> HBM.
    nisa.dma_copy(dst=out, src=a_tile)
    return out


def main() -> int:
    """Run the kernel on fp32 and bf16 inputs, show its IR, check it against numpy."""
    a = rand((128, 512), "float32", seed=0, low=-1, high=1)
    b = rand((128, 512), "float32", seed=1, low=-1, high=1)

    # Calling a kernel traces it (runs its Python once with tensor handles), checks every
    # instruction's rules, compiles the result to machine code, and runs it. numpy in,
    # numpy out.
    out = add_kernel(a, b)
    print(f"add_kernel({a.shape} fp32) -> {out.shape} {out.dtype}")

    # What was traced: the placed IR (tensors with their SBUF addresses, one line per
    # instruction with the source line it came from) ...
    spec = add_kernel.specialize(a, b)
    print("\nIR:\n" + spec.ir)
    print("(the two input DMAs differ only in their addresses - a and b sit side by side in "
          "HBM, as do their tiles in SBUF - so the simulator folded them into a 2-trip loop)")
    # ... and the Python the simulator generated from it: loops over instruction rows, each
    # row's origin in a comment (one row per instruction, each run by a compiled helper).
    print("\ngenerated code:\n" + spec.source)

    # fp32 + fp32 computed in fp32 and rounded once is exactly numpy's float32 add.
    assert_bitwise_equal(out, a + b)
    print("fp32: bit-identical to numpy's a + b")

    # bf16 inputs: the engine adds in fp32 and rounds the sum to bf16 (nearest even) — one
    # rounding, well inside bf16's tolerance from nki.testing's table.
    a16, b16 = a.astype(nl.bfloat16.host_dtype()), b.astype(nl.bfloat16.host_dtype())
    out16 = add_kernel(a16, b16)
    report = assert_close(out16, a16.astype(np.float64) + b16.astype(np.float64))
    print(f"bf16: max abs error {report.max_abs[0]:.3g} (bf16 tolerance rtol={report.tol.rtol})")
    print("tutorial 01 OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
