"""Whether an estimate schedules with the compiled loop (nki/cost/_fastloop.py) or in Python.

The compiled loop is well under 1 µs an instruction once its machine code is loaded; loading
it from Numba's on-disk cache costs 0.2-0.55 s, but compiling it the first time after an
install costs 7-8 s (Zen 5) to ~17 s (a slower AVX2 EPYC), more than the Python loop needs
for most kernels (11-40 µs an instruction: 3.7 s for the 99,328 instructions of the
nki-samples tiled matmul tutorial at [8192,4096]x[8192,8192]). So, with ``NKI_TIER=auto``
(the default, ``nki.config.tier``), an estimate takes the compiled loop when its machine
code is loaded or on disk; otherwise it schedules in Python and starts one background
process (``python -m nki.warmup --cost-loop``) that compiles the loop for the next
estimate. Only a program so long that the Python loop would cost more than the compile
(:data:`COLD_COMPILE_MIN` instructions) waits for the compile. ``NKI_TIER=compiled``
always takes the compiled loop (benchmarks); ``python`` never starts the background one.

The background process runs in a session of its own with its output in a log file (Ctrl-C
in the terminal never reaches it, nothing waits for it at exit) and holds a lock file in
the cache folder, so one compiles at a time. Both loops give the same timeline to the ns
(tests/cost), so which one ran is not part of any result.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from nki._filelock import held_elsewhere, take

#: From how many executed instructions the compiled loop is worth its load (0.2-0.55 s)
#: at all: flash attention S=4096 (20,114 instructions) scheduled in 0.22 s in Python and
#: 0.3-0.55 s compiled-from-disk on a Zen 5, 0.80 s vs 0.20 s on a loaded AVX2 EPYC.
FAST_THRESHOLD = 20_000
#: From how many instructions a process without the loop's machine code compiles it now
#: rather than scheduling in Python: 200,000 instructions are 2-8 s in Python (11-40 µs
#: each), about what the compile costs.
COLD_COMPILE_MIN = 200_000

_STARTED = False


def loaded() -> bool:
    """Whether this process already has the compiled loop's machine code."""
    loop = sys.modules.get("nki.cost._fastloop")
    return loop is not None and bool(loop.schedule_loop.overloads)


def on_disk() -> bool:
    """Whether Numba's cache holds the loop's machine code for this CPU and this source.

    Reads the cache index the way Numba's own loader does (a stale index, from other
    source, reads as empty); Numba's cache classes are not public API, so any surprise
    there answers "no" (the cost is a Python-loop estimate, never a wrong one)."""
    try:
        from numba.core.registry import cpu_target

        from nki.cost import _fastloop
        index = _fastloop.schedule_loop._cache._cache_file._load_index()
        magic = cpu_target.target_context.codegen().magic_tuple()
        return any(key[1] == magic for key in index)
    except Exception:   # noqa: BLE001 (private API: any failure means "not known")
        return False


def use_compiled(executed: int) -> bool:
    """Whether ``backend="auto"`` schedules ``executed`` instructions with the compiled
    loop; may start the background compile (see the module docstring)."""
    from nki.config import tier

    if executed < FAST_THRESHOLD:
        return False
    mode = tier()
    if mode == "compiled" or loaded() or on_disk():
        return True
    if mode == "auto":
        start_compile()
    return executed >= COLD_COMPILE_MIN


def _paths() -> tuple[str, str]:
    """(lock file, log file) of the background compile, in nki's cache folder."""
    from nki.config import from_environment

    folder = from_environment().cache_dir
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, "cost-loop.lock"), os.path.join(folder, "cost-loop.log")


def compiling() -> bool:
    """Whether some process holds the background compile's lock."""
    return held_elsewhere(_paths()[0])


def start_compile() -> None:
    """Start ``python -m nki.warmup --cost-loop`` in the background, once per process and
    unless one already runs; a machine that cannot start it just keeps the Python loop.

    This process takes the lock and the child inherits the locked descriptor (an flock
    belongs to the open file, not the process), so there is no moment in which a second
    estimate could start a second compile; the lock ends when the child exits."""
    global _STARTED
    if _STARTED:
        return
    _STARTED = True
    lock, log_path = _paths()
    fd = take(lock)
    if fd is None:      # another process compiles it already
        return
    try:
        with open(log_path, "ab") as log:
            subprocess.Popen([sys.executable, "-m", "nki.warmup", "--cost-loop"],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(fd,),
                             start_new_session=True, env={**os.environ, "NKI_TIER": "compiled"})
    except OSError:
        return
    finally:
        os.close(fd)
    print(f"nki.estimate: the compiled scheduling loop compiles in the background (log "
          f"{log_path}); estimates schedule in Python meanwhile", file=sys.stderr)


def wait(timeout: float | None = None) -> bool:
    """Wait until no background compile runs (True) or ``timeout`` seconds passed (False)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while compiling():
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
