"""Engine state a kernel can read before writing it, and what a run says about it.

Every piece of state that persists between instructions, what reads it, what a read before
any write gives on hardware (as far as AWS documents it) and what the simulator does. "Warns"
means :class:`~nki.errors.NkiUninitializedRegisterWarning` (code
``nki_uninitialized_register``) naming the kernel's ``file:line``, once per line; with
``check_uninit=True`` (``NKI_CHECK_UNINIT=1``) the same text is an error.

Per state: who writes it / who reads it / a never-written read on hardware / here.

* **ScalarE reduce_regs** (128 fp32 lanes shared by ``activation``, ``activation_reduce``,
  ``activate2``). Written by ``reduce_cmd`` ``reset``, ``reset_reduce``, ``reduce``. Read by
  ``reduce`` and by ``reduce_res`` under ``idle`` (AWS: "an additional instruction is emitted
  to read the accumulator"). Hardware: not documented; ``idle`` does not modify them, so they
  hold whatever ran before (an earlier kernel). Here: 0, and a run-time warning per lane (an
  ``idle`` read after a reset in an earlier iteration, or in a runtime loop that ran, is quiet).
* **VectorE accumulators** (128 fp32 lanes shared by ``tensor_scalar_reduce``,
  ``exponential``, ``select_reduce``, ``range_select``, ``tensor_scalar_cumulative``).
  Written by ``reset``, ``reset_reduce``, ``load_reduce``, ``reduce``. Read by ``reduce`` and
  by ``tensor_scalar_reduce``'s ``reduce_res`` under ``idle``. Hardware: undefined, and AWS
  says an ``idle`` ``exponential`` / ``select_reduce`` "may still modify" them. Here: 0 (or
  the last value), a warning per lane; after an ``idle`` ``exponential`` / ``select_reduce``
  the lanes count as unwritten again.
* Not reads: ``select_reduce`` / ``range_select`` ``reduce_res`` under ``idle`` (this call's
  row maxima), ``tensor_scalar_cumulative`` under ``idle`` / ``reset`` (a scan from ``op1``'s
  identity), ``tensor_reduce`` and ``tensor_tensor_scan`` (no persistent state; the scan's
  ``initial`` is an operand). Quiet.
* **Registers** from ``nisa.register_alloc()`` without a value (virtual; 64 physical per
  engine sequencer). Written by ``register_alloc(x)``, ``register_move``, ``register_load``,
  loop variables. Read by ``register_move`` / ``register_alloc(reg)``, ``register_store``,
  ``fori_loop`` / ``dynamic_range`` bounds, ``while_loop`` conditions, ``while reg:``, and
  offsets moved by a register (``nl.ds(reg, n)``, ``t[reg]``, ``.ap(scalar_offset=reg)``).
  Hardware: not documented (the physical register's previous contents). Here: 0; checked
  while tracing, in program order (a write in a runtime loop body counts even if the loop
  runs zero times), one warning per register; ``check_uninit`` raises ``NkiValidationError``.
* **RNG state** (``nisa.rng``, ``rand2``, ``dropout``, ``nl.rand``, ``rand_get_state``;
  seeded by ``set_rng_seed``, ``rand_set_state``, ``nl.random_seed``). Hardware: not
  documented before seeding. Here: quiet; every run starts as seed 0 (nki/sim/emit/rng.py):
  unseeded draws are still random bits, only not reproducible across hardware runs.
* **PSUM** under ``nc_matmul(accumulate=True)`` that no matmul wrote: undefined (AWS); warns
  while tracing (``nki_accumulate_uninitialized``), as AWS's simulator does.
* **SBUF / PSUM bytes** never written: stale memory on hardware; here the NaN sentinel, and
  ``check_uninit`` raises ``nki_uninitialized_read`` while tracing.

The helpers log accumulator reads per instruction row while the program runs
(nki/sim/helpers/accumulators.py); after the run, :func:`report` turns the log of every core
into one warning per instruction, shown once per kernel line like any Python warning, or,
with ``check_uninit=True``, an :class:`~nki.errors.NkiRuntimeError` naming the first line.
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
