"""Deferred results of legacy calls, and the per-trace state of the legacy dialect.

A legacy ``nl``/``nisa`` call returns a tile. Which memory that tile lives in depends on what
the kernel does with it: ``psum_tile[...] = nisa.nc_matmul(a, b)`` writes PSUM directly and
``acc[...] += nl.matmul(...)`` accumulates in place. So a call returns a :class:`Pending`:
its shape, dtype, default buffer, mask and a ``run(dst, **operands)`` that emits the
instruction(s) into a destination view through the current dialect's rules. It is emitted
once, either straight into an assignment's destination or, on any other use, into a fresh
tile of its default buffer (``materialize``).

Deferring must not reorder reads and writes: before anything is written through the legacy
layer, every live pending that reads the written tensor is materialised first.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from nki.ir.types import DType, Memory
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import Trace, current, user_loc
from nki.legacy.loops import LoopState
from nki.legacy.mask import rectangle, shrink
from nki.legacy.origin import call_at


class LegacyState:
    """What the legacy dialect remembers while one kernel traces."""

    def __init__(self):
        self.live: weakref.WeakSet = weakref.WeakSet()   # pendings not yet materialised
        self.zero_psum: set[int] = set()   # PSUM tensors that hold nl.zeros' zeros only
        self.grid: tuple[int, ...] = ()    # the SPMD launch grid
        self.program: tuple[int, ...] = ()  # this program's position in it
        self.user_loops = 0                # legacy loops open around the current call
        self.outputs: dict[int, NkiTensor] = {}   # shared_hbm tensors by creation order
        self.num_outputs = 0               # shared_hbm tensors created by this program
        self.serial = 0                    # pendings created so far (their order)
        self.loops = LoopState()           # open loops, first-iteration allocations


# per-trace state, keyed weakly by the Trace (it ends with the trace)
_STATES: weakref.WeakKeyDictionary[Trace, LegacyState] = weakref.WeakKeyDictionary()


def state(api: str = "") -> LegacyState:
    """The legacy state of the running trace."""
    trace = current(api)
    st = _STATES.get(trace)
    if st is None:
        st = _STATES[trace] = LegacyState()
    return st


def before_write(dst: NkiTensor, *, by_matmul: bool = False, exclude=None) -> None:
    """Materialise live pendings that read ``dst``'s tensor before it changes."""
    st = state()
    tid = dst.decl.id
    for p in list(st.live):
        if p is not exclude and tid in p.reads:
            p.materialize()
    if not by_matmul:
        st.zero_psum.discard(tid)


def flush() -> None:
    """Emit every live pending no assignment consumed, in creation order: called at loop
    and iteration boundaries so each instruction stays in the iteration that made it."""
    st = state()
    for p in sorted(st.live, key=lambda p: p.serial):
        if not p._emitted:
            p.materialize()


class Pending:
    """A legacy call's result, not yet emitted.

    Attributes:
        api: the call (for messages), shape/dtype/buffer: the result tile as NKI defines it,
        space: the iteration space the mask refers to (the result shape, or the input shape
        of a reduction), kind: ``"matmul"`` for TensorE matmul results (accumulable).
    """

    __slots__ = ("api", "shape", "dtype", "buffer", "operands", "run", "mask", "space",
                 "kind", "produce", "shrink_operands", "reads", "_tile", "_emitted", "serial",
                 "loc", "__weakref__")

    def __init__(self, api: str, shape, dtype: DType, buffer: Memory, operands: dict,
                 run: Callable | None, *, mask=None, space=None, kind: str = "",
                 produce: Callable | None = None, shrink_operands: bool = True):
        self.api, self.shape, self.dtype, self.buffer = api, tuple(shape), dtype, buffer
        self.operands, self.run, self.mask, self.kind = operands, run, mask, kind
        # produce(**operands) -> a fresh tile: for composites that allocate their own result
        self.produce = produce
        # False: the mask bounds the destination only (the call already bounded operands
        # whose dims are not the result's, as matmul's stationary and moving are)
        self.shrink_operands = shrink_operands
        self.space = tuple(space) if space is not None else self.shape
        self.reads = {v.decl.id for v in operands.values() if isinstance(v, NkiTensor)}
        self.loc = user_loc()    # the call's line: its instruction is emitted from there
        self._tile = None
        self._emitted = False    # written into an assignment's destination at least once
        # a bad mask, or an out-of-bounds index it does not cover, fails at the call
        rect = rectangle(mask, self.space, api)
        for k, v in (operands.items() if shrink_operands else ()):
            if rect is not None and getattr(v, "_oob", None) is not None:
                shrink(v, rect, self.space, k, api)
        st = state(api)
        st.serial += 1
        self.serial = st.serial
        st.live.add(self)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def emit_into(self, dst: NkiTensor, accumulate: bool = False) -> None:
        """Emit the instruction(s) writing this result into the view ``dst``."""
        before_write(dst, by_matmul=self.kind == "matmul", exclude=self)
        rect = rectangle(self.mask, self.space, self.api)
        if rect is None:
            return       # the mask is false everywhere: the compiler drops the instruction
        d = shrink(dst, rect, self.space, "dst", self.api)
        ops = {k: shrink(v, rect, self.space, k, self.api) if self.shrink_operands else v
               for k, v in self.operands.items()}
        self._emitted = True
        if self.kind == "matmul":
            ops["accumulate"] = accumulate
        if self.run is not None:
            call_at(self.loc, self.run, d, **ops)
            return
        from nki.legacy.tile import copy_into

        copy_into(d, call_at(self.loc, self.produce, **ops))

    def materialize(self):
        """The result as a tile of its default buffer (emitted on first use)."""
        if self._tile is None:
            from nki.legacy.tile import as_legacy, new_tile

            state().live.discard(self)
            if self.produce is not None and rectangle(self.mask, self.space, self.api) == {}:
                self._tile = as_legacy(call_at(self.loc, self.produce, **self.operands))
            else:
                # created where the call was written (its first use may be lines later):
                # errors and spill warnings name the tile by that line's variable
                self._tile = call_at(self.loc, new_tile, self.shape, self.dtype, self.buffer)
                self.emit_into(self._tile)
        return self._tile

    def __repr__(self) -> str:
        return f"Pending({self.api}, shape={self.shape}, dtype={self.dtype.name})"

    # a pending used like a tile is materialised first
    def __getattr__(self, name):
        return getattr(self.materialize(), name)

    def __getitem__(self, key):
        return self.materialize()[key]

    def __setitem__(self, key, value):
        self.materialize()[key] = value


def _forward(name: str):
    def op(self, *args):
        return getattr(self.materialize(), name)(*args)

    op.__name__ = name
    return op


def _no_host_value(self, *args):
    """``int(t)``/``float(t)`` of a tile: its values exist only when the kernel runs."""
    from nki.lang.tracer import validation

    raise validation("err_dynamic_control_flow_not_supported",
                     f"{self.api}'s result is a tile whose values are computed when the kernel "
                     f"runs; int()/float() of it is not known while tracing (keep it a tile: "
                     f"index with it, or pass it as an operand)")


Pending.__int__ = Pending.__float__ = _no_host_value


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__lshift__", "__rshift__", "__neg__",
              "__lt__", "__le__", "__gt__", "__ge__", "__and__", "__or__", "__xor__"):
    setattr(Pending, _name, _forward(_name))


def value(x):
    """A pending's materialised tile; anything else unchanged."""
    return x.materialize() if isinstance(x, Pending) else x
