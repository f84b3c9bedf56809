"""Cost-model benchmark: the model's estimate of every ``nki.kernels`` kernel on trn1, trn2 and
trn3, next to the kernel's CPU simulation time and what the model stage itself costs.

    python benchmarks/bench_cost.py [--quick] [--only NAME] [--json PATH]

(default PATH: benchmarks/results/cost.json)

Columns: the estimated latency per generation (µs, a model, never a measurement), the
bottleneck engine on trn2, the simulator's wall time for one call (warm, ms), and the model
stage's cost: the compiled scheduling loop per executed instruction (``us/instr``, warm; the
record also has it with the Python timeline built) and the whole estimate from a specialized
program (prepare + schedule + summary, ms). The CPU model is in the record.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from _record import best_of, write_record  # noqa: E402  (benchmarks/_record.py)

GENS = ("trn1", "trn2", "trn3")
BF16 = ml_dtypes.bfloat16


def cases(quick: bool):
    """(name, kernel, args, kwargs) for each library kernel."""
    from nki.kernels import (
        cross_entropy,
        cross_entropy_bwd,
        flash_attention,
        flash_attention_bwd,
        flash_attention_fwd,
        gelu,
        layernorm,
        layernorm_bwd,
        log_softmax,
        matmul_lhsT,
        rmsnorm,
        rmsnorm_bwd,
        rmsnorm_residual,
        silu,
        softmax_rows,
        swiglu_mlp,
        transpose2d,
    )
    from nki.kernels.linear import linear
    from nki.kernels.matmul import batched_matmul, matmul
    from nki.kernels.rope import rope, rope_tables

    rng = np.random.default_rng(0)

    def rnd(*shape, dtype=np.float32, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(dtype)

    n = 1024 if quick else 2048
    yield f"matmul {n}^3 bf16", matmul, (rnd(n, n, dtype=BF16), rnd(n, n, dtype=BF16)), {}
    yield f"matmul_lhsT {n}^3 bf16", matmul_lhsT, (rnd(n, n, dtype=BF16),
                                                   rnd(n, n, dtype=BF16)), {}
    yield "matmul 1024^3 fp32", matmul, (rnd(1024, 1024), rnd(1024, 1024)), {}
    yield "batched_matmul 8x512^3 bf16", batched_matmul, (rnd(8, 512, 512, dtype=BF16),
                                                          rnd(8, 512, 512, dtype=BF16)), {}
    yield "linear+gelu 1024x1024->2048 bf16", linear, (
        rnd(1024, 1024, dtype=BF16), rnd(2048, 1024, dtype=BF16, scale=1 / 32),
        rnd(2048, dtype=BF16), "gelu"), {}
    yield "swiglu_mlp 512x1024x2816 bf16", swiglu_mlp, (
        rnd(512, 1024, dtype=BF16), rnd(1024, 2816, dtype=BF16, scale=1 / 32),
        rnd(1024, 2816, dtype=BF16, scale=1 / 32), rnd(2816, 1024, dtype=BF16, scale=1 / 53)), {}
    x = rnd(4096, 1024)
    yield "gelu 4096x1024 fp32", gelu, (x,), {}
    yield "silu 4096x1024 fp32", silu, (x,), {}
    yield "softmax_rows 4096x1024 fp32", softmax_rows, (x,), {}
    yield "log_softmax 4096x1024 fp32", log_softmax, (x,), {}
    yield "layernorm 4096x1024 fp32", layernorm, (x, rnd(1024), rnd(1024)), {}
    yield "rmsnorm 4096x1024 fp32", rmsnorm, (x, rnd(1024)), {}
    cos, sin = rope_tables(2048, 128)
    yield "rope 8x2048x128 fp32", rope, (rnd(8, 2048, 128), cos, sin), {}
    yield "cross_entropy 1024x8192 fp32", cross_entropy, (
        rnd(1024, 8192), rng.integers(0, 8192, 1024).astype(np.int32)), {}
    yield "transpose2d 2048x2048 fp32", transpose2d, (rnd(2048, 2048),), {}
    yield "rmsnorm_residual 4096x1024 fp32", rmsnorm_residual, (x, rnd(4096, 1024), rnd(1024)), {}
    yield "layernorm_bwd 4096x1024 fp32", layernorm_bwd, (rnd(4096, 1024), x, rnd(1024)), {}
    yield "rmsnorm_bwd 4096x1024 fp32", rmsnorm_bwd, (rnd(4096, 1024), x, rnd(1024)), {}
    yield "cross_entropy_bwd 1024x8192 fp32", cross_entropy_bwd, (
        rnd(1024, 8192), rng.integers(0, 8192, 1024).astype(np.int32)), {}
    q1 = rnd(2048, 128, dtype=BF16)
    yield "flash_attention_fwd 2048x128 causal bf16", flash_attention_fwd, (q1, q1, q1), {}
    q2 = rnd(1, 2, 1024, 128, dtype=BF16)
    o, lse = flash_attention(q2, q2, q2, causal=True)      # the forward's outputs, simulated
    yield "flash_attention_bwd 1x2x1024x128 causal bf16", flash_attention_bwd, (
        q2, q2, q2, o, rnd(1, 2, 1024, 128, dtype=BF16), lse), {"causal": True}
    s = 1024 if quick else 4096
    q = rnd(1, 8, s, 128, dtype=BF16)
    yield f"flash_attention 1x8x{s}x128 causal bf16", flash_attention, (q, q, q), \
        {"causal": True}


def model_stage(spec, target: str) -> tuple[float, float, float, int]:
    """(whole estimate ms, compiled loop us per executed instruction, the same with the
    timeline built, executed instructions), all warm."""
    from nki.cost import fast
    from nki.cost.estimate import estimate_spec
    from nki.cost.facts import cost_facts
    from nki.cost.prep import prepare

    whole = best_of(lambda: estimate_spec(spec, target, False, "k", backend="numba"), 3)
    facts = cost_facts(target)
    preps = [prepare(c.program, facts) for c in spec.cores]
    tables = [(fast.flatten(p, facts), fast.count_executions(p), p) for p in preps]
    loop = best_of(lambda: [fast.loop_arrays(t, n, p, facts) for t, n, p in tables], 3)
    built = best_of(lambda: [fast.run_tables(t, n, p, facts, 0) for t, n, p in tables], 3)
    executed = sum(fast.loop_arrays(t, n, p, facts)[0] for t, n, p in tables)
    per = 1e6 / max(1, executed)
    return whole * 1e3, loop * per, built * per, executed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller matmul and attention")
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results",
                                                   "cost.json"))
    args = ap.parse_args()
    import nki
    from nki.cost import MODEL_VERSION

    rows = []
    print(f"{'case':40s} {'trn1 us':>9s} {'trn2 us':>9s} {'trn3 us':>9s} {'bottleneck':>10s} "
          f"{'sim ms':>9s} {'model ms':>9s} {'us/instr':>8s}")
    for name, kernel, kargs, kwargs in cases(args.quick):
        if args.only and args.only not in name:
            continue
        row = {"case": name}
        t0 = time.perf_counter()
        for gen in GENS:
            est = nki.estimate(kernel, target=gen)(*kargs, **kwargs)
            row[f"{gen}_us"] = est.latency_us
            row[f"{gen}_bottleneck"] = est.bottleneck
            row[f"{gen}_mfu"] = est.mfu
        row["estimate_cold_s"] = time.perf_counter() - t0
        spec = kernel.specialize(*kargs, **kwargs)   # the kernel's own target (trn3 default)
        row["model_ms"], row["us_per_instr"], row["us_per_instr_with_timeline"], \
            row["executed"] = model_stage(spec, "trn3")
        row["sim_ms"] = best_of(lambda: kernel(*kargs, **kwargs), 1) * 1e3
        rows.append(row)
        print(f"{name:40s} {row['trn1_us']:9.1f} {row['trn2_us']:9.1f} {row['trn3_us']:9.1f} "
              f"{row['trn2_bottleneck']:>10s} {row['sim_ms']:9.1f} {row['model_ms']:9.2f} "
              f"{row['us_per_instr']:8.2f}", flush=True)
    write_record(args.json, model_version=MODEL_VERSION, quick=args.quick, rows=rows,
                 note="latencies are the cost model's estimates, not measurements")
    return 0


if __name__ == "__main__":
    sys.exit(main())
