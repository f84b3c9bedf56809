"""Running compiled programs: memories, helper addresses, LNC threads, faults.

HBM is one flat byte arena shared by the cores of a launch; each core has its own SBUF and
PSUM arenas of the target's real size (rows of ``bytes_per_partition``). Fresh on-chip memory
is filled with 0xFF bytes, a NaN in every float format, so reading never-written memory shows.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from nki.errors import NkiRuntimeError, fail
from nki.ir.target import Target
from nki.ir.types import Memory
from nki.sim.codegen import Generated
from nki.sim.emit import collectives as host
from nki.sim.emit import rng
from nki.sim.helpers.registry import NLOOPVARS, addresses, python_impls
from nki.sim.layout import REGS_BYTES
from nki.sim.profile import InstructionProfile, profiling_runner

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


def _python_runner():
    impls = python_impls()

    def run_instr_py(ADDR, H, S, PS, IT, FT, k, L):
        return impls[IT[k, 0]](H, S, PS, IT[k], FT[k], L)

    return run_instr_py


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
            if self.backend == "python":
                done = (_exec_source(g, _python_runner()), np.zeros(1, np.int64))
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


_ARENAS = threading.local()


def on_chip_arenas(target: Target, core: int) -> tuple[np.ndarray, np.ndarray]:
    """This thread's SBUF and PSUM arenas for ``core``, reused across calls.

    They are not cleared: every read of a never-written byte was found while tracing and is
    preceded by an explicit fill (the NaN/4 sentinel), so stale bytes are never observable.
    Allocating and filling 34 MB per call would cost more than many kernels."""
    cache = getattr(_ARENAS, "by_key", None)
    if cache is None:
        cache = _ARENAS.by_key = {}
    key = (target.name, core)
    if key not in cache:
        sbuf = np.full(target.sbuf_partitions * target.arena_pitch(Memory.SBUF), 0xFF,
                       np.uint8)
        psum = np.full(target.sbuf_partitions * target.arena_pitch(Memory.PSUM) + STATE_BYTES,
                       0xFF, np.uint8)
        cache[key] = (sbuf, psum)
    sbuf, psum = cache[key]
    psum[-STATE_BYTES:] = 0  # engine registers and RNG state start at zero in every run
    return sbuf, psum


def _run_core(exe: Executable, hbm: np.ndarray, target: Target, errors: list, core: int,
              launch: host.Launch):
    try:
        sbuf, psum = on_chip_arenas(target, core)
        loopvars = np.zeros(NLOOPVARS, np.int64)
        g = exe.generated
        table = g.int_table if exe.table is None else exe.table
        with host.running(launch, core, g, table) as ctx:
            t0 = time.perf_counter()
            status = exe.fn(exe.addr, hbm, sbuf, psum, table, g.float_table, loopvars)
            if exe.profile is not None:
                exe.profile.wall += time.perf_counter() - t0
        if status >= 0 and ctx.pending is not None:   # a host call failed: its own error
            errors.append(ctx.pending)
        elif status >= 0:
            code = int(loopvars[NLOOPVARS - 1]) or 1
            errors.append(fail("nki_runtime_out_of_bounds",
                               f"core {core}: {_fault_text(code, loopvars, g, status)} in "
                               f"{g.origins[status]}", g.locs[status], NkiRuntimeError))
    except Exception as e:  # re-raised on the calling thread
        errors.append(e)


def run_cores(exes: list[Executable], hbm: np.ndarray | list[np.ndarray],
              target: Target) -> None:
    """Run one program per core; cores run concurrently (nogil code) and meet in one
    ``Launch``. ``hbm``: the HBM the cores share (an LNC launch), or one per core (the
    ranks of a multi-rank run: separate devices whose only link is the collectives)."""
    for exe in exes:
        exe.prepare()
    errors: list = []
    launch = host.Launch(len(exes))
    hbms = hbm if isinstance(hbm, list) else [hbm] * len(exes)
    if len(exes) == 1:
        _run_core(exes[0], hbms[0], target, errors, 0, launch)
    else:
        threads = [threading.Thread(target=_run_core, args=(e, h, target, errors, i, launch))
                   for i, (e, h) in enumerate(zip(exes, hbms))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        # a core's own fault first: a peer's "waits forever" is its consequence
        errors.sort(key=lambda e: getattr(e, "code", "") == "nki_collective_deadlock")
        raise errors[0]
