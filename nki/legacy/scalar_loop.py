"""``for _ in range(nt.scalar(t)):``: a loop the machine runs, its trip count read at run time.

AWS's ``flash_paged_attn_varlen`` (nki-samples ``contributed/neuron-team-kernels``) loads a
one-element int32 count from HBM into SBUF and loops ``range(scalar(count_sbuf))`` times,
carrying its state in tiles (a loop-index tile it increments, registers it reads through
``t[idx[0, 0]]``). ``neuronxcc.nki.typing.scalar`` has no public reference page; what the
kernel and AWS's documents fix is this much:

* NKI 0.1 rewrote a kernel's Python ``range(...)`` into ``sequential_range(...)`` (the legacy
  ``sequential_range`` reference), so ``range`` in a kernel was its own construct, not
  Python's, and saw its arguments as the compiler's values;
* a scalar read from a 1x1 tile can bound a loop that runs on the device, whose body is not
  unrolled (the current dialect's ``nl.dynamic_range`` / ``fori_loop``, "a trip count read at
  run time"); the bound is 32-bit, since the loop is a compare-and-branch with no 64-bit form
  (``nki.language.fori_loop``), so a count of zero or less runs the body no times.

So ``scalar(t)`` loads ``t``'s one element into a register where it is called (the count is
read once, before the loop, as ``range`` reads its arguments once), and ``range`` over it is
a runtime loop: its body is traced once into a ``DynFor`` whose stop is that register (the
loop variable is the induction register). Python evaluates ``range`` by name, so the kernel's
module, and every user module it reaches that uses ``scalar``, runs from a copy of its
globals made per trace in which ``range`` is :func:`runtime_range` (Python's own ``range``
for ints). Used as a Python int anywhere else, a scalar raises
``err_dynamic_control_flow_not_supported``: its value exists only at run time.
"""

from __future__ import annotations

import builtins
import sys
import types

from nki.ir.nodes import Reg
from nki.lang.common import Call
from nki.lang.control import (
    _dynamic_range_iter,
    _new_register,
    _written,
    register_alloc,
    register_load,
)
from nki.lang.tracer import validation
from nki.legacy.pending import flush, state, value

_NOT_USER = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix, "<"})


class RuntimeScalar:
    """The value of a one-element integer tile, read at run time into a register."""

    def __init__(self, register, api: str):
        self.register, self.api = register, api

    def __index__(self) -> int:
        raise validation("err_dynamic_control_flow_not_supported", f"{self.api} is read at run "
                         f"time (register r{self.register.id}); it bounds a runtime loop as "
                         "'for _ in range(scalar(t)):' in a kernel's module, but has no "
                         "Python value while tracing")

    __int__ = __bool__ = __index__

    def __repr__(self) -> str:
        return f"scalar(r{self.register.id})"


def scalar(t) -> RuntimeScalar:
    """``nt.scalar(t)``: the one element of the integer tile ``t`` (at most 32-bit), read at
    run time; ``range`` over it is a runtime loop.

    Example:
        >>> for _ in range(scalar(n_sbuf)):                 # doctest: +SKIP
        ...     ...
    """
    call = Call("nt.scalar")
    flush()
    tile = value(t)
    dtype = getattr(tile, "dtype", None)
    if dtype is not None and dtype.is_int and (dtype.itemsize > 4 or dtype.name == "uint32"):
        raise call.error("nki_dtype_mismatch", f"the tile holds {dtype.name}; a loop bound is "
                         "a 32-bit signed integer (the loop is a 32-bit compare-and-branch)")
    reg = register_alloc()
    register_load(reg, tile)
    return RuntimeScalar(reg, "nt.scalar")


def runtime_range(*args):
    """``range`` in a kernel's module: Python's for ints, a runtime loop when a bound is a
    :class:`RuntimeScalar`."""
    if not any(isinstance(a, RuntimeScalar) for a in args):
        return builtins.range(*args)
    call = Call("range(scalar(...))")
    if len(args) not in (1, 2, 3):
        raise call.error("nki_invalid_argument", f"range takes 1 to 3 arguments, got "
                         f"{len(args)}")
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    if isinstance(step, RuntimeScalar) or isinstance(step, bool) or \
            not isinstance(step, int) or step <= 0:
        raise call.error("nki_invalid_argument", "the step of a runtime loop is a positive "
                         f"compile-time int, got {step!r}")
    lo, hi = (_bound(call, b) for b in (start, stop))
    return _loop(call, lo, hi, step)


