# ruff: noqa: N999  (numbered tutorial; run as a script or with python -m tutorials.NN_name)
"""Tutorial 06 — porting a Triton kernel: a fused row softmax, side by side.

Triton and NKI both program *tiles*, so a port is mostly renaming — with three differences
worth learning:

=========================================  ================================================
Triton                                     NKI
=========================================  ================================================
``pid = tl.program_id(0)``, a launch grid  a Python loop over tiles inside the kernel
of many program instances                  (``nl.program_id`` only tells the <= 2 LNC cores
                                           apart)
a block of ``BLOCK_M`` rows, any power     a tile of up to 128 rows, one per *partition*;
of two                                     all partitions run each instruction together
``mask=`` on loads and stores, padding     a clipped slice ``x[p0:min(N, p0 + 128)]``:
with ``other=-inf``                        the edge tile is simply smaller, no padding
``tl.load`` / ``tl.store``                 ``nisa.dma_copy`` HBM -> SBUF / SBUF -> HBM
``tl.max(x, axis=1)``                      ``nisa.tensor_reduce(axis=1)``: free-axis reduce
``x - x_max[:, None]``                     a [P, 1] column as ``bias=`` / ``operand0=``
``tl.exp``, then ``tl.sum``                one ``nisa.activation(exp)`` that also sums
``acc += tl.dot(a, b)``                    ``nisa.nc_matmul(acc_psum, aT, b, accumulate=k>0)``
                                           — fp32 accumulation in PSUM; ``aT`` has K on the
                                           partitions (TensorE contracts over partitions)
=========================================  ================================================

When ``triton`` is importable, the Triton kernel below also runs in Triton's CPU
interpreter (``TRITON_INTERPRET=1``) and both results and times are compared. Without
triton that part is skipped with a note.

Run: ``python tutorials/06_port_triton.py``
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import time

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.testing import assert_close, randn

# The Triton kernel we port: each program instance normalises BLOCK_M rows.
TRITON_SOURCE = '''
import triton
import triton.language as tl


@triton.jit
def softmax_rows_kernel(x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(axis=0)                      # which block of rows
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)                     # BLOCK_N >= n_cols
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask,
                other=float("-inf"))                 # padding never wins the max
    x_max = tl.max(x, axis=1)
    e = tl.exp(x - x_max[:, None])
    denom = tl.sum(e, axis=1)
    tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], e / denom[:, None], mask=mask)


def softmax_triton(x, block_m=16):
    import torch
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    grid = (triton.cdiv(n_rows, block_m),)
    softmax_rows_kernel[grid](x, y, n_rows, n_cols, x.stride(0), y.stride(0),
                              BLOCK_M=block_m, BLOCK_N=triton.next_power_of_2(n_cols))
    return y
'''


@nki.jit
def softmax_rows_nki(x):
    """The port. Comments name the Triton line each statement replaces."""
    n_rows, n_cols = x.shape
    y = nl.ndarray((n_rows, n_cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range((n_rows + 127) // 128):       # grid = cdiv(n_rows, BLOCK_M)
        p0, p1 = i * 128, min(n_rows, i * 128 + 128)       # rows = pid * BLOCK_M + ...
        P = p1 - p0                                        # mask: a smaller edge tile
        t = nl.ndarray((P, n_cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[p0:p1, :])             # x = tl.load(...)
        neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=t, axis=1,
                           negate=True)                    # x_max = tl.max(x, axis=1)
        e = nl.ndarray((P, n_cols), dtype=nl.float32, buffer=nl.sbuf)
        denom = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e, op=nl.exp, data=t, bias=neg_max,   # e = tl.exp(x - x_max)
                        reduce_op=nl.add, reduce_res=denom,        # denom = tl.sum(e, 1)
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv, data=denom)
        res = nl.ndarray((P, n_cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=e, op0=nl.multiply, operand0=inv)   # e / denom
        nisa.dma_copy(dst=y[p0:p1, :], src=res)           # tl.store(..., mask=mask)
    return y


def softmax_reference(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def timed(fn, repeat: int = 3) -> tuple[object, float]:
    """Result of ``fn()`` and its best CPU time over ``repeat`` runs after a warm-up."""
    out = fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return out, best


def run_triton(x: np.ndarray):
    """Triton's CPU interpreter on ``x``: (output, seconds), or None when triton is absent."""
    if importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None:
        return None
    os.environ["TRITON_INTERPRET"] = "1"            # must be set before triton is imported
    import torch
    # triton.jit reads its kernel's source from a file, so the string becomes a module
    path = os.path.join(tempfile.mkdtemp(), "softmax_triton_tutorial.py")
    with open(path, "w") as f:
        f.write(TRITON_SOURCE)
    spec = importlib.util.spec_from_file_location("softmax_triton_tutorial", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    xt = torch.from_numpy(x)
    out, secs = timed(lambda: module.softmax_triton(xt), repeat=1)
    return out.numpy(), secs


def main() -> int:
    """Run the NKI port (and Triton's interpreter when available); compare with numpy."""
    x = randn((1000, 781), seed=0, std=3.0)              # ragged on both axes
    y, secs = timed(lambda: softmax_rows_nki(x))
    c = assert_close(y, softmax_reference(x))
    print(f"NKI port on the simulator: {secs * 1e3:.1f} ms CPU, max abs error vs numpy "
          f"{c.max_abs[0]:.2e}")
    triton_result = run_triton(x)
    if triton_result is None:
        print("note: triton (with torch) is not installed, so the Triton original was not "
              "run; `pip install triton` and rerun to compare with its CPU interpreter")
    else:
        yt, secs_t = triton_result
        c = assert_close(yt, softmax_reference(x))
        assert_close(y, yt, dtype="float32")
        print(f"Triton interpreter: {secs_t * 1e3:.1f} ms CPU, max abs error vs numpy "
              f"{c.max_abs[0]:.2e}; NKI and Triton agree within fp32 tolerance")
    print("tutorial 06 OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
