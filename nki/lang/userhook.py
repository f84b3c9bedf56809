"""Pausing a trace hook that only needs to see the user's code while nki's own code runs.

The program cache records, while a kernel traces, which user functions ran
(``nki.jit.cache.DependencyRecorder``, a ``sys.settrace`` hook). A tracing hook costs far
more than its own calls: while any hook is set, CPython 3.11 runs every bytecode through
its tracing path (no specialised instructions, a frame object and a line-number check per
line), and an instruction's rule runs a few hundred of nki's own Python calls. Flash
attention at S=4096 traced in 2.6 s without the hook and 5.7 s with it. So the hook marks
itself ``nki_pausable`` and each public instruction call (:func:`paused`) takes it off for
its duration: nki's rules never call back into user code, so nothing it should record runs
there. Other hooks (a debugger, coverage, a profiler) are never touched.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)

_gettrace = sys.gettrace
_settrace = sys.settrace


def paused(fn: F) -> F:
    """``fn`` running with a ``nki_pausable`` trace hook taken off (and put back after,
    however ``fn`` ends). ``fn`` must not call user code: what runs inside goes unrecorded.

    Example:
        >>> @paused
        ... def rule(x):
        ...     return x + 1
        >>> rule(1)
        2
    """
    @functools.wraps(fn)
    def call(*args, **kwargs):
        hook = _gettrace()
        if hook is None or not getattr(hook, "nki_pausable", False):
            return fn(*args, **kwargs)
        _settrace(None)
        try:
            return fn(*args, **kwargs)
        finally:
            _settrace(hook)

    return call  # type: ignore[return-value]
