"""Where a simulation's time goes: every instruction timed as it runs.

The profiled run executes the generated source as plain Python (the ``python`` backend's
loops) but calls each instruction's *compiled* helper through its C address, timing the call.
So the helpers run exactly the machine code of the ``numba`` backend, and the per-instruction
times add up to the compiled run's time, plus a few microseconds of Python per instruction
(reported apart, as ``overhead``). These are host times of this simulator on this CPU, not
a model of a NeuronCore: they show which instructions the simulation spends its time on.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field

import numpy as np

from nki.results import HOST, write_trace
from nki.sim.helpers.registry import WINDOW_SLOT
from nki.sim.layout import NF, ROW

_HELPER_C = ctypes.CFUNCTYPE(
    ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
    ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


@dataclass
class InstructionProfile:
    """Per-instruction call counts and seconds of one core's run, by instruction row.

    ``origins[k]`` is row ``k``'s ``file:line api(...)`` text, ``helpers[k]`` its helper.
    """

    origins: list[str]
    helpers: list[str]
    calls: np.ndarray = field(default=None)
    seconds: np.ndarray = field(default=None)
    wall: float = 0.0
    kind: str = HOST   # nki.results.KernelResult: this simulator's time on the host CPU

    def __post_init__(self):
        n = len(self.origins)
        self.calls = np.zeros(n, np.int64) if self.calls is None else self.calls
        self.seconds = np.zeros(n, np.float64) if self.seconds is None else self.seconds

    @property
    def total(self) -> float:
        """Seconds spent inside helpers."""
        return float(self.seconds.sum())

    def by_helper(self) -> dict[str, float]:
        """Seconds per helper (instruction family), largest first."""
        out: dict[str, float] = {}
        for name, s in zip(self.helpers, self.seconds):
            out[name] = out.get(name, 0.0) + float(s)
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def table(self, top: int = 20) -> str:
        """The ``top`` instructions by time: share, total, calls, time per call, origin."""
        order = np.argsort(-self.seconds)[:top]
        lines = [f"{'share':>6s} {'ms':>9s} {'calls':>7s} {'us/call':>9s}  instruction"]
        total = max(self.total, 1e-12)
        for k in order:
            if self.calls[k] == 0:
                break
            s, c = self.seconds[k], self.calls[k]
            lines.append(f"{100 * s / total:5.1f}% {s * 1e3:9.3f} {c:7d} {s / c * 1e6:9.1f}  "
                         f"{self.origins[k]}")
        lines.append(f"helpers {self.total * 1e3:.3f} ms of {self.wall * 1e3:.3f} ms wall "
                     f"(overhead {max(self.wall - self.total, 0.0) * 1e3:.3f} ms: the "
                     "profiler's Python loop)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def by_line(self) -> HostLineTable:
        """Host seconds per source line (summed over its instructions), longest first."""
        rows: dict[str, HostLineRow] = {}
        for origin, helper, c, s in zip(self.origins, self.helpers, self.calls, self.seconds):
            loc = origin.split(" ", 1)[0]
            row = rows.setdefault(loc, HostLineRow(loc, 0.0, 0, ()))
            row.seconds += float(s)
            row.calls += int(c)
            if helper not in row.helpers:
                row.helpers = (*row.helpers, helper)
        return HostLineTable(sorted(rows.values(), key=lambda r: (-r.seconds, r.location)))

    def save_trace(self, path: str) -> str:
        """A trace-event file of the host times: one slice per instruction row, laid end to
        end in program order with its summed time (an aggregate per instruction, not a
        timeline of the run; ``otherData`` says so)."""
        events = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0,
                   "args": {"name": "simulator on the host CPU (host time)"}}]
        ts = 0.0
        for k in range(len(self.origins)):
            if self.calls[k] == 0:
                continue
            dur = float(self.seconds[k]) * 1e6
            events.append({"name": self.helpers[k], "cat": "host", "ph": "X", "pid": 0,
                           "tid": 1, "ts": ts, "dur": dur,
                           "args": {"origin": self.origins[k], "calls": int(self.calls[k])}})
            ts += dur
        meta = {"result_kind": HOST, "wall_s": self.wall, "helpers_s": self.total,
                "layout": "each instruction row's total host time, end to end in program "
                          "order; not a timeline"}
        return write_trace({"traceEvents": events, "displayTimeUnit": "ms",
                            "otherData": meta}, path)


@dataclass
class HostLineRow:
    """One source line's host time: seconds inside helpers, calls, helper names."""

    location: str
    seconds: float
    calls: int
    helpers: tuple[str, ...]


class HostLineTable(list):
    """Rows by host seconds, longest first; ``str()`` is a table."""

    def __str__(self) -> str:
        out = [f"{'line':<28} {'host ms':>10} {'calls':>8}  helpers"]
        out += [f"{r.location:<28} {r.seconds * 1e3:10.3f} {r.calls:8d}  {','.join(r.helpers)}"
                for r in self]
        return "\n".join(out)


def profiling_runner(addr: np.ndarray, profile: InstructionProfile):
    """A ``run_instr`` for the generated source that calls helpers' C entries (``addr``,
    the program's address table) and adds each call's time to ``profile``.

    A row chain (nki/sim/rowchain.py) calls an instruction once per partition chunk: every
    chunk's time goes to the instruction's row, and the call is counted once, at its first
    chunk, so ``calls`` counts instructions run as in the plain order."""
    fns: dict[int, object] = {}
    ptrs: list = []
    calls, seconds = profile.calls, profile.seconds
    clock = time.perf_counter

    def run_instr(ADDR, H, S, PS, IT, FT, k, L):
        if not ptrs:   # the arenas do not move during a run: take their addresses once
            ptrs.extend((H.ctypes.data, H.size, S.ctypes.data, S.size, PS.ctypes.data,
                         PS.size, IT.ctypes.data, FT.ctypes.data, L.ctypes.data))
        h, hn, s, sn, p, pn, it, ft, lv = ptrs
        hid = int(IT[k, 0])
        fn = fns.get(hid)
        if fn is None:
            fn = fns[hid] = _HELPER_C(int(addr[hid]))
        t0 = clock()
        status = fn(h, hn, s, sn, p, pn, it + k * ROW * 8, ft + k * NF * 8, lv)
        seconds[k] += clock() - t0
        if L[WINDOW_SLOT] == 0 or L[WINDOW_SLOT + 1] == 0:
            calls[k] += 1
        return status

    return run_instr
