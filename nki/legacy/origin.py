"""Source locations of deferred results.

A legacy call's instruction is emitted later than the call (when its result is assigned or
used, ``nki/legacy/pending.py``), but its origin comment and any rule error must name the
call's line. The rules find that line as the innermost frame outside the ``nki`` package
(``nki.lang.tracer.user_loc``), so a deferred emission runs through a one-line trampoline
compiled *at the call's file and line*: its frame is that innermost user frame. Tracebacks
through it show the call's source line too.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable

from nki.errors import SourceLoc


@functools.cache
def _trampoline(filename: str, lineno: int) -> Callable:
    # The lambda's code is taken from the compiled module without running the module (the
    # program cache records user code that runs while tracing; it skips "<lambda>" code).
    source = "\n" * (max(lineno, 1) - 1) + "run = lambda f, a, k: f(*a, **k)"
    module = compile(source, filename, "exec")
    code = next(c for c in module.co_consts if isinstance(c, types.CodeType))
    return types.FunctionType(code, {"__name__": __name__})


def call_at(loc: SourceLoc | None, fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)`` as if called from ``loc``.

    Example:
        >>> call_at(SourceLoc("k.py", 12), print, "hi")   # doctest: +SKIP
    """
    if loc is None:
        return fn(*args, **kwargs)
    return _trampoline(loc.filename, loc.lineno)(fn, args, kwargs)
