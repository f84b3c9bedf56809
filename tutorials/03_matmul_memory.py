# ruff: noqa: N999  (numbered tutorial; run as a script or with python -m tutorials.NN_name)
"""Tutorial 03 — the memory hierarchy and PSUM accumulation, through a matmul optimised in
three steps.

The Tensor engine (TensorE) computes ``stationary.T @ moving``: both operands in SBUF with
the contraction dimension K on the partitions (so at most 128 of K per instruction), the
stationary one at most 128 wide (it becomes the output's partitions), the moving one up to
512 wide. The result goes to PSUM, a small (2 MiB) accumulation memory next to TensorE: 8
banks of 2 KiB per partition, fp32. PSUM can *add* a matmul's result to what it holds, so a
K-long contraction is a loop of ``nc_matmul(..., accumulate=k > 0)`` into one PSUM tile and
partial sums never leave the chip.

We compute ``C = lhsT.T @ rhs`` (lhsT: [K, M], rhs: [K, N]) three ways and, for each, print
what the simulator measured on this CPU and what the IR says the hardware would execute:

1. **tiled** — the textbook triple loop; both operand tiles are loaded for every matmul.
2. **hoisted** — the lhsT strip of an output row block is loaded once, outside the N loop.
3. **blocked** — a whole column block of rhs is loaded once and reused by every row block.

Run: ``python tutorials/03_matmul_memory.py``
"""

from __future__ import annotations

import sys
import time
from collections import Counter

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.ir.nodes import Instr, Loop
from nki.testing import assert_close, randn

TK, TM, TN = 128, 128, 512        # K per matmul (partitions), stationary width, moving width