def _bound(call: Call, b) -> int | Reg:
    if isinstance(b, RuntimeScalar):
        return Reg(b.register.id)
    if isinstance(b, bool) or not isinstance(b, int):
        raise call.error("nki_invalid_argument", f"a runtime loop's bounds are ints or "
                         f"scalar(tile), got {b!r}")
    return b


def _loop(call: Call, lo, hi, step: int):
    """Trace the body once into a ``DynFor``, as ``nl.dynamic_range`` does (a break/return
    leaves the body unfinished and the trace raises), with the legacy pending results
    emitted at its boundaries, so no instruction moves into or out of it, and no shared_hbm
    tensor created in it."""
    flush()
    var = _new_register(call)        # the induction register: the loop writes it
    _written(call.trace, var.id)
    st = state(call.api)
    st.user_loops += 1
    body = _dynamic_range_iter(call, var, lo, hi, step)
    try:
        for v in body:
            yield v
            flush()                  # inside the body, before it ends
    finally:
        body.close()
        st.user_loops -= 1


# ----- `range` is runtime_range in the modules that use scalar -------------------------------
def _is_user(f) -> bool:
    filename = f.__code__.co_filename
    return not filename.startswith(_NOT_USER) and \
        not str(f.__globals__.get("__name__", "")).startswith("nki")


def _uses_scalar(namespace: dict) -> bool:
    """Whether a module imported ``scalar``, or has ``nt`` and a function that says
    ``nt.scalar`` (many kernels import ``nt`` for annotations only: those stay untouched)."""
    from nki.legacy import typing as nt

    values = list(namespace.values())
    if any(v is scalar for v in values):
        return True
    return any(v is nt for v in values) and any(
        isinstance(v, types.FunctionType) and v.__globals__ is namespace and
        _names_scalar(v.__code__) for v in values)


def _names_scalar(code: types.CodeType) -> bool:
    return "scalar" in code.co_names or any(
        isinstance(c, types.CodeType) and _names_scalar(c) for c in code.co_consts)


def _reachable(root: dict) -> tuple[dict[int, dict], dict[int, set[int]]]:
    """The module namespaces reachable from ``root`` through user functions in them (by
    id), and which namespaces each one's functions lead to."""
    spaces, edges, todo = {id(root): root}, {}, [root]
    while todo:
        ns = todo.pop()
        out = edges.setdefault(id(ns), set())
        for v in list(ns.values()):
            if isinstance(v, types.FunctionType) and _is_user(v):
                g = v.__globals__
                out.add(id(g))
                if id(g) not in spaces:
                    spaces[id(g)] = g
                    todo.append(g)
    return spaces, edges


def _leading_to(targets: set[int], edges: dict[int, set[int]]) -> set[int]:
    """The namespaces from which one of ``targets`` is reachable (``targets`` included)."""
    need, grew = set(targets), True
    while grew:
        grew = False
        for src, dsts in edges.items():
            if src not in need and dsts & need:
                need.add(src)
                grew = True
    return need


def with_runtime_range(fn, copy_function):
    """``fn``, or a copy of it run from copies of the module namespaces that lead to a use
    of ``scalar``, in which ``range`` is :func:`runtime_range` and every user function of
    those modules is rebound to the copies. ``copy_function(f, code, namespace)`` makes
    the copies (``nki.legacy.early_exit``'s, which keeps defaults, closures and names)."""
    if not isinstance(fn, types.FunctionType):
        return fn
    spaces, edges = _reachable(fn.__globals__)
    users = {i for i, ns in spaces.items() if _uses_scalar(ns)}
    if not users:
        return fn
    need = _leading_to(users, edges)
    copies = {i: dict(spaces[i], range=runtime_range) for i in need}
    made: dict[int, types.FunctionType] = {}
    for i in need:
        for name, v in spaces[i].items():
            if isinstance(v, types.FunctionType) and id(v.__globals__) in copies:
                if id(v) not in made:
                    made[id(v)] = copy_function(v, v.__code__, copies[id(v.__globals__)])
                copies[i][name] = made[id(v)]
    return copy_function(fn, fn.__code__, copies[id(fn.__globals__)])
