# ruff: noqa: N999  (numbered tutorial; run as a script or with python -m tutorials.NN_name)
"""Tutorial 11 — how fast would it be on Trainium? The cost model, step by step.

Tutorial 03 made a matmul faster by counting DMAs and HBM bytes. Here ``nki.estimate`` puts
a time on each step for a real generation (trn1, trn2, trn3) without hardware: it reads the
kernel's IR, costs each instruction with the documented per-instruction formulas, and
schedules the engines (TensorE, VectorE, ScalarE, GpSimdE, 16 DMA queues) in parallel,
ordered by true data dependencies. Its numbers are a model, not a measurement
(docs/cost-model.md says what it assumes); what they are good for is *which engine is the
bottleneck* and *which line to change first*.

1. **tiled**, **hoisted**, **blocked** — tutorial 03's three fp32 matmuls;
2. **bf16** — the blocked kernel on bf16 inputs: half the DMA bytes, and TensorE runs fp32
   four times slower than bf16;
3. an attention kernel (``nki.kernels.flash_attention``): its bottleneck and its top lines.

Each step prints the estimate, its bottleneck and MFU; ``est.save_trace("x.json.gz")`` would
write the timeline for https://ui.perfetto.dev. The check: every kernel's result matches
numpy, every step moves less DMA time than the previous one (what each memory step is
for), and the last, bf16 step is the fastest on every generation. Faster DMAs do not always
make a faster kernel: once fp32 matmuls bound it (TensorE runs fp32 at a quarter of the bf16
rate), a memory step can leave the latency where it was or a little worse.

Run: ``python tutorials/11_cost_model.py``
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
from nki.kernels import flash_attention

import nki
from nki.testing import assert_close, randn

GENS = ("trn1", "trn2", "trn3")


def tutorial_03():
    """Tutorial 03's module (its kernels are the starting point)."""
    path = Path(__file__).with_name("03_matmul_memory.py")
    spec = importlib.util.spec_from_file_location("tutorial_03_for_11", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def matmul_steps(t03, lhsT, rhs):
    """(name, kernel, arguments) of each step."""
    bf = (lhsT.astype(ml_dtypes.bfloat16), rhs.astype(ml_dtypes.bfloat16))
    return [("tiled", t03.matmul_tiled, (lhsT, rhs)),
            ("hoisted", t03.matmul_hoisted, (lhsT, rhs)),
            ("blocked", t03.matmul_blocked, (lhsT, rhs)),
            ("bf16", t03.matmul_blocked, bf)]


def main() -> int:
    t03 = tutorial_03()
    K, M, N = 1024, 512, 2048
    lhsT, rhs = randn((K, M), seed=1), randn((K, N), seed=2)
    steps = matmul_steps(t03, lhsT, rhs)
    print(f"C[{M}, {N}] = lhsT[{K}, {M}].T @ rhs[{K}, {N}]: the model's estimate (us)\n")
    print(f"{'step':9s}" + "".join(f" {g + ' us':>9s} {'bottleneck':>10s} {'MFU':>5s}"
                                    for g in GENS))
    dma = {g: float("inf") for g in GENS}
    latency = {g: [] for g in GENS}
    for name, kernel, args in steps:
        row = f"{name:9s}"
        for gen in GENS:
            est = nki.estimate(kernel, target=gen)(*args)
            row += f" {est.latency_us:9.1f} {est.bottleneck:>10s} {100 * est.mfu:4.0f}%"
            assert est.busy_ns("dma") < dma[gen], (name, gen)
            dma[gen] = est.busy_ns("dma")
            latency[gen].append(est.latency_us)
        print(row)
        a, b = (x.astype(np.float64) for x in args)   # the step's own (rounded) inputs
        assert_close(kernel(*args), a.T @ b)
    assert all(min(v) == v[-1] for v in latency.values())   # bf16 is the fastest step
    est = nki.estimate(steps[-1][1], target="trn2")(*steps[-1][2])
    print(f"\nthe bf16 step on trn2, in full:\n{est}\n\nits critical path by line:")
    print(est.by_line())
    print(EXPLANATION)

    q = randn((1, 2, 1024, 128), seed=3).astype(ml_dtypes.bfloat16)
    att = nki.estimate(flash_attention, target="trn2")(q, q, q, causal=True)
    print(f"\nflash_attention 1x2x1024x128 causal bf16 on trn2:\n{att}\n\ntop lines:")
    print("\n".join(str(att.by_line()).splitlines()[:6]))
    print(ATTENTION)
    print("tutorial 11 OK")
    return 0


EXPLANATION = """
Reading the numbers:
* tiled -> hoisted: the stationary strip is loaded once per row block; the same matmuls
  wait on fewer DMAs. Each DMA takes at least ~0.85 us (its latency, overlapped with
  other transfers) and 7 ns per contiguous run, and the 16 queues move ~17-33 B/ns each:
  trn1 and trn2 stay DMA-bound, trn3's faster queues leave TensorE the bottleneck already.
* hoisted -> blocked: each rhs block crosses HBM once in wide (4 KiB per partition) DMAs:
  the DMA time halves, and TensorE is the bottleneck on every generation (fp32 matmuls
  cost 4x a bf16 one). On trn2/trn3 the latency does not drop with it: TensorE waits at
  the start for a whole rhs block and for strips queued behind the next block's loads.
* blocked -> bf16: half the bytes to move and matmuls at full rate; the bottleneck moves
  back to the DMAs, and the line table says which loads sit on the critical path."""

ATTENTION = """
In attention the matmuls are small (128 x 128 tiles) and every score tile goes through
VectorE and ScalarE (max, exp, row sums, rescaling): those engines, not TensorE, set the
pace, which is why fused instructions (activation with a reduce, tensor_scalar with two ops)
matter more there than matmul tiling."""


if __name__ == "__main__":
    sys.exit(main())
