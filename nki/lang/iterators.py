"""Loops and program ids (spec §1.4, §1.5).

In the current dialect ``affine_range``, ``sequential_range`` and ``static_range`` are
``range``: Python unrolls them. They also record their kind and iteration boundaries in the
trace, so the reroll pass can fold the iterations back into IR loops and checks know which
loops promised independent iterations.
"""

from __future__ import annotations

from nki.ir.ops import LoopKind
from nki.lang.tensor import DynSlice
from nki.lang.tracer import active, current, user_loc


def _recorded(kind: LoopKind, args):
    r = range(*(int(a) for a in args))
    trace = active()
    if trace is None:
        yield from r
        return
    rec = trace.begin_loop(kind, user_loc())
    try:
        for i in r:
            trace.begin_iteration(rec)
            yield i
    finally:
        trace.end_loop(rec)


def affine_range(*args, **kwargs):
    """A loop whose iterations are independent (unrolled; recorded for reroll and checks)."""
    return _recorded(LoopKind.AFFINE, args)


def sequential_range(*args, **kwargs):
    """A loop with loop-carried dependencies (unrolled; recorded)."""
    return _recorded(LoopKind.SEQUENTIAL, args)


def static_range(*args, **kwargs):
    """A fully unrolled loop (recorded)."""
    return _recorded(LoopKind.STATIC, args)


def ds(start: int, size: int) -> DynSlice:
    """``nl.ds(start, size)`` ≡ ``start:start+size``."""
    return DynSlice(start, size)


def program_id(axis: int = 0) -> int:
    """Index of this core in an LNC launch (``kernel[2]``): 0 or 1."""
    return current("nl.program_id").core if int(axis) == 0 else 0


def num_programs(axes: int | None = 0) -> int:
    """Number of cores of the launch (1 without LNC)."""
    return current("nl.num_programs").num_cores


def program_ndim() -> int:
    """Rank of the launch grid: 1 under ``kernel[n]``, else 0."""
    return 1 if current("nl.program_ndim").launched_with_grid else 0
