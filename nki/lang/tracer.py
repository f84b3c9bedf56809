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

import contextlib
import contextvars
import os
import sys
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from nki.errors import NkiUnsupportedError, NkiValidationError, SourceLoc, fail
from nki.ir import types as irt
from nki.ir.nodes import Access, Instr, RecordedLoop, Stmt, TensorDecl
from nki.ir.ops import LoopKind, Opcode
from nki.ir.target import Target
from nki.ir.types import FLOAT32, DType, Memory
from nki.lang.byteflags import ByteFlags
from nki.lang.byteruns import ByteRuns

# dtypes NKI_PRECISE_FP=0 keeps in fp32 storage inside the kernel (AWS: "=0 uses fp32")
LOW_PRECISION_FLOATS = frozenset((irt.BFLOAT16, irt.FLOAT16, irt.FLOAT8_E4M3, irt.FLOAT8_E5M2,
                                  irt.FLOAT8_E4M3FN))

# what a view registers with Trace.on_first_use: runs before the consuming instruction,
# returns what runs after it (or None)
UseHook = Callable[[Instr], Callable[[], None] | None]

# instructions that overwrite their whole destination view, whatever its old bytes
_PLAIN_WRITERS = frozenset((Opcode.DMA_COPY, Opcode.DMA_TRANSPOSE))

_CURRENT: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("nki_trace", default=None)

_NKI_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_loc(skip_internal: bool = True) -> SourceLoc | None:
    """The innermost frame outside the nki package: the user's call site."""
    frame = sys._getframe(1)
    known = _INTERNAL if skip_internal else {}
    while frame is not None:
        code = frame.f_code
        # the memo read inline: ~5 frames are asked per traced call (rule, wrappers)
        internal = known.get(code.co_filename)
        if internal is None:
            internal = skip_internal and _is_internal(code.co_filename)
        if not internal:
            return _loc(code.co_filename, frame.f_lineno, code.co_name)
        frame = frame.f_back
    return None


_LOCS: dict[tuple[str, int, str], SourceLoc] = {}


def _loc(filename: str, lineno: int, function: str) -> SourceLoc:
    """One shared (immutable) SourceLoc per source line: a trace names the same few lines
    for ~10^5 instructions and tiles, and each kept its own copy in memory and in the
    program cache's pickle."""
    key = (filename, lineno, function)
    loc = _LOCS.get(key)
    if loc is None:
        if len(_LOCS) >= 65536:
            _LOCS.clear()
        loc = _LOCS[key] = SourceLoc(filename, lineno, function)
    return loc


_INTERNAL: dict[str, bool] = {}


