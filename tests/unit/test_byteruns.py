"""Written-byte tracking of HBM tensors as intervals (``nki.lang.byteruns.ByteRuns``): the
same answers as the per-byte ``ByteFlags`` table, in memory that does not grow with the
tensor (a 2.6 GiB table for one nki-library output_proj_cte output raised MemoryError)."""

from __future__ import annotations

import tracemalloc

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.ir.target import get_target
from nki.jit.specialize import trace_core
from nki.lang.byteflags import ByteFlags
from nki.lang.byteruns import ByteRuns


def _random_layout(rng, n: int):
    """A ``Trace._layout`` triple inside ``n`` bytes: up to 2 strided dims of an element."""
    while True:
        dims = int(rng.integers(1, 3))
        shape = [int(rng.integers(1, 5)) for _ in range(dims)]
        isz = int(rng.choice([1, 2, 4]))
        strides = [int(rng.integers(0, 12)) for _ in range(dims)]
        extent = sum((c - 1) * s for c, s in zip(shape, strides)) + isz
        if extent <= n:
            base = int(rng.integers(0, n - extent + 1))
            return base, (*shape, isz), (*strides, 1)


def test_byte_runs_answer_like_the_byte_table():
    rng = np.random.default_rng(7)
    for _ in range(600):
        n = int(rng.integers(1, 160))
        table, runs = ByteFlags((1, n)), ByteRuns((1, n))
        for _ in range(int(rng.integers(1, 8))):
            layout = None if rng.random() < 0.2 else _random_layout(rng, n)
            if rng.random() < 0.6:
                value = bool(rng.random() < 0.8)
                table.set(layout, value)
                runs.set(layout, value)
            probe = _random_layout(rng, n)
            assert runs.state(layout) == table.state(layout)
            assert runs.state(probe) == table.state(probe)
            assert runs.state(None) == table.state(None)


ROWS, COLS = 8192, 32768          # a 1 GiB fp32 output


def _big_output(x):
    out = nl.ndarray((ROWS, COLS), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=1.0)
    for r in range(0, ROWS, 2048):          # a few tiles, written in place
        nisa.dma_copy(dst=out[r:r + 128, 0:512], src=t)
    return out


def test_tracing_a_huge_output_keeps_no_per_byte_table():
    kernel = nki.jit(_big_output, cache=False)
    settings = kernel.settings()
    x = np.zeros((1, 1), np.float32)
    tracemalloc.start()
    _, trace, _, (out,) = trace_core(_big_output, (x,), {}, kernel._tensor_args((x,)),
                                     get_target(settings.target), 0, 1, settings)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 << 20                    # far below the output's 1 GiB
    assert trace.written_state_of(out) == "some" and not trace.fully_written(out)
