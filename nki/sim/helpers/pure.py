"""The compile-free tier: every helper as plain Python all the way down.

The python backend runs each helper's ``py_func``, but those bodies call ``@njit``
sub-functions (``load_f32``, ``gather``, the ALU, the transcendentals), so a cold process
still waits for Numba to compile them (~100 s for one softmax). This module rebuilds the
helpers with those calls bound to plain Python instead: each function of ``nki.sim`` is
re-created from its own code object with *pure globals*, a copy of its module's namespace
in which every Numba dispatcher is replaced by its pure twin (recursively, including
modules reached as attributes, ``nm.round_bf16``). Nothing here ever starts Numba's
compiler, so a kernel runs seconds after ``pip install``.

Sub-functions that loop per element (fine compiled, hopelessly slow interpreted) register a
numpy twin with :func:`vectorised`; a twin must give the same bits as the compiled loop
(``tests/unit/test_tiers.py`` compares the tiers over several kernels).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable

_PREFIX = "nki.sim"
_MODULES: dict[str, types.ModuleType] = {}       # module name -> its pure twin
_FUNCS: dict[int, Callable] = {}                 # id(original function) -> pure twin
_KEEP: list[object] = []                         # originals kept alive (their ids are keys)
_TWINS: dict[tuple[str, str], Callable] = {}     # (module, name) -> hand-written numpy twin


def vectorised(module: str, name: str):
    """Register the decorated function as the pure tier's twin of ``module.name`` (an
    ``@njit`` function whose body loops per element)."""
    def register(fn: Callable) -> Callable:
        _TWINS[(module, name)] = fn
        return fn
    return register


def _is_ours(module: str | None) -> bool:
    return bool(module) and (module == _PREFIX or module.startswith(_PREFIX + "."))


def pure_module(module: types.ModuleType) -> types.ModuleType:
    """The twin of ``module``: the same names, functions and dispatchers rebound to pure
    Python. Registered before its names are converted, so cycles resolve."""
    twin = _MODULES.get(module.__name__)
    if twin is not None:
        return twin
    twin = types.ModuleType(module.__name__)
    _MODULES[module.__name__] = twin
    space = twin.__dict__
    space.update(module.__dict__)
    for key, value in list(space.items()):
        space[key] = pure_value(value)
    return twin


def pure_value(value):
    """``value`` as the pure tier sees it (unchanged unless it is a function, dispatcher or
    module of ``nki.sim``)."""
    if isinstance(value, types.ModuleType):
        return pure_module(value) if _is_ours(value.__name__) else value
    py_func = getattr(value, "py_func", None)
    if py_func is not None and isinstance(py_func, types.FunctionType):
        return pure_function(py_func)
    if isinstance(value, types.FunctionType) and _is_ours(value.__module__):
        return pure_function(value)
    return value


def pure_function(fn: types.FunctionType) -> Callable:
    """``fn`` re-created over its module's pure globals (its numpy twin if it has one)."""
    done = _FUNCS.get(id(fn))
    if done is not None:
        return done
    _load_twins()
    twin = _TWINS.get((fn.__module__, fn.__name__)) or interpreted(fn)
    _FUNCS[id(fn)] = twin
    _KEEP.append(fn)
    return twin


_INTERPRETED: dict[int, Callable] = {}


def interpreted(fn) -> Callable:
    """``fn`` (or a dispatcher's ``py_func``) as plain Python over pure globals, never its
    numpy twin: what a twin falls back to for the cases it does not vectorise."""
    fn = getattr(fn, "py_func", fn)
    done = _INTERPRETED.get(id(fn))
    if done is not None:
        return done
    space = pure_module(sys.modules[fn.__module__]).__dict__
    closure = None
    if fn.__closure__:
        closure = tuple(types.CellType(pure_value(c.cell_contents)) for c in fn.__closure__)
    twin = types.FunctionType(fn.__code__, space, fn.__name__, fn.__defaults__, closure)
    twin.__kwdefaults__ = fn.__kwdefaults__
    twin.__doc__, twin.__qualname__ = fn.__doc__, fn.__qualname__
    _INTERPRETED[id(fn)] = twin
    _KEEP.append(fn)
    return twin


_TWINS_LOADED = False


def _load_twins() -> None:
    """Import the numpy twins (they register themselves) once."""
    global _TWINS_LOADED
    if not _TWINS_LOADED:
        _TWINS_LOADED = True
        import nki.sim.helpers.pure_transcend  # noqa: F401
        import nki.sim.helpers.pure_twins  # noqa: F401