def _is_internal(filename: str) -> bool:
    """Whether code from ``filename`` is nki's own (memoised: asked for several frames of
    every traced instruction; a file name's answer never changes)."""
    internal = _INTERNAL.get(filename)
    if internal is None:
        internal = os.path.abspath(filename).startswith(_NKI_DIR + os.sep)
        _INTERNAL[filename] = internal
    return internal


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
                 rank: int | None = None, world_size: int | None = None,
                 check_uninit: bool = False, precise_fp: bool = True):
        self.name = name
        self.target = target
        self.core = core
        self.num_cores = num_cores
        # the collective rank and world: the LNC cores themselves, unless a multi-rank run
        # (nki.multi_rank_simulate) makes each launch one rank of several
        self.rank = core if rank is None else rank
        self.world_size = num_cores if world_size is None else world_size
        # the top-level kernel's (CompileConfig, SpecializationConfig): nested kernels are
        # checked against them
        self.configs: tuple = (None, None)
        # a collective prepare (all_to_all_v_prepare, ...) waiting for its trigger
        self.pending_prepare = None
        self.check_uninit = check_uninit
        self.precise_fp = precise_fp
        self.tensors: dict[int, TensorDecl] = {}
        self.body: list[Stmt] = []
        self._stack: list[list[Stmt]] = [self.body]
        self._loops: list[RecordedLoop] = []
        self._written: dict[int, ByteFlags] = {}
        self._mm_written: dict[int, ByteFlags] = {}
        self.uninit_reads: dict[int, SourceLoc | None] = {}
        # tensors stored as fp32 under precise_fp=False: id -> the dtype the kernel declared
        self.widened: dict[int, DType] = {}
        self.constants: dict[int, np.ndarray] = {}
        self.launched_with_grid = False
        self.warnings: list[str] = []
        self.num_registers = 0                 # virtual registers allocated so far
        # registers some traced instruction writes (nki/lang/control.py: reads of others
        # warn), and where each was allocated
        self.written_registers: set[int] = set()
        self.register_sites: dict[int, SourceLoc | None] = {}
        self.open_while: list[tuple] = []      # 'while reg:' loops being traced
        self._use_hooks: dict[int, UseHook] = {}
        self._layouts: dict[int, tuple[Access, tuple]] = {}    # Trace._layout's recent answers
        # how-it-runs keywords of the public call being traced (Instr.hints), set by
        # Trace.hints around the call's rule and stamped on every instruction it emits
        self._hints: tuple[tuple[str, object], ...] = ()
        # what _stamp adds from _hints, worked out when they change (not per instruction)
        self._hint_extra: tuple[tuple[str, object], ...] = ()
        self._hint_name = ""
        self._labels = 0      # the last number next_label gave
        self.meta: dict = {}  # facts about the whole launch for Program.meta (spmd_grid)
        # outputs some write of which is not proven to overwrite its bytes on every run
        # (runtime offsets or loops, read-modify-writes, non-DMA writers)
        self.unproven_writes: set[int] = set()
        # tensors an nl function computed and returned as a value (nl.load, nl.add, ...):
        # their truth value is data, unlike a handle's (NkiTensor.__bool__)
        self.value_results: set[int] = set()
        # files the trace read (nl.shared_constant of a .npy path): the program cache cannot
        # re-check them, so a program that read one is never stored on disk
        self.files_read: list[str] = []
        self._runtime_loops = 0                # runtime loop bodies being traced
        # bodies of runtime loops traced by a generator or a 'with' block (begin_dyn's
        # site), by id(body): (body, loc, api) until the body is traced whole
        self._left: dict[int, tuple[list[Stmt], SourceLoc | None, str]] = {}
        self._token: contextvars.Token | None = None

    # ----- context -------------------------------------------------------------------------
    def __enter__(self) -> Trace:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _CURRENT.reset(self._token)
        if exc[0] is None:
            self._check_left_loops()
        elif self._left:          # an error leaving the kernel keeps its own message
            self._note_open_loops(exc[1])
        if exc[0] is None and self.pending_prepare is not None:
            api, loc = self.pending_prepare[1:]
            raise fail("nki_invalid_argument", f"{api} is never triggered: each prepare must "
                       "be followed by exactly one trigger before the kernel ends", loc)

    # ----- tensors -------------------------------------------------------------------------
    def new_tensor(self, memory: Memory, shape: tuple[int, ...], dtype: DType, *,
                   name: str = "", role: str = "internal", loc: SourceLoc | None = None,
                   address: tuple[int, int] | None = None) -> TensorDecl:
        tid = len(self.tensors)
        site = (loc.filename, loc.lineno) if loc else ()
        storage = self._storage_dtype(memory, dtype, role, address)
        if storage is not dtype:
            self.widened[tid] = dtype
        decl = TensorDecl(tid, name or f"t{tid}", memory, tuple([int(s) for s in shape]), storage,
                          role, loc, address, address is not None, site)
        self.tensors[tid] = decl
        if self._loops:
            self._loops[-1].tensors[-1].append(tid)
        if role in ("internal", "output"):
            shape = (decl.partitions, decl.bytes_per_partition)
            # a tensor placed by address= may alias another: what is written through one is
            # read through the other, so it is never treated as fresh
            if address is None:
                # HBM tensors can be GiBs: their written bytes are kept as intervals
                self._written[tid] = (ByteRuns if memory.is_hbm else ByteFlags)(shape)
            if memory is Memory.PSUM:
                self._mm_written[tid] = ByteFlags(shape)
        return decl

    def _storage_dtype(self, memory: Memory, dtype: DType, role: str,
                       address: tuple[int, int] | None) -> DType:
        """The dtype a new tensor is stored as. With precise_fp off, low-precision floats
        inside the kernel (on chip, internal HBM) are kept in fp32 so precision loss can be
        told apart from algorithm bugs; kernel inputs/outputs keep their dtype (the DMA
        converts at the boundary) and ``address=`` tiles keep theirs (they alias bytes)."""
        if self.precise_fp or dtype not in LOW_PRECISION_FLOATS or address is not None:
            return dtype
        if memory.on_chip or (memory is Memory.PRIVATE_HBM and role == "internal"):
            return FLOAT32
        return dtype

    def _storage_access(self, acc: Access, api: str, loc: SourceLoc | None) -> Access:
        """An operand of a widened tensor, addressed in its fp32 storage (same elements)."""
        logical = self.widened.get(acc.tensor)
        if logical is None:
            return acc
        if acc.dtype != logical:
            raise fail("nki_not_implemented", f"{api}: a {acc.dtype.name} view of the "
                       f"{logical.name} tensor {self.tensors[acc.tensor].name!r} reinterprets "
                       "its bits, which NKI_PRECISE_FP=0 (fp32 storage) cannot do; run with "
                       "NKI_PRECISE_FP=1", loc, NkiUnsupportedError)
        return replace(acc, dtype=FLOAT32)

    def rename(self, tid: int, name: str) -> None:
        self.tensors[tid] = replace(self.tensors[tid], name=name)

    @property
    def in_loop(self) -> bool:
        """Inside a recorded loop or a runtime loop's body (a nested statement list)."""
        return bool(self._loops) or len(self._stack) > 1

    # ----- write tracking --------------------------------------------------------------------
    def _layout(self, acc: Access, rowbytes: int) -> tuple[int, tuple, tuple]:
        """(first byte, shape, byte strides) of the bytes ``acc`` touches in its tensor's
        flag table (``rowbytes`` bytes per partition row, fixed per tensor). The last few
        answers are kept by operand identity: an instruction's rule and :meth:`emit` ask
        for the same operand (``NkiTensor.access`` keeps it) up to four times."""
        hit = self._layouts.get(id(acc))
        if hit is not None and hit[0] is acc:
            return hit[1]
        layout = self._layout_of(acc, rowbytes)
        if len(self._layouts) >= 16:
            self._layouts.clear()
        self._layouts[id(acc)] = (acc, layout)   # the operand is kept: its id stays its own
        return layout

    def _layout_of(self, acc: Access, rowbytes: int) -> tuple[int, tuple, tuple]:
        decl = self.tensors[acc.tensor]
        # a widened tensor's table counts fp32 bytes; its views count the same elements
        isz = decl.dtype.itemsize if acc.tensor in self.widened else acc.dtype.itemsize
        base = acc.partition.const * rowbytes + acc.offset.const * isz
        dims = acc.dims if decl.memory.on_chip else ((0, 1),) + acc.dims
        # plain loops, no generator expressions: this runs for every operand traced
        shape = [c for _, c in dims]
        strides = [dims[0][0] * rowbytes if decl.memory.on_chip else 0]
        for s, _ in dims[1:]:
            strides.append(s * isz)
        return base, (*shape, isz), (*strides, 1)

    def record_write(self, acc: Access, by_matmul: bool = False, dynamic: bool = False) -> None:
        # a write whose place is known only at run time may touch any byte of the tensor
        whole = dynamic or _dynamic(acc)
        flags = self._written.get(acc.tensor)
        if flags is not None:
            flags.set(None if whole else self._layout(acc, flags.shape[1]), True)
        # PSUM placed by address= has no fresh-bytes table but still tracks its matmul
        # writes, or accumulate=None would restart the accumulation group at every matmul
        mm = self._mm_written.get(acc.tensor)
        if mm is not None:
            mm.set(None if whole else self._layout(acc, mm.shape[1]), by_matmul)

    def written_state(self, acc: Access, matmul: bool = False) -> str:
        """``"all"``, ``"none"`` or ``"some"`` of the bytes of ``acc`` written (by a matmul)."""
        flags = (self._mm_written if matmul else self._written).get(acc.tensor)
        if flags is None:
            return "all"
        return flags.state(None if _dynamic(acc) else self._layout(acc, flags.shape[1]))

    def written_state_of(self, tid: int) -> str:
        """Whether any byte of a whole tensor was written: ``"all"``, ``"some"``, ``"none"``."""
        flags = self._written.get(tid)
        return "all" if flags is None else flags.state(None)

    def check_read(self, role: str, acc: Access, api: str, loc: SourceLoc | None) -> None:
        """Note (or, with check_uninit, reject) a read of never-written on-chip bytes."""
        decl = self.tensors[acc.tensor]
        if not decl.memory.on_chip or self.written_state(acc) == "all":
            return
        if self.check_uninit:
            raise fail("nki_uninitialized_read",
                       f"{api}: operand {role!r} reads tensor {decl.user_name!r} "
                       f"(created at {decl.loc}) before it was written", loc)
        self.uninit_reads.setdefault(acc.tensor, loc)

    # ----- statements ----------------------------------------------------------------------
    def on_first_use(self, tid: int, hook: UseHook) -> None:
        """Run ``hook`` around the first instruction emitted that reads or writes tensor
        ``tid``: the post-emit hook through which a view contributes extra reads and writes.

        A view that is not a strided window (trn3 tensor indirection) hands its consumer a
        hidden tensor ``tid`` and registers a hook. ``hook(instr)`` runs before ``instr`` is
        recorded, so what it emits comes first (a gather into ``tid`` when ``instr`` reads
        it); it may return a callable that runs right after ``instr`` (a scatter out of
        ``tid`` when ``instr`` writes it). The hook is removed before it runs, so its own
        instructions may use ``tid`` freely; errors it raises carry ``instr.loc``.

        Example:
            >>> trace.on_first_use(tmp.id, lambda ins: scatter_back)  # doctest: +SKIP
        """
        self._use_hooks[tid] = hook

    def _run_use_hooks(self, instr: Instr) -> list[Callable[[], None]]:
        """Pop and run the hooks of the tensors ``instr`` touches; their post parts."""
        hooks = [self._use_hooks.pop(a.tensor) for _, a, _ in instr.accesses()
                 if a.tensor in self._use_hooks]
        return [post for post in (hook(instr) for hook in hooks) if post is not None]

    def emit(self, instr: Instr, *, by_matmul: bool = False, api: str = "",
             reads_dst: bool = False) -> Instr:
        """Append an instruction after its rule passed; updates write tracking. Hooks a
        view registered with :meth:`on_first_use` run around it. ``reads_dst``: the
        instruction also reads what it writes (an accumulating matmul adds to its PSUM), so
        never-written bytes there read as the fresh-tile sentinel, not stale memory."""
        instr = self._stamp(instr, api)
        _check_not_empty(instr, api)
        post = self._run_use_hooks(instr) if self._use_hooks else ()
        if self.widened:
            name = api or instr.opcode.name.lower()
            instr = instr.map_accesses(lambda a: self._storage_access(a, name, instr.loc))
        indirect = instr.attr("indirect", ())
        if indirect or any([_dynamic(a) for _, a, _ in instr.accesses()]):
            from nki.lang.control import dynamic_checks

            instr = dynamic_checks(self, instr)
        reads = instr.reads + (instr.writes if reads_dst else ())
        for role, acc in reads:
            if role not in indirect:     # rows chosen at run time: no trace-time tracking
                self.check_read(role, acc, api or instr.opcode.name.lower(), instr.loc)
        for role, acc in instr.writes:
            self.record_write(acc, by_matmul=by_matmul, dynamic=role in indirect)
            if not self._plain_overwrite(instr, role, acc, indirect):
                self.unproven_writes.add(acc.tensor)
        self._stack[-1].append(instr)
        for after in post:
            after()
        return instr

    def next_label(self) -> int:
        """A fresh number naming one instruction (the producer of a ``depends_on`` edge)."""
        self._labels += 1
        return self._labels

    @contextlib.contextmanager
    def hints(self, **hints):
        """Record ``hints`` (None values dropped) on every instruction emitted inside the
        block: a public stub wraps its rule in it, so the engine, DMA mode, priority and
        ``name=`` a kernel gave reach the IR however the rule builds its instructions.

        Example:
            >>> with call.trace.hints(engine=eng, name=name):  # doctest: +SKIP
            ...     return _emit(...)
        """
        old = self._hints, self._hint_extra, self._hint_name
        merged = dict(self._hints)
        merged.update((k, v) for k, v in hints.items() if v is not None and v != "")
        self._hints = tuple(merged.items())
        self._hint_extra = tuple((k, v) for k, v in self._hints if k != "name")
        self._hint_name = merged.get("name", "")
        try:
            yield
        finally:
            self._hints, self._hint_extra, self._hint_name = old

    def _stamp(self, instr: Instr, api: str) -> Instr:
        """``instr`` with the active hints and its public API recorded (a name hint fills
        an empty ``Instr.name``; a rule's own hints win over the block's)."""
        extra = self._hint_extra + (("api", api),) if api else self._hint_extra
        name = instr.name or self._hint_name
        if not extra and name == instr.name:
            return instr
        if instr.hints:
            own = {k for k, _ in instr.hints}
            hints = tuple([kv for kv in extra if kv[0] not in own]) + instr.hints
        else:
            hints = extra
        # the constructor, not dataclasses.replace (which re-reads the fields each call)
        return Instr(instr.opcode, instr.writes, instr.reads, instr.attrs, instr.loc, name,
                     hints)

    def _plain_overwrite(self, instr: Instr, role: str, acc: Access, indirect) -> bool:
        """Whether ``instr`` certainly overwrites every byte of ``acc`` whenever the kernel
        runs: a DMA copy or transpose at a trace-time address, outside runtime loops, that
        does not read its destination."""
        return (instr.opcode in _PLAIN_WRITERS and role not in indirect and not _dynamic(acc)
                and not self._runtime_loops
                and all(a.tensor != acc.tensor for _, a in instr.reads))

    def fully_written(self, tid: int) -> bool:
        """Whether every byte of tensor ``tid`` is overwritten on every run (so the NaN
        sentinel of never-written output memory need not be laid down first)."""
        return tid not in self.unproven_writes and self.written_state_of(tid) == "all"

    def append(self, stmt: Stmt) -> None:
        """Append a finished statement (a runtime loop node) to the current block."""
        self._stack[-1].append(stmt)

    def begin_dyn(self, site: tuple[SourceLoc | None, str] | None = None) -> list[Stmt]:
        """Start collecting the body of a runtime loop; returns the body list. ``site``
        (the loop's line and API) is given by a loop whose body the kernel's own ``for`` or
        ``with`` statement traces (a generator, a context manager): a ``break``/``return``
        can leave that body early, Python then closes the generator (where an error would
        be lost), so the body counts as left until ``end_dyn(body, whole=True)``, and the
        end of the trace raises for it (:meth:`_check_left_loops`)."""
        body: list[Stmt] = []
        self._stack.append(body)
        self._runtime_loops += 1
        if site is not None:
            self._left[id(body)] = (body, *site)
        return body

    def end_dyn(self, body: list[Stmt], whole: bool = True) -> None:
        """Close the body ``begin_dyn`` opened; ``whole``: it was traced to its end."""
        if whole:
            self._left.pop(id(body), None)
        if self._stack[-1] is not body:
            raise fail("err_dynamic_control_flow_not_supported", "a runtime loop's body "
                       "was left while another loop was still open", user_loc())
        self._stack.pop()
        self._runtime_loops -= 1

    def _check_left_loops(self) -> None:
        """Raise for the first runtime loop whose body was not traced whole: the machine
        runs the body as traced on every iteration and has no early exit, so the kernel
        would silently compute something other than its source says."""
        if not self._left:
            return
        _, loc, api = next(iter(self._left.values()))
        how = "a break or return left it while its body was traced (or the kernel caught " \
              "an error raised in it)"
        if api == "while reg":
            how = "its register was never tested again: the truth value was tested outside " \
                  "a 'while' loop (e.g. 'if reg:'; registers only drive runtime loops), or " + how
        detail = (f"the runtime loop {api!r} is not traced whole: {how}; the machine runs the "
                  "traced body whole on every iteration and cannot stop early, so bound the "
                  "loop or predicate the work instead")
        raise fail("err_dynamic_control_flow_not_supported", detail, loc)

    def _note_open_loops(self, exc: BaseException) -> None:
        """Add a note to an error raised while a runtime loop's body was open: a
        ``break``/``return`` that leaves ``while reg:`` (or a loop generator the kernel keeps)
        leaves the body open, so what the kernel traces next lands in it and may fail."""
        stacked = {id(b) for b in self._stack}
        open_ = [(loc, api) for key, (_, loc, api) in self._left.items() if key in stacked]
        if open_ and hasattr(exc, "add_note"):          # Python 3.11+
            loc, api = open_[-1]
            exc.add_note(f"note: the body of the runtime loop {api!r} at {loc} was still open "
                         "when this error was raised (a break or return out of it leaves it "
                         "open, and what the kernel traces next goes into it)")

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


def _dynamic(acc: Access) -> bool:
    """Whether a register moves the access at run time (register terms: negative slots)."""
    for s, _ in acc.offset.terms:     # a loop, not any(genexpr): called per traced operand
        if s < 0:
            return True
    return False


def validation(code: str, detail: str, loc: SourceLoc | None = None) -> NkiValidationError:
    """Shorthand used by rules: an error at the user's current call site."""
    return fail(code, detail, loc or user_loc())


__all__ = ["Trace", "current", "active", "user_loc", "validation", "Opcode"]


def _check_not_empty(instr: Instr, api: str) -> None:
    """An operand view with no elements (``t[0:0]``, ``nl.ds(i, 0)``) may exist, but no
    instruction may use one."""
    for role, a, _ in instr.accesses():
        if any(count == 0 for _, count in a.dims):
            raise validation("err_tensor_access_out_of_bound",
                             f"{api or instr.opcode.name.lower()}: operand {role!r} is an "
                             f"empty view (shape {tuple(c for _, c in a.dims)})", instr.loc)
