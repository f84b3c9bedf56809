"""Recording how an instruction runs: ``engine=``, ``dge_mode=``, ``priority=``,
``dma_engine=`` and ``name=`` of a public call, kept on its instructions as
:attr:`~nki.ir.nodes.Instr.hints` for a cost model (they never change what is computed).

A stub opts in with :func:`records`; the keywords the kernel actually passed (not the
signature's defaults, so ``engine_fixed`` stays true to the kernel) are converted to the IR's
enums and stamped, through :meth:`Trace.hints`, on every instruction the rule emits, however
deep the rule builds them (an indirect DMA's gather included).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from nki.ir.ops import DgeMode, DmaEngine, Engine
from nki.lang.tracer import active


def _enum(cls) -> Callable[[Any], Any]:
    """A converter to ``cls`` that leaves a value it cannot convert alone: the rule, which
    runs next, raises the real error for a bad value."""
    def convert(value):
        if isinstance(value, cls):
            return value
        try:
            return cls(int(value))
        except (TypeError, ValueError):
            return value
    return convert


def _priority(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _name(value):
    return value if isinstance(value, str) else None


_CONVERT: dict[str, Callable[[Any], Any]] = {
    "engine": _enum(Engine), "dge_mode": _enum(DgeMode), "dma_engine": _enum(DmaEngine),
    "priority": _priority, "name": _name,
}


def records(*keys: str):
    """Decorator: stamp the keywords ``keys`` a call passes on the instructions it emits.

    Example:
        >>> @records("engine", "name")            # doctest: +SKIP
        ... def tensor_copy(dst, src, engine=None, name=""): ...
    """
    unknown = set(keys) - set(_CONVERT)
    if unknown:
        raise ValueError(f"records: no converter for {sorted(unknown)}")

    def decorate(fn):
        params = list(inspect.signature(fn).parameters)
        where = [(k, params.index(k)) for k in keys]

        @functools.wraps(fn)
        def stub(*args, **kwargs):
            trace = active()
            if trace is None:        # outside a kernel: the rule raises its own error
                return fn(*args, **kwargs)
            hints = {}
            for key, pos in where:
                value = kwargs[key] if key in kwargs else args[pos] if pos < len(args) \
                    else None
                if value is not None:
                    hints[key] = _CONVERT[key](value)
            if not hints:
                return fn(*args, **kwargs)
            with trace.hints(**hints):
                return fn(*args, **kwargs)

        return stub

    return decorate
