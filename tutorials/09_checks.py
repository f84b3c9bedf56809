# ruff: noqa: N999  (numbered tutorial; run as a script or with python -m tutorials.NN_name)
"""Tutorial 09 — the checks: three common mistakes and the errors they give.

On hardware these mistakes are a compiler error at best and silently wrong numbers at worst.
The simulator checks the rules while tracing, before anything runs, and names the NKI error
code, the rule, and your ``file:line``:

1. a tile with more than 128 partitions;
2. more PSUM live at once than the 8 banks of 2 KiB per partition hold, in any order a
   compiler could schedule the instructions (tiles that fit once each is read right after
   its last matmul only get an ``nki_psum_reordered`` warning);
3. reading a tile that was never written. By default, as in AWS's simulator, fresh SBUF/PSUM
   reads as NaN, so the mistake shows up in the output; ``check_uninit=True`` (or
   ``NKI_CHECK_UNINIT=1``) turns it into an error at the offending instruction.

Run: ``python tutorials/09_checks.py``
"""

from __future__ import annotations

import sys

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.testing import assert_close, randn


@nki.jit
def too_many_partitions(x):
    """Mistake 1: the whole [256, 64] input as one tile."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)       # 256 partitions
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def too_much_psum(lhsT, rhs):
    """Mistake 2: nine [128, 512] fp32 accumulators (one 2 KiB bank each) alive together:
    each output adds the last accumulator, so none can be read before all nine are done."""
    K, M = lhsT.shape
    out = nl.ndarray((M, 9 * 512), dtype=nl.float32, buffer=nl.shared_hbm)
    lt = nl.ndarray((K, M), dtype=lhsT.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=lt, src=lhsT)
    accs = []
    for j in range(9):
        rt = nl.ndarray((K, 512), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=rt, src=rhs[:, j * 512:(j + 1) * 512])
        acc = nl.ndarray((M, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=lt, moving=rt)
        accs.append(acc)                   # kept alive: all nine are read below
    last = nl.ndarray((M, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=last, src=accs[-1])
    for j, acc in enumerate(accs):
        res = nl.ndarray((M, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=res, data1=acc, data2=last, op=nl.add)
        nisa.dma_copy(dst=out[:, j * 512:(j + 1) * 512], src=res)
    return out


def row_sums(x):
    """Mistake 3: accumulate row sums into a tile that was never initialised."""
    out = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    total = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    # missing: nisa.memset(dst=total, value=0.0)
    for c in range(0, x.shape[1], 512):
        t = nl.ndarray((x.shape[0], 512), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[:, c:c + 512])
        part = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=part, op=nl.add, data=t, axis=1)
        nisa.tensor_tensor(dst=total, data1=total, data2=part, op=nl.add)
    nisa.dma_copy(dst=out, src=total)
    return out


def expect_error(title: str, run, code: str) -> str:
    """Run ``run()``, require an nki error with ``code``, print and return its message."""
    try:
        run()
    except nki.NkiError as e:
        if e.code != code:
            raise AssertionError(f"{title}: expected {code}, got {e.code}") from e
        print(f"--- {title}\n{type(e).__name__}: {e}\n")
        return str(e)
    raise AssertionError(f"{title}: no error raised")


def main() -> int:
    """Provoke each mistake and check the error (or, for 3 without checking, the NaNs)."""
    x = randn((256, 64), seed=0)
    expect_error("1. partition dimension > 128", lambda: too_many_partitions(x),
                 "err_num_partition_exceed_arch_limit")
    lhsT, rhs = randn((128, 128), seed=1), randn((128, 9 * 512), seed=2)
    expect_error("2. PSUM over capacity", lambda: too_much_psum(lhsT, rhs),
                 "nki_psum_capacity_exceeded")

    x = randn((128, 1024), seed=3)
    y = nki.jit(row_sums)(x)                      # default: runs, reads NaN
    print("--- 3. uninitialised read, default: the output is NaN, and a test catches it")
    try:
        assert_close(y, x.astype(np.float64).sum(1, keepdims=True))
        raise RuntimeError("expected NaNs")
    except AssertionError as e:
        print(f"{e}\n")
    expect_error("3. uninitialised read with check_uninit=True",
                 lambda: nki.jit(row_sums, check_uninit=True)(x), "nki_uninitialized_read")
    print("tutorial 09 OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
