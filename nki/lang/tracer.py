"""The tracer: the only code that creates IR while a kernel's Python runs.

A :class:`Trace` is installed in a ``ContextVar`` for the duration of one trace (set and reset
in ``finally``). Rules in the op families call :func:`current` and hand finished
:class:`~nki.ir.nodes.Instr` nodes to :meth:`Trace.emit`.

Because new-dialect loops are unrolled by Python, every access is concrete while tracing. The
trace therefore keeps, per tensor instance and per byte, whether it has been written (and, for
PSUM, whether a matmul wrote it). That resolves ``nc_matmul(accumulate=None)`` and "fresh tile
reads NaN" into explicit flags at trace time, with no runtime bookkeeping.
"""

from __future__ import annotations

import contextvars
import os
import sys
from dataclasses import replace

import numpy as np

from nki.errors import NkiValidationError, SourceLoc, fail
from nki.ir.nodes import Access, Instr, RecordedLoop, Stmt, TensorDecl
from nki.ir.ops import LoopKind, Opcode
from nki.ir.target import Target
from nki.ir.types import DType, Memory

_CURRENT: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("nki_trace", default=None)

_NKI_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_loc(skip_internal: bool = True) -> SourceLoc | None:
    """The innermost frame outside the nki package: the user's call site."""
    frame = sys._getframe(1)
    while frame is not None:
        fname = frame.f_code.co_filename
        if not (skip_internal and os.path.abspath(fname).startswith(_NKI_DIR + os.sep)):
            return SourceLoc(fname, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return None


def current(api: str = "") -> Trace:
    """The active trace, or err_nki_api_outside_of_nki_kernel."""
    trace = _CURRENT.get()
    if trace is None:
        raise fail("err_nki_api_outside_of_nki_kernel",
                   f"{api or 'this API'} was called outside an @nki.jit kernel", user_loc())
    return trace


def active() -> Trace | None:
    return _CURRENT.get()


class Trace:
    """Everything recorded while one kernel's Python runs for one core."""

    def __init__(self, name: str, target: Target, *, core: int = 0, num_cores: int = 1,
                 check_uninit: bool = False, precise_fp: bool = True):
        self.name = name
        self.target = target
        self.core = core
        self.num_cores = num_cores
        self.check_uninit = check_uninit
        self.precise_fp = precise_fp
        self.tensors: dict[int, TensorDecl] = {}
        self.body: list[Stmt] = []
        self._stack: list[list[Stmt]] = [self.body]
        self._loops: list[RecordedLoop] = []
        self._written: dict[int, np.ndarray] = {}
        self._mm_written: dict[int, np.ndarray] = {}
        self.uninit_reads: dict[int, SourceLoc | None] = {}
        self.constants: dict[int, np.ndarray] = {}
        self.launched_with_grid = False
        self.warnings: list[str] = []
        self._token: contextvars.Token | None = None

    # ----- context -------------------------------------------------------------------------
    def __enter__(self) -> Trace:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _CURRENT.reset(self._token)

    # ----- tensors -------------------------------------------------------------------------
    def new_tensor(self, memory: Memory, shape: tuple[int, ...], dtype: DType, *,
                   name: str = "", role: str = "internal", loc: SourceLoc | None = None,
                   address: tuple[int, int] | None = None) -> TensorDecl:
        tid = len(self.tensors)
        site = (loc.filename, loc.lineno) if loc else ()
        decl = TensorDecl(tid, name or f"t{tid}", memory, tuple(int(s) for s in shape), dtype,
                          role, loc, address, address is not None, site)
        self.tensors[tid] = decl
        if self._loops:
            self._loops[-1].tensors[-1].append(tid)
        if role in ("internal", "output"):
            table = np.zeros((decl.partitions, decl.bytes_per_partition), np.bool_)
            # a tensor placed by address= may alias another: what is written through one is
            # read through the other, so it is never treated as fresh
            if address is None:
                self._written[tid] = table
            if memory is Memory.PSUM:
                self._mm_written[tid] = np.zeros_like(table)
        return decl

    def rename(self, tid: int, name: str) -> None:
        self.tensors[tid] = replace(self.tensors[tid], name=name)

    @property
    def in_loop(self) -> bool:
        return bool(self._loops)

    # ----- write tracking --------------------------------------------------------------------
    def _byte_view(self, table: np.ndarray, acc: Access) -> np.ndarray:
        """A strided view of a per-byte flag table covering exactly the bytes ``acc`` touches."""
        decl = self.tensors[acc.tensor]
        isz = acc.dtype.itemsize
        rowbytes = table.shape[1]
        base = acc.partition.const * rowbytes + acc.offset.const * isz
        dims = acc.dims if decl.memory.on_chip else ((0, 1),) + acc.dims
        shape = tuple(c for _, c in dims) + (isz,)
        first = dims[0][0] * rowbytes if decl.memory.on_chip else 0
        strides = (first,) + tuple(s * isz for s, _ in dims[1:]) + (1,)
        flat = table.reshape(-1)
        return np.lib.stride_tricks.as_strided(flat[base:], shape=shape, strides=strides)

    def record_write(self, acc: Access, by_matmul: bool = False) -> None:
        table = self._written.get(acc.tensor)
        if table is None:
            return
        self._byte_view(table, acc)[...] = True
        mm = self._mm_written.get(acc.tensor)
        if mm is not None:
            self._byte_view(mm, acc)[...] = by_matmul

    def written_state(self, acc: Access, matmul: bool = False) -> str:
        """``"all"``, ``"none"`` or ``"some"`` of the bytes of ``acc`` written (by a matmul)."""
        table = (self._mm_written if matmul else self._written).get(acc.tensor)
        if table is None:
            return "all"
        view = self._byte_view(table, acc)
        if view.all():
            return "all"
        return "some" if view.any() else "none"

    def written_state_of(self, tid: int) -> str:
        """Whether any byte of a whole tensor was written: ``"all"``, ``"some"``, ``"none"``."""
        table = self._written.get(tid)
        if table is None or table.all():
            return "all"
        return "some" if table.any() else "none"

    def check_read(self, role: str, acc: Access, api: str, loc: SourceLoc | None) -> None:
        """Note (or, with check_uninit, reject) a read of never-written on-chip bytes."""
        decl = self.tensors[acc.tensor]
        if not decl.memory.on_chip or self.written_state(acc) == "all":
            return
        if self.check_uninit:
            raise fail("nki_uninitialized_read",
                       f"{api}: operand {role!r} reads tensor {decl.name!r} "
                       f"(created at {decl.loc}) before it was written", loc)
        self.uninit_reads.setdefault(acc.tensor, loc)

    # ----- statements ----------------------------------------------------------------------
    def emit(self, instr: Instr, *, by_matmul: bool = False, api: str = "") -> Instr:
        """Append an instruction after its rule passed; updates write tracking."""
        for role, acc in instr.reads:
            self.check_read(role, acc, api or instr.opcode.name.lower(), instr.loc)
        for _, acc in instr.writes:
            self.record_write(acc, by_matmul=by_matmul)
        self._stack[-1].append(instr)
        return instr

    def begin_loop(self, kind: LoopKind, loc: SourceLoc | None) -> RecordedLoop:
        rec = RecordedLoop(kind, loc)
        self._stack[-1].append(rec)
        self._loops.append(rec)
        return rec

    def begin_iteration(self, rec: RecordedLoop) -> None:
        if self._stack[-1] is not self.body and rec.iterations and \
                self._stack[-1] is rec.iterations[-1]:
            self._stack.pop()
        rec.iterations.append([])
        rec.tensors.append([])
        self._stack.append(rec.iterations[-1])

    def end_loop(self, rec: RecordedLoop) -> None:
        if rec.iterations and self._stack[-1] is rec.iterations[-1]:
            self._stack.pop()
        if self._loops and self._loops[-1] is rec:
            self._loops.pop()


def validation(code: str, detail: str, loc: SourceLoc | None = None) -> NkiValidationError:
    """Shorthand used by rules: an error at the user's current call site."""
    return fail(code, detail, loc or user_loc())


__all__ = ["Trace", "current", "active", "user_loc", "validation", "Opcode"]