@nki.jit
def matmul_tiled(lhsT, rhs):
    """Step 1: for each output tile, for each K tile, load both operands and accumulate."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)   # one PSUM bank
            for k in nl.affine_range(K // TK):
                lt = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                rt = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lt, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                nisa.dma_copy(dst=rt, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                # the first K tile overwrites the bank, the others add to it
                nisa.nc_matmul(dst=acc, stationary=lt, moving=rt, accumulate=k > 0)
            _store(out, acc, m * TM, n * TN, lhsT.dtype)
    return out


def _store(out, acc, m0: int, n0: int, dtype) -> None:
    """PSUM -> SBUF (DMA cannot read PSUM) -> HBM."""
    res = nl.ndarray(acc.shape, dtype=dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out[m0:m0 + acc.shape[0], n0:n0 + acc.shape[1]], src=res)


@nki.jit
def matmul_hoisted(lhsT, rhs):
    """Step 2: the [K, 128] lhsT strip of row block m is loaded once and used for every n."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        strip = []                                         # K // TK tiles, loaded once
        for k in nl.affine_range(K // TK):
            lt = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=lt, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
            strip.append(lt)
        for n in nl.affine_range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                rt = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=rt, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(dst=acc, stationary=strip[k], moving=rt, accumulate=k > 0)
            _store(out, acc, m * TM, n * TN, lhsT.dtype)
    return out


@nki.jit
def matmul_blocked(lhsT, rhs, n_block=1024):
    """Step 3: each [K, n_block] block of rhs is loaded once (wide DMAs) and reused by every
    row block; the lhsT strip is loaded once per (column block, row block)."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(N // n_block):
        block = []                                         # K // TK tiles of [TK, n_block]
        for k in nl.affine_range(K // TK):
            rt = nl.ndarray((TK, n_block), dtype=rhs.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=rt, src=rhs[k * TK:(k + 1) * TK, b * n_block:(b + 1) * n_block])
            block.append(rt)
        for m in nl.affine_range(M // TM):
            strip = []
            for k in nl.affine_range(K // TK):
                lt = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lt, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                strip.append(lt)
            for n in nl.affine_range(n_block // TN):
                acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                for k in nl.affine_range(K // TK):
                    nisa.nc_matmul(dst=acc, stationary=strip[k],
                                   moving=block[k][:, n * TN:(n + 1) * TN], accumulate=k > 0)
                _store(out, acc, m * TM, b * n_block + n * TN, lhsT.dtype)
    return out


def executed(body, env: dict | None = None) -> tuple[Counter, int]:
    """Instructions the program executes (by name) and the bytes its DMAs move, found by
    walking the IR's loops with their trip counts."""
    env = env or {}
    counts, dma_bytes = Counter(), 0
    for s in body:
        if isinstance(s, Loop):
            for i in range(s.trip.evaluate(env)):
                c, b = executed(s.body, {**env, s.slot: i})
                counts += c
                dma_bytes += b
        elif isinstance(s, Instr) and s.opcode.name != "FILL_UNINIT":
            counts[s.opcode.name.lower()] += 1
            if s.opcode.name == "DMA_COPY":
                src = s.operand("src")
                dma_bytes += int(np.prod(src.shape)) * src.dtype.itemsize
    return counts, dma_bytes


def best_time(fn, repeat: int = 5) -> float:
    """Best CPU time (all threads of this process) of ``repeat`` calls after a warm-up call
    (which compiles). CPU time rather than wall time: other work on the machine barely moves
    it."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def main() -> int:
    """Run the three steps, print time, instruction counts and HBM traffic; check each."""
    K, M, N = 1024, 512, 2048
    lhsT, rhs = randn((K, M), seed=1), randn((K, N), seed=2)
    expected = lhsT.astype(np.float64).T @ rhs.astype(np.float64)
    print(f"C[{M}, {N}] = lhsT[{K}, {M}].T @ rhs[{K}, {N}], fp32 in, fp32 PSUM accumulation\n")
    print(f"{'step':10s} {'CPU ms':>8s} {'static':>7s} {'dma':>6s} {'matmul':>7s} "
          f"{'copies':>7s} {'HBM MiB read+written':>21s}")
    for name, kernel in [("tiled", matmul_tiled), ("hoisted", matmul_hoisted),
                         ("blocked", matmul_blocked)]:
        secs = best_time(lambda kernel=kernel: kernel(lhsT, rhs))
        assert_close(kernel(lhsT, rhs), expected)
        spec = kernel.specialize(lhsT, rhs)
        counts, traffic = executed(spec.cores[0].program.body)
        print(f"{name:10s} {secs * 1e3:8.1f} {spec.num_instructions:7d} {counts['dma_copy']:6d} "
              f"{counts['nc_matmul']:7d} {counts['tensor_copy']:7d} {traffic / 2**20:21.1f}")
    secs = best_time(lambda: lhsT.T @ rhs)
    print(f"{'numpy':10s} {secs * 1e3:8.1f}   (BLAS on the host, for scale)")
    print(EXPLANATION)
    print("tutorial 03 OK")
    return 0


EXPLANATION = """
Why each step helps on hardware (the simulator's time mostly follows the DMA count too; its
CPU times can swing by tens of percent on a busy machine, the counts never do):
* tiled: every nc_matmul waits for two fresh DMAs. A DMA has a fixed cost of about 2 us
  (descriptor generation, semaphores) no matter how small, and HBM is ~20x slower than SBUF,
  so TensorE idles. lhsT is read from HBM N/512 times and rhs M/128 times.
* hoisted: the lhsT strip (the *stationary* operand) is loaded once per row block instead of
  once per output tile: fewer DMAs, less HBM traffic, same matmuls.
* blocked: each rhs block crosses HBM once, in wide transfers (4 KiB per partition reach
  full DMA bandwidth); the strip is reloaded only once per column block. What bounds the
  block size is SBUF: K x n_block x 4 bytes must stay resident (here 8 tiles x 4 KiB per
  partition) — the simulator checks that capacity like the compiler does.
In all three, PSUM does the K accumulation in place: 'static' counts stay small because
the simulator folds the Python loops back into IR loops."""


if __name__ == "__main__":
    sys.exit(main())
