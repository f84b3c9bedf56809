"""Legacy loops: NKI 0.1 traced a loop body once, we run it once per iteration.

NKI 0.1's tracer saw the body of ``nl.affine_range`` / ``sequential_range`` (and of a plain
``range``, which it turned into ``sequential_range``) once, with a symbolic loop variable;
only ``nl.static_range`` was unrolled. Python unrolls every loop here, so Python state a body
mutates is mutated once per iteration instead of once. Two kernel idioms AWS published
depend on the old behaviour and would otherwise compute wrong numbers:

* a direct allocation whose address comes from a counter the body advances
  (``buffer=ncc.sbuf.mod_alloc(base_addr=cur_addr); cur_addr += size``): in NKI 0.1 every
  iteration's tile sat at the one address the single trace computed. Here each allocation
  site in a loop body keeps the addresses of its first iteration (:func:`first_addresses`),
  and says so once with a :class:`LegacyLoopWarning` when a later iteration asked for others.
* a ``return`` inside a loop body: NKI 0.1 had traced the body up to it, so every iteration
  ran that much. Python leaves the loop after its first iteration. That is caught when the
  kernel's trace ends (:func:`check_abandoned`) and raised, naming the loop and the rule.
"""

from __future__ import annotations

import dataclasses
import warnings

from nki.errors import SourceLoc
from nki.lang.tracer import user_loc, validation


class LegacyLoopWarning(UserWarning):
    """A legacy kernel relies on NKI 0.1 tracing a loop body once (see the module doc)."""


@dataclasses.dataclass
class LoopFrame:
    """One open legacy loop: where it is, whether it unrolls, which iteration runs, and
    how often each allocation site ran in this iteration (a helper called twice in one body
    allocates twice at the same line)."""

    serial: int
    loc: SourceLoc | None
    static: bool
    trips: int
    iteration: int = -1
    seen: dict = dataclasses.field(default_factory=dict)


class LoopState:
    """The legacy loops of one trace: the open ones, every allocation site's first
    addresses, and loops a ``return``/``break`` left early."""

    def __init__(self):
        self.frames: list[LoopFrame] = []
        self.serial = 0
        self.first: dict[tuple, tuple[dict, SourceLoc | None]] = {}
        self.warned: set[tuple] = set()
        self.abandoned: list[LoopFrame] = []


def counted(loops: LoopState, loop, trips: int, static: bool, flush):
    """Iterate ``loop`` (a recorded range) keeping ``loops.frames`` current; ``flush`` runs
    at every iteration boundary. A loop left before its last iteration without an error
    in flight (``return`` or ``break``) is remembered for :func:`check_abandoned`."""
    loops.serial += 1
    frame = LoopFrame(loops.serial, user_loc(), static, trips)
    loops.frames.append(frame)
    done = False
    try:
        for i in loop:
            frame.iteration = i
            frame.seen.clear()
            yield i
            flush()
        done = True
    except GeneratorExit:
        if frame.iteration + 1 < frame.trips:
            loops.abandoned.append(frame)
        raise
    finally:
        loops.frames.remove(frame)
        if not done:
            loop.close()


def _site(loops: LoopState, loc: SourceLoc | None) -> tuple | None:
    """The key of an allocation at ``loc`` that NKI 0.1 would have traced once for all
    iterations of the outermost enclosing traced-once loop, or None outside such loops."""
    outer = next((k for k, f in enumerate(loops.frames) if not f.static), None)
    if outer is None or loc is None:
        return None
    path = tuple((f.loc, f.iteration if f.static else None)
                 for f in loops.frames[outer + 1:])
    inner = loops.frames[-1]
    here = (loc.filename, loc.lineno)
    count = inner.seen.get(here, 0)
    inner.seen[here] = count + 1
    return (loops.frames[outer].serial, path, here, count)


def first_addresses(loops: LoopState, addrs: dict, shape: tuple) -> dict:
    """The block addresses an allocation in a loop body takes: those its site got in the
    first iteration (NKI 0.1 traced the body once), else ``addrs``."""
    loc = user_loc()
    key = _site(loops, loc)
    if key is None:
        return addrs
    found = loops.first.get(key)
    if found is None or found[1] != shape:
        loops.first[key] = (addrs, shape)
        return addrs
    if found[0] != addrs and key[:3] not in loops.warned:
        loops.warned.add(key[:3])
        warnings.warn_explicit(LegacyLoopWarning(
            f"the direct allocation asks for other addresses in a later iteration of "
            f"the loop at {_where(loops.frames[0].loc)}; NKI 0.1 traced a loop body once, so "
            f"every iteration uses the first iteration's addresses, as here"),
            LegacyLoopWarning, loc.filename, loc.lineno)
    return found[0]


def check_abandoned(loops: LoopState) -> None:
    """Raise if a ``return``/``break`` left a traced-once loop after one iteration: NKI 0.1
    ran the body (up to that statement) for every iteration, Python ran it once."""
    for frame in loops.abandoned:
        if frame.static:
            continue
        raise validation(
            "nki_not_implemented",
            f"a return or break inside the loop at {_where(frame.loc)} left it after iteration "
            f"{frame.iteration} of {frame.trips}; NKI 0.1 traced the loop body once and ran "
            f"it for every iteration, which Python cannot replay here: move the return "
            f"after the loop")


def _where(loc: SourceLoc | None) -> str:
    return loc.short if loc is not None else "?"
