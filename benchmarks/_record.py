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


def write_record(path: str, **fields) -> None:
    """Write ``fields`` with the machine facts every record carries to ``path`` (JSON)."""
    record = {"machine": platform.processor() or platform.machine(),
              "python": sys.version.split()[0], "cpus": os.cpu_count(),
              "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
              "time": time.strftime("%Y-%m-%d %H:%M:%S"), **fields}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {path}")
