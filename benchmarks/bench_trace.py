"""How long an estimate takes end to end: issue 15's speed cases, cold cache, trace included.

    python benchmarks/bench_trace.py [--samples FILE] [--only NAME] [--json PATH]

(default PATH: benchmarks/results/trace-<machine kind>.json)

Cases: the four matmul kernels of the nki-samples tutorial (tiled, hoist_load,
block_free_dimension, fully_optimized) at lhsT [8192, 4096] x rhs [8192, 8192] bf16 given as
``nt.tensor[...]`` placeholders, and ``nki.kernels.flash_attention`` at 1 x 8 heads x 4096 x
d128 causal bf16, each ``nki.estimate(kernel, target="trn2")``. The tutorial's file is AWS's
and is never part of this repository: pass its path with ``--samples`` (or
``NKI_SAMPLES_MATMUL``); without it only flash attention runs. The tutorial's
``nki_matmul_hoist_load_`` passes ``dtype=`` to ``nisa.tensor_copy`` with an fp32 ``res_sb``,
which NKI 0.2 made an error (``nki_removed_in_release``); the script gives ``res_sb`` the
output's dtype, as the tutorial's text intends, and records that it did.

Each case runs in a new process with an empty ``NKI_CACHE_DIR`` (nothing traced, compiled
or cached before), after ``import nki`` (timed apart), in the default tier (``NKI_TIER=auto``)
and twice: first with an empty ``NUMBA_CACHE_DIR`` as well (a user's first estimate after
installing: the cost model's scheduling loop is not compiled yet, so the estimate schedules
in Python while it compiles in the background, nki/cost/loop_tier.py; columns ``first_*``),
then with that loop's machine code on disk (the other columns). Columns: the estimate's wall
time and this process's CPU time for it (the machine may be shared: CPU time is what the code
costs), the trace alone (a second, uncached trace of core 0) per traced instruction, and the
compiled model loop per executed instruction (what ``bench_cost.model_stage`` times, warm),
both in CPU time (the record has wall times too). ``--baseline DIR`` runs every case with
another checkout's nki as well, alternating, and records the CPU-time ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

MATMULS = ("nki_matmul_tiled_", "nki_matmul_hoist_load_", "nki_matmul_block_free_dimension_",
           "nki_matmul_fully_optimized_")
FLASH = "flash_attention 1x8x4096x128 causal bf16"
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HOIST_FIX = ("res_sb = nl.ndarray(shape=(TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)",
              "res_sb = nl.ndarray(shape=(TILE_M, TILE_N), dtype=result.dtype, buffer=nl.sbuf)")


def _load_samples(path: str):
    """The tutorial module, with the one fix the module docstring describes."""
    import types

    source = open(path).read()
    fixed = source.replace(*_HOIST_FIX)
    module = types.ModuleType("nki_samples_matmul")
    module.__file__ = path
    sys.modules[module.__name__] = module
    exec(compile(fixed, path, "exec"), module.__dict__)
    return module, fixed != source


def _case(name: str, samples: str):
    """(kernel, args, kwargs, note) of one case."""
    import nki.language as nl
    import nki.typing as nt

    if name == FLASH:
        from nki.kernels import flash_attention

        q = nt.tensor[[1, 8, 4096, 128], nl.bfloat16]
        return flash_attention, (q, q, q), {"causal": True}, ""
    module, fixed = _load_samples(samples)
    a, b = nt.tensor[[8192, 4096], nl.bfloat16], nt.tensor[[8192, 8192], nl.bfloat16]
    note = "res_sb given the output dtype" if fixed and name == "nki_matmul_hoist_load_" else ""
    return getattr(module, name), (a, b), {}, note


def _trace_only(kernel, args, kwargs) -> tuple[float, float, int]:
    """Wall and CPU seconds to trace core 0 once more (no cache, no passes), and its
    instruction count."""
    from nki.ir.nodes import count_instrs
    from nki.ir.target import get_target
    from nki.jit.specialize import Launch, trace_core

    k = kernel
    args, kwargs = k._positional(args, kwargs)
    settings = k.settings()
    t0, c0 = time.perf_counter(), time.process_time()
    program, *_ = trace_core(k.fn, args, kwargs, k._tensor_args(args),
                             get_target(settings.target), 0, Launch(), settings)
    return time.perf_counter() - t0, time.process_time() - c0, count_instrs(program.body)


def _model_loop(spec, target: str) -> tuple[float, float, int]:
    """Best of 3 wall and CPU seconds of the compiled model loop over every core (what
    ``bench_cost.model_stage`` times), and the executed instructions."""
    from nki.cost import fast
    from nki.cost.facts import cost_facts
    from nki.cost.prep import prepare

    facts = cost_facts(target)
    preps = [prepare(c.program, facts) for c in spec.cores]
    tables = [(fast.flatten(p, facts), fast.count_executions(p), p) for p in preps]
    executed = sum(fast.loop_arrays(t, n, p, facts)[0] for t, n, p in tables)   # warm
    wall = cpu = float("inf")
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        for t, n, p in tables:
            fast.loop_arrays(t, n, p, facts)
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return wall, cpu, executed


def child(name: str, samples: str) -> dict:
    """One case in this (new) process: what the module docstring lists."""
    t0 = time.perf_counter()
    import nki
    from nki.cost.estimate import _for_target
    import_s = time.perf_counter() - t0
    kernel, args, kwargs, note = _case(name, samples)
    w0, c0 = time.perf_counter(), time.process_time()
    est = nki.estimate(kernel, target="trn2")(*args, **kwargs)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    try:    # a background compile of the model's loop (not timed) ends before the rest
        from nki.cost import loop_tier
        loop_tier.wait()
    except ImportError:     # a --baseline checkout from before it
        pass
    k, _, _ = _for_target(kernel, "trn2")
    trace_s, trace_cpu, traced = _trace_only(k, args, kwargs)
    # a baseline checkout (--baseline) may predate specialize_for_model
    spec = getattr(k, "specialize_for_model", k.specialize)(*args, **kwargs)
    loop_s, loop_cpu, executed = _model_loop(spec, "trn2")
    return {"case": name, "note": note, "nki": os.path.dirname(nki.__file__),
            "import_s": import_s, "estimate_wall_s": wall, "estimate_cpu_s": cpu,
            "latency_us": est.latency_us, "traced_instructions": traced,
            "trace_us_per_instr": trace_s / traced * 1e6,
            "trace_cpu_us_per_instr": trace_cpu / traced * 1e6,
            "executed_instructions": executed,
            "model_us_per_executed_instr": loop_s / executed * 1e6,
            "model_cpu_us_per_executed_instr": loop_cpu / executed * 1e6}


def _run(name: str, samples: str, probe_env, nki_root: str, numba_cache: str) -> dict:
    """One case in a new process with an empty cache folder and Numba's cache in
    ``numba_cache`` (``nki_root``: the checkout whose nki it imports, else this script's own
    checkout: the child's first path entry is benchmarks/, so without it the child would
    import whichever nki is installed)."""
    extra = {"PYTHONPATH": nki_root or _CHECKOUT, "NUMBA_CACHE_DIR": numba_cache,
             "NKI_TIER": "auto"}
    with tempfile.TemporaryDirectory() as cache:
        done = subprocess.run([sys.executable, __file__, "--child", name, "--samples",
                               samples], capture_output=True, text=True,
                              env=probe_env(NKI_CACHE_DIR=cache, **extra), timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{name}: failed\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _first_then_cached(name: str, samples: str, probe_env, nki_root: str) -> dict:
    """The case with an empty Numba cache (its ``first_*`` fields), then again with the
    machine code the first run left there."""
    with tempfile.TemporaryDirectory() as numba_cache:
        first = _run(name, samples, probe_env, nki_root, numba_cache)
        row = _run(name, samples, probe_env, nki_root, numba_cache)
    row.update({f"first_{k}": first[k] for k in ("estimate_wall_s", "estimate_cpu_s")})
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", default=os.environ.get("NKI_SAMPLES_MATMUL", ""),
                    help="path of nki-samples' matrix_multiplication_nki_kernels.py")
    ap.add_argument("--only", default="")
    ap.add_argument("--baseline", default="", help="another checkout of nki (e.g. main's "
                    "worktree): each case also runs with it first on PYTHONPATH, and the "
                    "record has both and their ratios")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--json", default="", help="default: results/trace-<machine kind>.json")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.samples)))
        return 0
    from _record import default_json, probe_env, write_record  # noqa: E402  (_record.py)

    args.json = args.json or default_json("trace")

    names = (list(MATMULS) if args.samples else []) + [FLASH]
    rows = []
    print(f"{'case':42s} {'wall s':>7s} {'cpu s':>7s} {'trace us/instr':>14s} "
          f"{'model us/instr':>14s} {'first cpu s':>9s}  (per instruction: CPU time; first: "
          f"the model's loop not compiled yet)")
    for name in names:
        if args.only and args.only not in name:
            continue
        row = _first_then_cached(name, args.samples, probe_env, "")
        if args.baseline:
            row["baseline"] = base = _first_then_cached(name, args.samples, probe_env,
                                                        args.baseline)
            row["cpu_ratio_baseline_over_this"] = base["estimate_cpu_s"] / row["estimate_cpu_s"]
            print(f"{'  baseline':42s} {base['estimate_wall_s']:7.2f} "
                  f"{base['estimate_cpu_s']:7.2f} {base['trace_cpu_us_per_instr']:14.1f}")
        rows.append(row)
        print(f"{name:42s} {row['estimate_wall_s']:7.2f} {row['estimate_cpu_s']:7.2f} "
              f"{row['trace_cpu_us_per_instr']:14.1f} "
              f"{row['model_cpu_us_per_executed_instr']:14.2f} {row['first_estimate_cpu_s']:9.2f}",
              flush=True)
    write_record(args.json, rows=rows,
                 note="end to end, each case in a new process with an empty NKI_CACHE_DIR, "
                      "NKI_TIER=auto; first_*: NUMBA_CACHE_DIR empty too")
    return 0


if __name__ == "__main__":
    sys.exit(main())
