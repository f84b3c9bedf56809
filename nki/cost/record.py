"""Watching kernel calls: ``python -m nki.cost script.py`` estimates every kernel the script
calls. ``Kernel.__call__`` hands each specialized call to :func:`observe`, which does nothing
unless a :func:`recording` block is active (a ``ContextVar``, reset on exit)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

_WATCHER: contextvars.ContextVar[Callable | None] = contextvars.ContextVar(
    "nki_cost_watcher", default=None)


def observe(kernel, spec) -> None:
    """Called by ``Kernel.__call__`` with the specialization it is about to run."""
    watcher = _WATCHER.get()
    if watcher is not None:
        watcher(kernel, spec)


@contextlib.contextmanager
def recording(watcher: Callable) -> Iterator[None]:
    """Within the block, ``watcher(kernel, spec)`` sees every top-level kernel call."""
    token = _WATCHER.set(watcher)
    try:
        yield
    finally:
        _WATCHER.reset(token)
