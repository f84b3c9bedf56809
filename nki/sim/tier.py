"""Which tier runs a kernel call: compiled helpers, or plain Python while they compile.

``NKI_TIER`` (``nki.config.tier``): ``compiled`` always uses compiled helpers (a cold call
waits for Numba); ``python`` always runs the compile-free tier (``nki.sim.helpers.pure``);
``auto`` (the default) uses the compiled helpers once every helper a program needs has its
machine code on disk, and until then runs the compile-free tier while one background
process (``python -m nki.warmup --background``) builds them. The choice is made once per
kernel call, before any core runs; when the helpers a plain-Python run needs get their
machine code while it runs, the run stops and the call runs again compiled from the start
(:class:`TierSwitch`), so no run mixes tiers and a large kernel never waits out a slow
interpreted run.

The builder is a child in a session of its own with its output in a log file: it never
receives the terminal's Ctrl-C, nothing waits for it at exit, and when the caller exits
first it finishes the machine code for the next process. A lock file keeps it to one builder
per cache folder. :func:`wait_compiled` (benchmarks, ``nki.warmup``) waits for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

from nki._filelock import held_elsewhere

_BUILDER: subprocess.Popen | None = None
_READY: set[int] = set()          # helper ids whose machine code is known to be on disk
_ANNOUNCED = False


def _lock_path() -> str:
    from nki.sim.modules import source_dir

    return os.path.join(source_dir(), "warmup.lock")


def log_path() -> str:
    """Where the background builder writes its progress lines."""
    from nki.sim.modules import source_dir

    return os.path.join(source_dir(), "warmup.log")


def helpers_ready(used: set[int]) -> bool:
    """Whether every helper in ``used`` has machine code on disk or in this process."""
    from nki.sim.helpers.registry import entry_ready

    missing = [h for h in used if h not in _READY and not entry_ready(h)]
    _READY.update(h for h in used if h not in missing)
    return not missing


def builder_running() -> bool:
    """Whether some process (this one's child or another's) holds the builder's lock."""
    return held_elsewhere(_lock_path())


def start_builder(first: set[int]) -> None:
    """Start the background build (the helpers in ``first`` before the others), unless one
    is already running."""
    global _BUILDER, _ANNOUNCED
    if (_BUILDER is not None and _BUILDER.poll() is None) or builder_running():
        return
    from nki.sim.helpers.registry import helper_name

    names = ",".join(helper_name(h) for h in sorted(first))
    with open(log_path(), "ab") as log:
        _BUILDER = subprocess.Popen(
            [sys.executable, "-m", "nki.warmup", "--background", "--first", names],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            env={**os.environ, "NKI_TIER": "compiled"})
    if not _ANNOUNCED:
        _ANNOUNCED = True
        print(f"nki: helpers compile in the background (pid {_BUILDER.pid}, progress in "
              f"{log_path()}); kernels run as plain Python meanwhile", file=sys.stderr)


def choose(used: set[int]) -> str:
    """The backend this call's cores run: ``numba`` (compiled) or ``pure`` (no compile)."""
    from nki.config import tier

    mode = tier()
    if mode == "compiled":
        return "numba"
    if mode == "python":
        return "pure"
    if helpers_ready(used):
        return "numba"
    start_builder(used)
    return "pure"


def _used(programs: list) -> set[int]:
    from nki.sim.emit.collectives import host_helper_ids

    used: set[int] = set()
    for g in programs:
        used |= g.bind_helpers()
    return used - host_helper_ids()


def tier_of_call(programs: list) -> str:
    """:func:`choose` for one call's programs (one per core): every core runs one tier."""
    return choose(_used(programs))


class TierSwitch(Exception):  # noqa: N818 (a signal to rerun, not an error)
    """A plain-Python run was stopped because the compiled helpers it needs became ready:
    the call runs again on them (the same bits: the tiers are tested equal)."""


def switch_check(programs: list) -> Callable[[], bool] | None:
    """For a call running as plain Python: whether every helper it needs now has machine
    code on disk. A long run polls it and stops, to run again compiled: interpreted, the
    per-element transcendentals take microseconds an element (a [128, 4096] GELU ~5 s), so
    a large kernel would otherwise run far longer than the compile it avoided. None under
    ``NKI_TIER=python``, which always runs the compile-free tier (nothing is polled)."""
    from nki.config import tier

    if tier() == "python":
        return None
    used = _used(programs)
    return lambda: helpers_ready(used)


def wait_compiled(timeout: float | None = None) -> bool:
    """Wait until no background build runs (True), or ``timeout`` seconds passed (False)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while (_BUILDER is not None and _BUILDER.poll() is None) or builder_running():
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
