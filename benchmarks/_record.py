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


def best_of(fn: Callable[[], object], repeat: int = 5, warm: bool = True) -> float:
    """Best wall time of ``repeat`` calls of ``fn``, after one untimed call when ``warm``
    (compiling or loading from the program cache is not what is measured)."""
    if warm:
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def best_of_pair(fn_a: Callable[[], object], fn_b: Callable[[], object], repeat: int = 5,
                 warm: bool = True) -> tuple[float, float]:
    """Best wall times of ``fn_a`` and ``fn_b``, called alternately ``repeat`` times each.

    On a shared machine the speed drifts over seconds (neighbours, turbo): timing one
    function's runs and then the other's lets the drift land in the ratio. Alternating
    gives both the same windows."""
    if warm:
        fn_a()
        fn_b()
    best_a = best_b = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn_a()
        t1 = time.perf_counter()
        fn_b()
        t2 = time.perf_counter()
        best_a, best_b = min(best_a, t1 - t0), min(best_b, t2 - t1)
    return best_a, best_b


def probe_env(**overrides: str) -> dict:
    """The environment for a new-process probe (compile and warm-start times), as a user's
    would be: Python writes and reuses bytecode (some sandboxes set PYTHONDONTWRITEBYTECODE,
    and then every nki module is compiled from source at each import, ~0.2 s more)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(overrides)
    return env


def cpu_model() -> str:
    """The CPU's model name (the ratios differ a lot between CPUs: AVX-512, AMX, memory)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def write_record(path: str, **fields) -> None:
    """Write ``fields`` with the machine facts every record carries to ``path`` (JSON)."""
    record = {"machine": platform.processor() or platform.machine(), "cpu": cpu_model(),
              "python": sys.version.split()[0], "cpus": os.cpu_count(),
              "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
              "time": time.strftime("%Y-%m-%d %H:%M:%S"), **fields}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {path}")
