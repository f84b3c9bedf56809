"""The run record: what a run did that the IR alone cannot say, for a cost model.

A data-dependent kernel's work depends on values: how many times each runtime loop
(``nl.fori_loop`` / ``nl.while_loop`` / ``nl.dynamic_range``) went round, and how many
rows ``oob_mode.skip`` left out. The generated program counts these in the top
``RECORD_REGS`` slots of the virtual register file (zeroed per run with the rest of the
engine state, nki/sim/runtime.py), which ``nisa.register_alloc`` never hands out; the
runtime reads them when a core's program returns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nki.errors import SourceLoc
from nki.sim.emit.control import NUM_REGS, REG_FILE_FROM_END

RECORD_REGS = 256                      # the register file's top slots, kept for the record
SKIPPED_ROWS = NUM_REGS - 1            # rows an indirect DMA skipped (oob_mode.skip)
SKIPPED_RUNS = NUM_REGS - 2            # register-moved instructions skipped (oob_mode.skip)
MAX_RECORDED_LOOPS = (RECORD_REGS - 2) // 2


def loop_slots(n: int) -> tuple[int, int] | None:
    """(trips slot, entries slot) of the ``n``-th runtime loop, or None past the budget."""
    if n >= MAX_RECORDED_LOOPS:
        return None
    return NUM_REGS - 3 - 2 * n, NUM_REGS - 4 - 2 * n


@dataclass(frozen=True)
class LoopRecord:
    """One runtime loop: ``entries`` times the program reached it, ``trips`` iterations in
    all (so ``trips / entries`` per entry). ``index`` is its position among the program's
    runtime loops in program order (``nki.ir.nodes.walk`` order of DynFor/DynWhile)."""

    index: int
    api: str
    loc: SourceLoc | None
    entries: int
    trips: int


@dataclass(frozen=True)
class RunRecord:
    """What one core's run did. ``complete`` is False when the program has more runtime
    loops than the record keeps (``MAX_RECORDED_LOOPS``): the later ones are missing.
    ``skipped_rows`` counts rows of indirect DMAs (``vector_offset``) left out under
    ``oob_mode.skip``, ``skipped_runs`` executions of register-moved DMAs left out; both are
    totals over the program (not per instruction)."""

    core: int
    loops: tuple[LoopRecord, ...]
    skipped_rows: int
    skipped_runs: int
    complete: bool = True

    def trips(self, index: int) -> int:
        """Total iterations of runtime loop ``index``."""
        return self.loops[index].trips


def read_record(psum: np.ndarray, loops: list, core: int) -> RunRecord:
    """The record a program left in its core's PSUM arena (``loops``: the generated
    program's ``(loc, api)`` per runtime loop)."""
    start = psum.size - REG_FILE_FROM_END
    regs = psum[start:start + 8 * NUM_REGS].view(np.int64)
    out = []
    for n, (loc, api) in enumerate(loops[:MAX_RECORDED_LOOPS]):
        trips, entries = loop_slots(n)
        out.append(LoopRecord(n, api, loc, int(regs[entries]), int(regs[trips])))
    return RunRecord(core, tuple(out), int(regs[SKIPPED_ROWS]), int(regs[SKIPPED_RUNS]),
                     len(loops) <= MAX_RECORDED_LOOPS)
