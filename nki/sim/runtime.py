"""Running compiled programs: memories, helper addresses, LNC threads, faults.

HBM is one flat byte arena shared by the cores of a launch; each core has its own SBUF and
PSUM arenas of the target's real size (rows of ``bytes_per_partition``). Fresh on-chip memory
is filled with 0xFF bytes, a NaN in every float format, so reading never-written memory shows.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from nki.errors import NkiRuntimeError, fail
from nki.ir.target import Target
from nki.ir.types import Memory
from nki.sim import interrupt, uninit
from nki.sim.codegen import FAULT_LOOP_BUDGET, ROW_SLOT, STOP_SLOT, Generated
from nki.sim.emit import collectives as host
from nki.sim.emit import rng
from nki.sim.helpers.registry import NLOOPVARS, addresses, pure_impls, python_impls
from nki.sim.layout import REGS_BYTES
from nki.sim.profile import InstructionProfile, profiling_runner
from nki.sim.record import RunRecord, read_record
from nki.sim.tier import TierSwitch

# The engines' random-number state sits just below the registers (nki/sim/emit/rng.py)
STATE_BYTES = REGS_BYTES + rng.RNG_BYTES

_FAULTS = {1: "a dynamic access is out of bounds"}


def _fault_text(code: int, lv: np.ndarray, g: Generated, row: int) -> str:
    """What fault ``code`` (``L[15]``, set by generated checks or helpers) means; ``L[13]`` /
    ``L[14]`` carry the row and the offending value (nki/sim/codegen.py, emit/indirect.py)."""
    note = getattr(g, "notes", {}).get(row, "")
    note = f" ({note})" if note else ""
    if code == 2:
        return (f"a dynamic offset is out of bounds with oob_mode=error: register value "
                f"{int(lv[14])}{note}")
    if code == 3:
        return (f"an indirect DMA index is out of bounds with oob_mode=error: index "
                f"{int(lv[14])} in row {int(lv[13])}{note}; oob_mode=nisa.oob_mode.skip "
                "skips such rows")
    if code == 4:
        return (f"a gather index is out of bounds: index {int(lv[14])} in partition "
                f"{int(lv[13])}")
    return _FAULTS.get(code, "fault")


def _python_runner(pure: bool = False):
    """Runs one instruction row as Python: the helpers' bodies (``pure``: all the way down,
    the compile-free tier of ``nki/sim/tier.py``)."""
    impls = pure_impls() if pure else python_impls()

    def run_instr_py(ADDR, H, S, PS, IT, FT, k, L):
        L[ROW_SLOT] = k
        return impls[IT[k, 0]](H, S, PS, IT[k], FT[k], L)

    def run_instr_pure(ADDR, H, S, PS, IT, FT, k, L):
        with np.errstate(all="ignore"):   # numpy scalars warn where compiled code is silent
            L[ROW_SLOT] = k
            return impls[IT[k, 0]](H, S, PS, IT[k], FT[k], L)

    return run_instr_pure if pure else run_instr_py


@dataclass
class Executable:
    """One core's program, ready to run with either backend."""

    generated: Generated
    backend: str
    fn: object = None
    addr: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    # backend "profile": the generated loops in Python, each helper's compiled entry timed
    profile: InstructionProfile | None = None
    # this call's instruction table when it differs from the program's (nki/jit/hbm.py)
    table: np.ndarray | None = None

    def prepare(self) -> None:
        """Compile (or load) the program once per process and backend."""
        if self.fn is not None:
            return
        g = self.generated
        if self.backend == "profile":
            self.profile = InstructionProfile(g.origins, g.helpers)
            self.addr = _helper_table(g.bind_helpers())
            self.fn = _exec_source(g, profiling_runner(self.addr, self.profile))
            return
        done = g.compiled().get(self.backend)
        if done is None:
            used = g.bind_helpers()
            if self.backend in ("python", "pure"):
                done = (_exec_source(g, _python_runner(self.backend == "pure")),
                        np.zeros(1, np.int64))
            else:
                from nki.sim.compile import compile_source

                done = (compile_source(g.name, g.source), _helper_table(used))
            g.compiled()[self.backend] = done
        self.fn, self.addr = done


def _helper_table(used: set[int]) -> np.ndarray:
    """The address table of compiled helper entries; host calls (barriers, collectives,
    prints) point at the ctypes callback that runs their Python."""
    table = addresses(used - host.host_helper_ids())
    host.patch_addresses(table)
    return table


def _exec_source(g: Generated, run_instr):
    """The generated function as plain Python, calling ``run_instr`` per instruction."""
    ns = {"run_instr": run_instr}
    exec(compile(g.source, f"<nki:{g.name}>", "exec"), ns)
    return ns[g.name]


