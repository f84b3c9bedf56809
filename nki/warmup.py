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


def _order(first: str) -> list[int]:
    """Every helper id, the ones named in ``first`` (comma-separated) before the others."""
    from nki.sim.helpers.registry import helper_count, helper_id_by_name

    ids = [helper_id_by_name(n) for n in first.split(",") if n]
    return ids + [h for h in range(helper_count()) if h not in ids]


def _hold_lock():
    """The builder's lock (``nki.sim.tier``), held until this process exits."""
    import fcntl

    from nki.sim.tier import _lock_path

    fd = os.open(_lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)      # blocks while another builder runs
    return fd


def wait() -> None:
    """Wait for a background build (another process's too), echoing its progress lines."""
    from nki.sim.tier import builder_running, log_path

    if not builder_running():
        return
    print("nki.warmup: waiting for the background build", file=sys.stderr, flush=True)
    with open(log_path()) as log:
        log.seek(0, os.SEEK_END)
        while builder_running():
            line = log.readline()
            if line:
                print(line.rstrip(), file=sys.stderr, flush=True)
            else:
                time.sleep(0.2)
        sys.stderr.write(log.read())


def main(argv: list[str] | None = None) -> int:
    """Build every helper (``--first a,b``: those first; ``--background``: as the tier's
    builder, holding its lock; otherwise a running background build is waited for)."""
    import argparse

    from nki.sim.emit import load_all
    from nki.sim.helpers.registry import helper_name

    parser = argparse.ArgumentParser(prog="python -m nki.warmup")
    parser.add_argument("--background", action="store_true")
    parser.add_argument("--first", default="")
    args = parser.parse_args(argv)
    load_all()
    if not args.background:
        wait()
    lock = _hold_lock()  # noqa: F841 (held for the process's life)
    t0 = time.perf_counter()
    order = _order(args.first)
    total = len(order)
    workers = max(1, min(os.cpu_count() or 1, 4))
    built = 0
    with ProcessPoolExecutor(workers) as pool:
        for done, (hid, secs) in enumerate(pool.map(_compile_one, order), 1):
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
