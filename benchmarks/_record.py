"""What every benchmark script shares: best-of timing and the JSON record they write.

The scripts run as ``python benchmarks/bench_x.py``, so this sibling module is importable.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable

# Benchmarks time compiled helpers only: never the compile-free tier nki runs while they build
# (nki/sim/tier.py); a background build another process started is waited for first.
os.environ.setdefault("NKI_TIER", "compiled")


_WAITED = False


def wait_compiled() -> None:
    """Wait (once per process) for a background helper build, echoing its progress: the
    timers below call it before their first timing."""
    global _WAITED
    if not _WAITED:
        from nki.warmup import wait

        wait()
        _WAITED = True


def best_of(fn: Callable[[], object], repeat: int = 5, warm: bool = True) -> float:
    """Best wall time of ``repeat`` calls of ``fn``, after one untimed call when ``warm``
    (compiling or loading from the program cache is not what is measured)."""
    wait_compiled()
    if warm:
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def best_of_pair(fn_a: Callable[[], object], fn_b: Callable[[], object], repeat: int = 5,
                 warm: bool = True,
                 clock: Callable[[], float] = time.perf_counter) -> tuple[float, float]:
    """Best times of ``fn_a`` and ``fn_b`` (wall time, or ``clock``, e.g. ``time.thread_time``
    for the CPU time of this thread), called alternately ``repeat`` times each.

    On a shared machine the speed drifts over seconds (neighbours, turbo): timing one
    function's runs and then the other's lets the drift land in the ratio. Alternating
    gives both the same windows."""
    wait_compiled()
    if warm:
        fn_a()
        fn_b()
    best_a = best_b = float("inf")
    for _ in range(repeat):
        t0 = clock()
        fn_a()
        t1 = clock()
        fn_b()
        t2 = clock()
        best_a, best_b = min(best_a, t1 - t0), min(best_b, t2 - t1)
    return best_a, best_b


def probe_env(**overrides: str) -> dict:
    """The environment for a new-process probe (compile and warm-start times), as a user's
    would be: Python writes and reuses bytecode (some sandboxes set PYTHONDONTWRITEBYTECODE,
    and then every nki module is compiled from source at each import, ~0.2 s more)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(overrides)
    return env


def _cpuinfo(field: str) -> str | None:
    """The first ``field : value`` of /proc/cpuinfo (None where it does not exist)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    """The CPU's model name (the ratios differ a lot between CPUs: AVX-512, AMX, memory)."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


# the vector and matrix features the simulator's speed depends on
FEATURES = ("avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "avx2", "fma")


def cpu_features() -> list[str]:
    """Which of ``FEATURES`` the CPU lists (empty where /proc/cpuinfo does not exist)."""
    flags = (_cpuinfo("flags") or "").split()
    return [name for name in FEATURES if name in flags]


def machine_kind(features: list[str]) -> str:
    """The project's name for this machine kind (README has one table per kind)."""
    if "amx_bf16" in features:
        return "xeon-amx"
    if "avx512_bf16" in features:
        return "zen5"
    if "avx2" in features and "avx512f" not in features:
        return "avx2"   # an AMD EPYC with AVX2 only (seen 2026-12-03): no bf16 unit at all
    return "other"


def default_json(name: str) -> str:
    """Where a benchmark's record goes by default: ``results/<name>-<machine kind>.json``,
    so each machine kind keeps its own (README has one table per kind)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                        f"{name}-{machine_kind(cpu_features())}.json")


def write_record(path: str, **fields) -> None:
    """Write ``fields`` with the machine facts every record carries to ``path`` (JSON)."""
    features = cpu_features()
    record = {"machine": platform.processor() or platform.machine(), "cpu": cpu_model(),
              "cpu_features": features, "machine_kind": machine_kind(features),
              "python": sys.version.split()[0], "cpus": os.cpu_count(),
              "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
              "time": time.strftime("%Y-%m-%d %H:%M:%S"), **fields}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {path}")
