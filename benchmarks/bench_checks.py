"""Cost of the machine's checks: trace+passes time and run time with checks on vs off.

    python benchmarks/bench_checks.py [--quick] [--json PATH]

(default PATH: benchmarks/results/checks-<machine kind>.json)

Kernels: the core matmul (``matmul_lhsT`` at 1024^3 fp32) and flash attention
(``flash_attention_fwd``, 1024 x 64, causal, fp32). Settings: off (defaults), uninitialised-
read checking (``check_uninit=True``), race checking (``check_races=True``; the LNC check is
always on and costs nothing without ``kernel[2]``). Every check runs at trace time, so the
run-time column should stay at 1.0; the specialize column (trace, placement, races, reroll,
codegen; no Numba compile) shows what they cost. A kernel a check rejects is reported with
the error code and the time it took to find it.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from _record import best_of, default_json, write_record  # noqa: E402  (benchmarks/_record.py)

SETTINGS = {"off": {}, "uninit": {"check_uninit": True}, "races": {"check_races": True},
            "all": {"check_uninit": True, "check_races": True}}


def kernels(quick: bool):
    from nki.kernels.attention import flash_attention_fwd
    from nki.kernels.matmul import matmul_lhsT

    rng = np.random.default_rng(0)
    n = 512 if quick else 1024
    aT = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    yield f"matmul_lhsT {n}^3 fp32", matmul_lhsT.fn, (aT, b), {}
    s = 512 if quick else 1024
    q, k, v = (rng.standard_normal((s, 64)).astype(np.float32) for _ in range(3))
    yield f"flash_attention_fwd {s}x64 causal fp32", flash_attention_fwd.fn, (q, k, v), \
        {"causal": True}


def measure(fn, args, kwargs, options: dict, repeat: int) -> dict:
    """Specialize (cold, no disk cache) and run (warm) one kernel under ``options``."""
    import nki
    from nki.errors import NkiError

    def specialize():
        return nki.jit(fn, cache=False, **options).specialize(*args, **kwargs)

    try:
        t_spec = best_of(specialize, repeat, warm=False)
    except NkiError as e:
        t0 = time.perf_counter()
        try:
            specialize()
        except NkiError:
            pass
        return {"rejected": e.code, "detail": e.detail.split(". ")[0],
                "specialize_s": time.perf_counter() - t0}
    kernel = nki.jit(fn, **options)
    kernel(*args, **kwargs)          # compile (or load) once
    t_run = best_of(lambda: kernel(*args, **kwargs), repeat, warm=False)
    return {"specialize_s": t_spec, "run_s": t_run}


def race_scan(fn, args, kwargs, repeat: int) -> tuple[float, int, int]:
    """Seconds to scan every affine_range loop of the traced program for races (finding and
    skipping what races, so a rejected kernel is measured too); loops and races found."""
    import nki
    from nki.errors import NkiError
    from nki.ir.nodes import RecordedLoop, walk
    from nki.ir.ops import LoopKind
    from nki.ir.target import get_target
    from nki.jit.allocate import allocate
    from nki.jit.lower import lower
    from nki.jit.races import check_affine_loop
    from nki.jit.specialize import trace_core

    kernel = nki.jit(fn, cache=False)
    settings = kernel.settings()
    target = get_target(settings.target)
    program = trace_core(fn, args, kwargs, kernel._tensor_args(args), target, 0, 1, settings)[0]
    program = lower(allocate(program, target), target)
    loops = [s for s, _ in walk(program.body) if isinstance(s, RecordedLoop)
             and s.kind is LoopKind.AFFINE and len(s.iterations) > 1]
    found = [0]

    def scan():
        found[0] = 0
        cache: dict = {}
        for loop in loops:
            try:
                check_affine_loop(loop, program, target, cache)
            except NkiError:
                found[0] += 1

    return best_of(scan, repeat, warm=False), len(loops), found[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=default_json("checks"))
    args = ap.parse_args()
    record = {"results": []}
    print(f"{'kernel':42s} {'checks':7s} {'specialize':>11s} {'ratio':>6s} {'run':>9s} "
          f"{'ratio':>6s}")
    for name, fn, inputs, kwargs in kernels(args.quick):
        measure(fn, inputs, kwargs, {}, 1)   # warm-up: imports, helper loading, compile
        base = None
        for label, options in SETTINGS.items():
            r = measure(fn, inputs, kwargs, options, args.repeat)
            r.update(kernel=name, checks=label)
            record["results"].append(r)
            if "rejected" in r:
                print(f"{name:42s} {label:7s} {r['specialize_s']:10.3f}s  rejected: "
                      f"[{r['rejected']}] {r['detail']}")
                continue
            base = base or r
            r["specialize_ratio"] = r["specialize_s"] / base["specialize_s"]
            r["run_ratio"] = r["run_s"] / base["run_s"]
            print(f"{name:42s} {label:7s} {r['specialize_s']:10.3f}s {r['specialize_ratio']:6.2f} "
                  f"{r['run_s'] * 1e3:7.1f}ms {r['run_ratio']:6.2f}", flush=True)
        t_scan, n_loops, n_races = race_scan(fn, inputs, kwargs, args.repeat)
        record["results"].append({"kernel": name, "checks": "race scan alone",
                                  "scan_s": t_scan, "affine_loops": n_loops,
                                  "racing_loops": n_races,
                                  "scan_over_specialize": t_scan / base["specialize_s"]})
        print(f"{name:42s} race scan of {n_loops} affine_range loops: {t_scan * 1e3:.1f} ms "
              f"= {t_scan / base['specialize_s']:.2f} x specialize(off); {n_races} loops race")
    write_record(args.json, **record)


if __name__ == "__main__":
    main()
