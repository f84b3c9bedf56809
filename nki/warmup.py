"""``python -m nki.warmup``: build every simulator helper's optimised code once, kept on disk.

A fresh install pays this once (a few minutes on 2 cores; one progress line per helper built,
with the time left); afterwards each helper loads in milliseconds. Without it, a kernel's first
call builds the helpers it uses (5-13 s each).
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


def _progress(done: int, total: int, name: str, secs: float, elapsed: float) -> str:
    """One progress line: count, the helper, and the time left at the pace so far."""
    left = elapsed / done * (total - done)
    return f"nki.warmup: [{done}/{total}] {name} {secs:.1f}s, about {left:.0f}s left"


def main() -> int:
    from nki.sim.emit import load_all
    from nki.sim.helpers.registry import helper_count, helper_name

    load_all()
    t0 = time.perf_counter()
    total = helper_count()
    workers = max(1, min(os.cpu_count() or 1, 4))
    built = 0
    with ProcessPoolExecutor(workers) as pool:
        for done, (hid, secs) in enumerate(pool.map(_compile_one, range(total)), 1):
            if secs > 1.0:                        # built now, not loaded: worth a line
                built += 1
                print(_progress(done, total, helper_name(hid), secs,
                                time.perf_counter() - t0), file=sys.stderr, flush=True)
    what = f"{built} built" if built else "all cached"
    print(f"nki.warmup: {total} helpers ready in {time.perf_counter() - t0:.1f}s ({what})",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
