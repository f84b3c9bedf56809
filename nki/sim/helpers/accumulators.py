"""Which engine accumulator lanes a run has written, and the log of reads before any write.

The Scalar engine's 128 reduce registers and the Vector engine's 128 accumulators keep their
values between instructions; a kernel that reads them (``reduce_cmd=reduce``, or
``reduce_res`` under ``idle``) before any instruction of the run set them reads whatever the
previous kernel left on hardware, and 0 here. So every run starts with one flag byte per lane
cleared (``layout.ACC_WRITTEN_FROM_END``: Scalar lanes, then Vector lanes) and the helpers:

* call :func:`mark_written` on the lanes an instruction sets (``reset``, ``reset_reduce``,
  ``load_reduce``, ``reduce``);
* call :func:`check_lanes` before reading lanes: a lane whose flag is clear logs one event
  (the instruction's row, the engine and a bit mask of the lanes) in the run's log
  (``layout.UNINIT_LOG_FROM_END``), which the runtime turns into a warning or, with
  ``check_uninit=True``, an error naming the kernel line (``nki/sim/uninit.py``);
* call :func:`mark_undefined` where AWS documents that an instruction leaves them undefined
  (Vector engine instructions under ``idle``: "the accumulator state may still be modified").

The cost is one byte compare per lane-row an instruction touches, not per element. A ScalarE
lane is the physical partition (:func:`first_lane`); a VectorE lane counts from the access's
first partition, as the simulator's VectorE ops always did (AWS documents neither). The
functions are plain Numba code, so compiled helpers inline them and host calls run their
``py_func`` on the same bytes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from nki.sim.helpers.memory import element_offset
from nki.sim.layout import ACC_WRITTEN_FROM_END, O_STRIDE, SITE_COL, UNINIT_LOG_FROM_END

SCALAR, VECTOR = 0, 1          # engine of an accumulator bank (the flag block's halves)
LANES = 128
MAX_EVENTS = 31                # log slots: [0] events, then (row, engine, lanes 0-63, 64-127)
EVENT_WORDS = 4


@njit(cache=True, nogil=True)
def _flags(PS, engine, lane0, P):
    start = PS.size - ACC_WRITTEN_FROM_END + engine * LANES + lane0
    return PS[start:start + P]


@njit(cache=True, nogil=True)
def first_lane(irow, base, L):
    """The physical partition an on-chip operand starts at (its element offset over its
    partition stride)."""
    stride = irow[base + O_STRIDE]
    if stride <= 0:
        return 0
    return element_offset(irow, base, L) // stride


@njit(cache=True, nogil=True)
def mark_written(PS, engine, lane0, P):
    """Lanes ``lane0 .. lane0+P`` of ``engine``'s accumulators now hold defined values."""
    _flags(PS, engine, lane0, P)[:] = 1


@njit(cache=True, nogil=True)
def mark_undefined(PS, engine, lane0, P):
    """Lanes ``lane0 .. lane0+P`` no longer hold defined values."""
    _flags(PS, engine, lane0, P)[:] = 0


@njit(cache=True, nogil=True)
def check_lanes(PS, frow, engine, lane0, P):
    """Before reading lanes ``lane0 .. lane0+P``: log the never-written ones under this
    instruction's row (one event per row and engine per run, the lanes OR-ed into it).
    Returns whether all were written."""
    f = _flags(PS, engine, lane0, P)
    lo, hi = np.int64(0), np.int64(0)
    for i in range(P):
        if f[i] == 0:
            lane = lane0 + i
            bit = np.int64(1) << np.int64(lane % 64)
            if lane < 64:
                lo |= bit
            else:
                hi |= bit
    if lo == 0 and hi == 0:
        return True
    _log(PS, np.int64(frow[SITE_COL]), engine, lo, hi)
    return False


@njit(cache=True, nogil=True)
def _log(PS, row, engine, lo, hi):
    start = PS.size - UNINIT_LOG_FROM_END
    log = PS[start:start + 8 * (1 + MAX_EVENTS * EVENT_WORDS)].view(np.int64)
    total = log[0]
    n = min(total, MAX_EVENTS)
    for e in range(n):
        b = 1 + e * EVENT_WORDS
        if log[b] == row and log[b + 1] == engine:
            log[b + 2] |= lo
            log[b + 3] |= hi
            return
    if n < MAX_EVENTS:
        b = 1 + n * EVENT_WORDS
        log[b], log[b + 1], log[b + 2], log[b + 3] = row, engine, lo, hi
    log[0] = total + 1


def read_log(PS: np.ndarray) -> list[tuple[int, int, list[int]]]:
    """The run's events: (row, engine, never-written lanes read) per instruction (at most
    ``MAX_EVENTS``; more rows read such lanes when ``events_logged(PS)`` is larger)."""
    log = PS[PS.size - UNINIT_LOG_FROM_END:][:8 * (1 + MAX_EVENTS * EVENT_WORDS)].view(np.int64)
    events = []
    for e in range(min(int(log[0]), MAX_EVENTS)):
        row, engine, lo, hi = (int(v) for v in log[1 + e * EVENT_WORDS:1 + (e + 1) * EVENT_WORDS])
        mask = (lo & (2 ** 64 - 1)) | ((hi & (2 ** 64 - 1)) << 64)
        events.append((row, engine, [p for p in range(LANES) if mask >> p & 1]))
    return events


def events_logged(PS: np.ndarray) -> int:
    """How many instruction rows read never-written lanes in the run (may exceed the log)."""
    return int(PS[PS.size - UNINIT_LOG_FROM_END:][:8].view(np.int64)[0])