class _ArenaPool:
    """SBUF and PSUM arenas by (target, core, SBUF rows, PSUM rows), each handed to one run at
    a time and kept for the next: allocating and filling 34 MB per call would cost more than
    many kernels.

    ``rows``: partitions the SBUF arena has (likewise PSUM's); a program with tensors placed
    in overflow pages (spilled or unpackable tiles, ``Generated.sbuf_rows``; PSUM tiles that
    fit only reordered, ``Generated.psum_rows``) needs more than the target's. Such oversized
    arenas (192 KiB per extra row) come in as many sizes as there are spilling programs, so
    only the most recent one per (target, core) is kept: a test suite running hundreds of
    spilling kernels would otherwise hold every size it ever saw.
    They are not cleared: every read of a never-written byte was found while tracing and is
    preceded by an explicit fill (the NaN/4 sentinel), so stale bytes are never observable."""

    def __init__(self):
        self._free: dict[tuple[str, int, int, int], list] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def take(self, target: Target, core: int, sbuf_rows: int = 0, psum_rows: int = 0):
        rows = max(sbuf_rows, target.sbuf_partitions)
        prows = max(psum_rows, target.sbuf_partitions)
        key = (target.name, core, rows, prows)
        oversized = (rows, prows) != (target.sbuf_partitions, target.sbuf_partitions)
        with self._lock:
            free = self._free.get(key)
            arenas = free.pop() if free else None
            if arenas is None and oversized:
                self._drop_oversized(target, core)   # free them before allocating another
        if arenas is None:
            # engine state lives at the PSUM arena's end, after any overflow pages
            arenas = (np.full(rows * target.arena_pitch(Memory.SBUF), 0xFF, np.uint8),
                      np.full(prows * target.arena_pitch(Memory.PSUM) + STATE_BYTES, 0xFF,
                              np.uint8))
        arenas[1][-STATE_BYTES:] = 0  # engine registers and RNG state start at zero per run
        try:
            yield arenas
        finally:
            with self._lock:
                if oversized:
                    self._drop_oversized(target, core, keep=key)
                self._free.setdefault(key, []).append(arenas)

    def _drop_oversized(self, target: Target, core: int, keep: tuple | None = None) -> None:
        """Forget the pooled oversized arenas of one (target, core) other than ``keep``'s."""
        standard = target.sbuf_partitions
        for key in [k for k in self._free if k[:2] == (target.name, core) and k != keep
                    and (k[2], k[3]) != (standard, standard)]:
            del self._free[key]

    def held_bytes(self) -> int:
        """Bytes of the arenas the pool keeps for later runs (not those in use)."""
        with self._lock:
            return sum(a.nbytes for arenas in self._free.values() for pair in arenas
                       for a in pair)


_ARENAS = _ArenaPool()
_POLL_S = 0.05
_SWITCH_POLL_S = 0.5    # a file check per helper still compiling: cheap at this rate


@dataclass
class _CoreRun:
    """One core's run: its loop-variable array (``L``, whose stop word another thread may
    set) and how it ended."""

    exe: Executable
    core: int
    loopvars: np.ndarray = field(default_factory=lambda: np.zeros(NLOOPVARS, np.int64))
    status: int = -1
    returned: bool = False          # the program returned (normally or with a fault)
    record: RunRecord | None = None  # what the run did (nki/sim/record.py)
    # accumulator reads before any write the run logged (nki/sim/uninit.py)
    uninit: list = field(default_factory=list)
    interrupted: bool = False
    # set when the run ends: waited on instead of Thread.join, which Python 3.11 marks as
    # stopped when a KeyboardInterrupt lands in it while the thread still runs
    done: threading.Event = field(default_factory=threading.Event)


def _run_core(run: _CoreRun, hbm: np.ndarray, target: Target, errors: list,
              launch: host.Launch):
    exe, core, loopvars = run.exe, run.core, run.loopvars
    try:
        g = exe.generated
        table = g.int_table if exe.table is None else exe.table
        with _ARENAS.take(target, core, g.sbuf_rows, g.psum_rows) as (sbuf, psum), \
                host.running(launch, core, g, table) as ctx:
            t0 = time.perf_counter()
            status = exe.fn(exe.addr, hbm, sbuf, psum, table, g.float_table, loopvars)
            run.returned = True
            run.record = read_record(psum, g.loops, core)
            run.uninit = uninit.collect(psum, core)
            if exe.profile is not None:
                exe.profile.wall += time.perf_counter() - t0
        run.status = status
        if status >= 0 and loopvars[STOP_SLOT]:
            run.interrupted = True
        elif status >= 0 and ctx.pending is not None:   # a host call failed: its own error
            errors.append(ctx.pending)
        elif status >= 0 and loopvars[NLOOPVARS - 1] == FAULT_LOOP_BUDGET:
            errors.append(_over_budget(core, g, loopvars))
        elif status >= 0:
            code = int(loopvars[NLOOPVARS - 1]) or 1
            errors.append(fail("nki_runtime_out_of_bounds",
                               f"core {core}: {_fault_text(code, loopvars, g, status)} in "
                               f"{g.origins[status]}", g.locs[status], NkiRuntimeError))
    except Exception as e:  # re-raised on the calling thread
        errors.append(e)
    finally:
        run.done.set()


