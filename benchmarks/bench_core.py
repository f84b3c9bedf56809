"""Core benchmark: each realistic kernel against its torch counterpart on the CPU, one thread
each, in one process; plus compile times (new kernel, warm cache in a new process).

    python benchmarks/bench_core.py [--quick] [--json PATH]

(default PATH: benchmarks/results/core-<machine kind>.json)

Prints a table of time ratios (simulated kernel / torch fp32) and writes a JSON record.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from _record import best_of_pair, default_json, probe_env, write_record  # noqa: E402  (benchmarks/_record.py)


def cases(quick: bool):
    import torch
    from nki.kernels.attention import flash_attention_fwd
    from nki.kernels.matmul import matmul_lhsT
    from nki.kernels.norms import layernorm, rmsnorm
    from nki.kernels.softmax import softmax_rows

    rng = np.random.default_rng(0)
    n = 1024 if quick else 2048
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    aT = np.ascontiguousarray(a.T)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    yield (f"matmul {n}^3 fp32", lambda: matmul_lhsT(aT, b), lambda: ta @ tb, 2 * n ** 3)

    x = rng.standard_normal((4096, 1024)).astype(np.float32)
    g = rng.standard_normal(1024).astype(np.float32)
    bb = rng.standard_normal(1024).astype(np.float32)
    tx, tg, tbb = (torch.from_numpy(t) for t in (x, g, bb))
    yield ("softmax 4096x1024 fp32", lambda: softmax_rows(x),
           lambda: torch.softmax(tx, -1), None)
    yield ("layernorm 4096x1024 fp32", lambda: layernorm(x, g, bb),
           lambda: torch.nn.functional.layer_norm(tx, (1024,), tg, tbb), None)
    yield ("rmsnorm 4096x1024 fp32", lambda: rmsnorm(x, g),
           lambda: torch.nn.functional.rms_norm(tx, (1024,), tg, 1e-6), None)

    heads, seq, d = 4, 1024, 64
    q, k, v = (rng.standard_normal((heads, seq, d)).astype(np.float32) for _ in range(3))
    tq, tk, tv = (torch.from_numpy(t) for t in (q, k, v))

    def nki_attn():
        for h in range(heads):
            flash_attention_fwd(q[h], k[h], v[h], causal=True)

    yield (f"causal attention {heads}x{seq}x{d} fp32", nki_attn,
           lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv,
                                                                    is_causal=True), None)


COMPILE_PROBE = textwrap.dedent("""
    import time, numpy as np
    t0 = time.perf_counter()
    import nki
    from nki.kernels.softmax import softmax_rows
    x = np.random.rand(1024, 512).astype(np.float32)
    t1 = time.perf_counter()
    softmax_rows(x)
    t2 = time.perf_counter()
    print(f"{t1 - t0:.3f} {t2 - t1:.3f} {t2 - t0:.3f}")
""")


def compile_times() -> dict:
    """First call of a kernel in a new process: with the program cache disabled (trace +
    codegen + Numba compile of the program; helpers already compiled), then warm."""
    out = {}
    for label, env in (("new_kernel", {"NKI_CACHE": "0"}), ("warm_cache", {})):
        if label == "warm_cache":   # make sure the entry exists
            subprocess.run([sys.executable, "-c", COMPILE_PROBE], capture_output=True,
                           env=probe_env())
        r = subprocess.run([sys.executable, "-c", COMPILE_PROBE], capture_output=True,
                           text=True, env=probe_env(**env))
        imp, first, total = (float(t) for t in r.stdout.split())
        out[label] = {"import_s": imp, "first_call_s": first, "total_s": total}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller matmul")
    ap.add_argument("--json", default=default_json("core"))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    rows = []
    print(f"{'case':40s} {'nki ms':>10s} {'torch ms':>10s} {'ratio':>7s}")
    for name, nki_fn, torch_fn, flops in cases(args.quick):
        t_nki, t_torch = best_of_pair(nki_fn, torch_fn, 5)
        row = {"case": name, "nki_ms": t_nki * 1e3, "torch_ms": t_torch * 1e3,
               "ratio": t_nki / t_torch}
        if flops:
            row["nki_gflops"] = flops / t_nki / 1e9
        rows.append(row)
        print(f"{name:40s} {t_nki * 1e3:10.2f} {t_torch * 1e3:10.2f} {t_nki / t_torch:7.2f}")
    comp = compile_times()
    for label, c in comp.items():
        print(f"compile {label:12s} import {c['import_s']:.2f}s first call "
              f"{c['first_call_s']:.2f}s total {c['total_s']:.2f}s")
    write_record(args.json, threads=1, rows=rows, compile=comp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
