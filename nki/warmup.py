"""``python -m nki.warmup``: compile every simulator helper once into Numba's disk cache.

A fresh install pays this once (minutes); afterwards each helper loads in milliseconds.
Runs helpers in parallel worker processes, since each compiles independently.
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor


def _compile_one(hid: int) -> tuple[int, float]:
    from nki.sim.emit import load_all
    from nki.sim.helpers.registry import addresses

    load_all()
    t0 = time.perf_counter()
    addresses({hid})
    return hid, time.perf_counter() - t0


def main() -> int:
    from nki.sim.emit import load_all
    from nki.sim.helpers.registry import helper_count, helper_name

    load_all()
    t0 = time.perf_counter()
    workers = max(1, min(os.cpu_count() or 1, 4))
    slow = []
    with ProcessPoolExecutor(workers) as pool:
        for hid, secs in pool.map(_compile_one, range(helper_count())):
            if secs > 1.0:
                slow.append(f"{helper_name(hid)} {secs:.1f}s")
    total = time.perf_counter() - t0
    print(f"nki.warmup: {helper_count()} helpers ready in {total:.1f}s"
          + (f" (compiled: {', '.join(slow)})" if slow else " (all cached)"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