def _over_budget(core: int, g: Generated, loopvars: np.ndarray) -> NkiRuntimeError:
    loc, api = g.loops[int(loopvars[13])]
    trips = int(loopvars[14])
    return fail("nki_loop_budget_exceeded", f"core {core}: {api} ran {trips} iterations, the "
                f"loop budget (nki.jit(loop_budget=...) / NKI_LOOP_BUDGET), and would run "
                "more", loc, NkiRuntimeError)


def run_cores(exes: list[Executable], hbm: np.ndarray | list[np.ndarray],
              target: Target, check_uninit: bool = False,
              cores_per_rank: int | None = None,
              switch: Callable[[], bool] | None = None) -> list[RunRecord]:
    """Run one program per core; cores run concurrently (nogil code) and meet in one
    ``Launch``: core 0 on the calling thread, the others in threads. ``hbm``: the HBM the
    cores share (an LNC launch), or one per core (the ranks of a multi-rank run: separate
    devices whose only link is the collectives; the ``cores_per_rank`` LNC cores of a rank
    are given its one HBM). Accumulators read before any write warn
    afterwards, or raise with ``check_uninit`` (nki/sim/uninit.py).

    Ctrl-C stops a run within one instruction (nki/sim/interrupt.py) and raises
    KeyboardInterrupt naming the instruction each core was about to run. ``switch``: polled
    while the cores run; once true they stop the same way and :class:`TierSwitch` is raised
    (a plain-Python run whose compiled helpers became ready, nki/sim/tier.py). Returns each
    core's :class:`~nki.sim.record.RunRecord` (runtime-loop trips, skipped rows)."""
    for exe in exes:
        exe.prepare()
    errors: list = []
    launch = host.Launch(len(exes), cores_per_rank)
    hbms = hbm if isinstance(hbm, list) else [hbm] * len(exes)
    runs = [_CoreRun(exe, i) for i, exe in enumerate(exes)]
    threads = [threading.Thread(target=_run_core, args=(r, h, target, errors, launch),
                                name=f"nki-core-{r.core}", daemon=True)
               for r, h in zip(runs[1:], hbms[1:])]
    signalled, switched = False, threading.Event()
    if switch is not None:
        threads.append(threading.Thread(target=_watch_switch, name="nki-tier-switch",
                                        args=(switch, runs, launch, switched), daemon=True))
    with interrupt.watching([r.loopvars for r in runs]):
        for t in threads:
            t.start()
        try:
            _run_core(runs[0], hbms[0], target, errors, launch)
            for r in runs[1:]:
                # short waits: Python runs a signal's handler only when the main thread is
                # back in its eval loop, which a wait without timeout may not be for long
                while not r.done.wait(_POLL_S):
                    pass
        except KeyboardInterrupt:
            signalled = True
            interrupt.stop([r.loopvars for r in runs])
            launch.abort("interrupted (KeyboardInterrupt)")
            for r in runs:
                r.done.wait()
    for r in runs:
        if r.loopvars[STOP_SLOT] and (not r.returned or r.interrupted):
            r.interrupted, r.status = True, int(r.loopvars[ROW_SLOT])
    if switched.is_set() and not signalled and any(r.interrupted for r in runs):
        raise TierSwitch()
    if signalled or any(r.interrupted for r in runs):
        raise KeyboardInterrupt(_interrupted_text(runs)) from None
    if errors:
        # a core's own fault first: a peer's "waits forever" is its consequence
        errors.sort(key=lambda e: getattr(e, "code", "") == "nki_collective_deadlock")
        raise errors[0]
    uninit.report([e for r in runs for e in r.uninit], [r.exe.generated for r in runs],
                  check_uninit)
    return [r.record for r in runs]


def _watch_switch(switch: Callable[[], bool], runs: list[_CoreRun], launch,
                  switched: threading.Event) -> None:
    """Until every core is done: when ``switch()`` says so, stop the cores as Ctrl-C does
    (at their next instruction; a core waiting for a peer is released)."""
    while not all(r.done.wait(_SWITCH_POLL_S) for r in runs):
        if switch():
            switched.set()
            interrupt.stop([r.loopvars for r in runs])
            launch.abort("stopped to run again on the compiled helpers")
            return


def _interrupted_text(runs: list[_CoreRun]) -> str:
    """Where each core stopped: the instruction it was about to run, and its source line."""
    lines = ["nki kernel interrupted (Ctrl-C)"]
    for r in runs:
        g = r.exe.generated
        if r.interrupted and 0 <= r.status < len(g.origins):
            loc = g.locs[r.status]
            lines.append(f"  core {r.core} stopped before {g.origins[r.status]}")
            if loc is not None and loc.source_line():
                lines.append(f"    {loc.source_line()}")
        elif r.status < 0:
            lines.append(f"  core {r.core} had finished")
    return "\n".join(lines)
