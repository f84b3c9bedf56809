"""What a run says about engine accumulators it read before writing them.

The helpers log such reads per instruction row while the program runs
(nki/sim/helpers/accumulators.py); after the run, :func:`report` turns the log of every core
into one warning per instruction (:class:`~nki.errors.NkiUninitializedRegisterWarning`,
shown once per kernel line like any Python warning) or, with ``check_uninit=True``, an
:class:`~nki.errors.NkiRuntimeError` naming the first such line.
"""

from __future__ import annotations

import warnings

from nki.errors import NkiRuntimeError, NkiUninitializedRegisterWarning, fail
from nki.sim.helpers import accumulators as acc_state

_ENGINES = {acc_state.SCALAR: "Scalar Engine accumulators (reduce_regs)",
            acc_state.VECTOR: "Vector Engine accumulators"}
# per source file, like a module's __warningregistry__: a kernel called in a loop warns once
_REGISTRIES: dict[str, dict] = {}


def collect(psum, core: int) -> list[tuple[int, int, int, list[int]]]:
    """This core's logged reads: (core, row, engine, lanes) each."""
    return [(core, row, engine, lanes) for row, engine, lanes in acc_state.read_log(psum)]


def lanes_text(lanes: list[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0-2, 5"``."""
    runs: list[list[int]] = []
    for p in lanes:
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _message(g, row: int, engine: int, lanes: list[int], cores: list[int]) -> str:
    what = g.origins[row] if 0 <= row < len(g.origins) else "an instruction"
    on = f"core {', '.join(map(str, cores))}: " if cores != [0] else ""
    return (f"[nki_uninitialized_register] {on}{what} reads the {_ENGINES[engine]} of "
            f"partitions {lanes_text(lanes)}, which no earlier instruction of this kernel set "
            "(undefined on hardware, where they hold whatever ran before; 0 here). Start "
            "the accumulation with reduce_cmd=reset_reduce (or a reset, or load_reduce, in "
            "an earlier instruction)")


def report(events: list[tuple[int, int, int, list[int]]], programs: list, check: bool) -> None:
    """Warn about (or, with ``check``, raise for) the logged reads of every core.
    ``programs[core]``: that core's ``Generated`` (rows → origins and source lines)."""
    merged: dict[tuple[int, int], tuple[set, list]] = {}
    for core, row, engine, lanes in events:
        lane_set, cores = merged.setdefault((row, engine), (set(), []))
        lane_set.update(lanes)
        cores.append(core)
    for (row, engine), (lane_set, cores) in sorted(merged.items()):
        g = programs[cores[0]]
        loc = g.locs[row] if 0 <= row < len(g.locs) else None
        msg = _message(g, row, engine, sorted(lane_set), sorted(set(cores)))
        if check:
            raise fail("nki_uninitialized_register", msg.split("] ", 1)[1], loc,
                       NkiRuntimeError)
        if loc is None:
            warnings.warn(msg, NkiUninitializedRegisterWarning, stacklevel=3)
        else:
            warnings.warn_explicit(msg, NkiUninitializedRegisterWarning, loc.filename,
                                   loc.lineno, registry=_REGISTRIES.setdefault(loc.filename, {}))
