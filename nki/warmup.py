"""``python -m nki.warmup``: build every simulator helper's optimised code once, kept on disk.

A fresh install pays this once (a few minutes on 2 cores; one progress line per helper built,
with the time left); afterwards each helper loads in milliseconds. Without it, a kernel's first
call builds the helpers it uses (5-13 s each). It also compiles the cost model's scheduling
loop (nki/cost/loop_tier.py, 7-17 s once); ``--cost-loop`` compiles only that (what an
estimate starts in the background).
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
    from nki._filelock import take
    from nki.sim.tier import _lock_path

    return take(_lock_path(), wait=True)    # blocks while another builder runs


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


def compile_cost_loop() -> float:
    """Compile (or load) the cost model's scheduling loop by estimating a one-tile copy with
    it; returns the seconds it took. Its machine code lands in Numba's on-disk cache."""
    import nki
    import nki.language as nl
    import nki.typing as nt

    @nki.jit
    def tile_copy(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out

    t0 = time.perf_counter()
    nki.estimate(tile_copy, target="trn2", backend="numba")(nt.tensor[[128, 64], nl.float32])
    return time.perf_counter() - t0


def _cost_loop_step() -> None:
    """The full warmup's last step: the cost model's loop, after a background compile that
    an estimate started (which holds the loop's lock) has finished."""
    from nki.cost import loop_tier

    loop_tier.wait()
    secs = compile_cost_loop()
    state = "compiled" if secs > 1.0 else "cached"
    print(f"nki.warmup: cost model loop {state} in {secs:.1f}s", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Build every helper (``--first a,b``: those first; ``--background``: as the tier's
    builder, holding its lock; otherwise a running background build is waited for)."""
    import argparse

    from nki.sim.emit import load_all
    from nki.sim.helpers.registry import helper_name

    parser = argparse.ArgumentParser(prog="python -m nki.warmup")
    parser.add_argument("--background", action="store_true")
    parser.add_argument("--first", default="")
    parser.add_argument("--cost-loop", action="store_true",
                        help="compile only the cost model's scheduling loop")
    args = parser.parse_args(argv)
    if args.cost_loop:     # an estimate's background child: the lock came with it
        compile_cost_loop()
        return 0
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
    if not args.background:
        _cost_loop_step()
    return 0


if __name__ == "__main__":
    sys.exit(main())
