"""Specialization: trace a kernel for concrete argument shapes, run the pass pipeline, and
generate the program of each core."""

from __future__ import annotations

import contextlib
import gc
import inspect
import warnings
from dataclasses import dataclass, field, replace

from nki.errors import NkiCapacityError, fail
from nki.ir.nodes import DYN_LOOPS, Access, Instr, Program, RecordedLoop, count_instrs, walk
from nki.ir.ops import Opcode
from nki.ir.printer import format_program
from nki.ir.target import Target
from nki.ir.types import Memory
from nki.jit.allocate import allocate, hbm_footprint
from nki.jit.args import TensorArg
from nki.jit.lower import lower
from nki.jit.races import check_races
from nki.jit.registers import number_registers
from nki.jit.reroll import reroll
from nki.lang.control import MAX_REGISTERS
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import Trace
from nki.sim.codegen import Generated, generate

PASSES = (("allocate", allocate), ("lower", lower), ("races", check_races), ("reroll", None))


@dataclass
class CoreProgram:
    """One core's traced, placed, rerolled program and its generated code."""

    program: Program
    constants: dict
    input_ids: list[int]
    output_ids: list[int]
    written_inputs: list[int]
    covered_outputs: frozenset[int] = frozenset()   # proven fully overwritten on every run
    files_read: tuple[str, ...] = ()                 # by the trace: not re-checkable
    _generated: Generated | None = field(default=None, repr=False)

    @property
    def generated(self) -> Generated:
        """The core's generated code, made on first use: a cost estimate reads only the
        program, and code generation loads every emitter (Numba, the BLAS shims)."""
        if self._generated is None:
            self._generated = generate(self.program)
        return self._generated


def _bind_inputs(trace: Trace, fn, args, tensor_args: dict[int, TensorArg], lnc: int):
    names = list(inspect.signature(fn).parameters)
    mem = Memory.SHARED_HBM if lnc > 1 else Memory.PRIVATE_HBM
    bound, ids = [], []
    for i, value in enumerate(args):
        ta = tensor_args.get(i)
        if ta is None:
            bound.append(value)
            continue
        name = names[i] if i < len(names) else f"arg{i}"
        decl = trace.new_tensor(mem, ta.array.shape or (1,), ta.dtype, name=name, role="input",
                                loc=None)
        ids.append(decl.id)
        bound.append(NkiTensor(decl))
    return bound, ids


def _outputs(result, trace: Trace, loc) -> tuple[list[int], tuple]:
    """The returned tensors' ids, and per output ``None`` or the view it was returned as:
    ``(element offset, shape, element strides, dtype)`` (``out.reshape(...)``, a slice)."""
    if result is None:
        return [], ()
    items = result if isinstance(result, (tuple, list)) else (result,)
    ids, views = [], []
    for r in items:
        if not isinstance(r, NkiTensor) or not r.buffer.is_hbm:
            raise fail("nki_kernel_return", "a kernel must return HBM tensors it created with "
                       f"buffer=nl.shared_hbm; got {r!r}", loc)
        ids.append(r.decl.id)
        views.append(_returned_view(r, loc))
    return ids, tuple(views)


def _returned_view(r: NkiTensor, loc):
    """None when ``r`` is its whole tensor as created, else how to view the output array."""
    if r.shape == r.decl.shape and r.dtype == r.decl.dtype and r.offset == 0 and \
            r.is_contiguous():
        return None
    if r.is_indirect() or not isinstance(r.offset, int):
        raise fail("nki_kernel_return", "a kernel may return a view of an HBM tensor only at a "
                   f"fixed place (no register offset or index tile); got {r!r}", loc)
    return (r.offset, tuple(r.shape), tuple(r.strides), r.dtype)


@dataclass(frozen=True)
class Launch:
    """How a specialization is launched: the LNC degree, the rank of a multi-rank run
    (``None``: the cores of the launch are the ranks), and the kernel's configs."""

    lnc: int = 1
    rank: tuple[int, int] | None = None        # (rank, world size)
    compile_config: object = None              # nki.compiler.CompileConfig or None
    specialization_config: object = None       # nki.compiler.SpecializationConfig or None
    schedule: tuple = ()                       # Kernel.with_schedule pairs (kept in meta)


def trace_core(fn, args, kwargs, tensor_args, target: Target, core: int,
               launch: Launch | int, settings) -> tuple[Program, Trace, list[int], list[int]]:
    from nki.lang.tracer import user_loc

    launch = Launch(launch) if isinstance(launch, int) else launch
    lnc = launch.lnc
    rank, world = launch.rank or (core, lnc)
    trace = Trace(fn.__name__, target, core=core, num_cores=lnc, rank=rank, world_size=world,
                  check_uninit=settings.check_uninit, precise_fp=settings.precise_fp)
    trace.launched_with_grid = lnc > 1
    trace.configs = (launch.compile_config, launch.specialization_config)
    with trace:
        bound, in_ids = _bind_inputs(trace, fn, args, tensor_args, lnc)
        result = fn(*bound, **kwargs)
        out_ids, views = _outputs(result, trace, user_loc())
    body = trace.body
    if trace.uninit_reads:
        body = insert_fresh_fills(body, set(trace.uninit_reads), trace.tensors)
    if trace.num_registers:
        body = number_registers(body, MAX_REGISTERS, trace.register_sites)
    meta = dict(trace.meta, schedule=launch.schedule) if launch.schedule else dict(trace.meta)
    if any(views):
        meta["output_views"] = views
    program = Program(fn.__name__, tuple(trace.tensors.values()), tuple(in_ids),
                      tuple(out_ids), tuple(body), target.name, core, lnc,
                      meta=tuple(meta.items()))
    return program, trace, in_ids, out_ids


def insert_fresh_fills(body: list, fresh: set[int], tensors: dict) -> list:
    """Before the first use of each tensor that is read before written, fill it with the
    NaN/4 sentinel a fresh tile holds (only such tensors pay for it)."""
    pending = set(fresh)

    def visit(stmts):
        out = []
        for s in stmts:
            if isinstance(s, RecordedLoop):
                out.append(replace(s, iterations=[visit(it) for it in s.iterations]))
                continue
            # a runtime loop runs its body many times: fill before the loop, once
            accs = ([a for x, _ in walk(s.body) if isinstance(x, Instr) for _, a, _ in
                     x.accesses()] if isinstance(s, DYN_LOOPS) else [a for _, a, _ in
                                                                      s.accesses()])
            for acc in accs:
                if acc.tensor in pending:
                    pending.discard(acc.tensor)
                    out.append(Instr(Opcode.FILL_UNINIT, (("dst", whole(tensors[acc.tensor])),),
                                     (), (), tensors[acc.tensor].loc))
            out.append(s)
        return out

    return visit(body)


def whole(decl) -> Access:
    """An Access covering a whole tensor in its own dtype."""
    from nki.lang.tensor import NkiTensor

    return NkiTensor(decl).access()


def run_passes(program: Program, target: Target, settings=None,
               private_base: int | None = None, compile_config=None) -> Program:
    program = place(program, target, private_base, compile_config)
    program = lower(program, target)
    program = check_races(program, target, affine=bool(getattr(settings, "check_races", False)))
    return reroll(program)


def place(program: Program, target: Target, private_base: int | None,
          compile_config=None) -> Program:
    """The allocation pass as the kernel's ``CompileConfig`` asks: ``Allocation.LINEAR``
    places by linear-scan live ranges; when those do not fit, ``nki_alloc_fallback``
    (default True) retries with the default placement, as AWS falls back to neuronx-cc's
    allocation, and ``nki_alloc_fallback=False`` raises the linear allocator's error."""
    if compile_config is None or not compile_config.linear:
        return allocate(program, target, private_base)
    try:
        return allocate(program, target, private_base, linear=True, spill=False)
    except NkiCapacityError as e:
        if not compile_config.nki_alloc_fallback:
            raise fail(e.code, "NKI allocation (Allocation.LINEAR, nki_alloc_fallback=False) "
                       f"ran out of memory: {e.detail}", e.loc, NkiCapacityError) from None
        warnings.warn_explicit(f"NKI allocation (Allocation.LINEAR) ran out of memory "
                               f"({e.code}); falling back to the default placement "
                               "(nki_alloc_fallback=True)", UserWarning,
                               e.loc.filename if e.loc else "<nki>", e.loc.lineno if e.loc else 0)
    return allocate(program, target, private_base)


def specialize_cores(fn, args, kwargs, tensor_args, target, launch: Launch, settings,
                     recorder=None) -> list[CoreProgram]:
    """Trace every core, then place and compile each. Tracing all cores first lets each
    core's private HBM scratch get its own range after the tensors the cores share.
    ``recorder`` (a context manager, e.g. the program cache's ``DependencyRecorder``) is
    active while the kernel's Python runs and not during the passes: its profile hook fires
    on every call and made them ~2x slower."""
    with _gc_paused():
        with recorder or contextlib.nullcontext():
            traced = [trace_core(fn, args, kwargs, tensor_args, target, core, launch, settings)
                      for core in range(launch.lnc)]
        _check_outputs_written(traced)
        sizes = [hbm_footprint(program) for program, *_ in traced]
        shared = max(s for s, _ in sizes)
        stride = max(p for _, p in sizes)
        return [_finish_core(t, target, settings, shared + core * stride,
                             launch.compile_config)
                for core, t in enumerate(traced)]


def _check_outputs_written(traced) -> None:
    """Each returned output must be written by some core of the launch. Under LNC a core
    whose share of the work is empty (``program_id`` past the last tile) writes nothing, and
    that is fine when the other core writes the output."""
    for pos, oid in enumerate(traced[0][3]):
        if all(trace.written_state_of(outs[pos]) == "none"
               for _, trace, _, outs in traced if pos < len(outs)):
            decl = traced[0][1].tensors[oid]
            raise fail("err_tensor_output_not_written_to",
                       f"kernel output {decl.name!r} is never written", decl.loc)


@contextlib.contextmanager
def _gc_paused():
    """No cyclic garbage collection while a kernel is traced and compiled. The trace and
    the passes allocate ~10^6 small acyclic objects that stay alive, so every full
    collection rescans a growing heap for nothing: flash attention S=8192 lowered in 1.1 s
    with collections and 0.5 s without (trace 3.5 -> 3.1 s), and found ~10 cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            _age_survivors()
            gc.enable()


def _age_survivors() -> None:
    """Move every tracked object to the oldest generation without scanning it. The objects
    a trace and its passes allocated sit in the youngest generation while collection is off,
    so the first young collection after it scanned them all (tiled matmul, 99k instructions:
    2.8 million objects, 1.1 s); they are long-lived, where a full collection finds them
    later. ``gc.freeze`` + ``gc.unfreeze`` is that move (two list splices); skipped when
    someone else has frozen objects, which unfreezing would release."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def _finish_core(traced, target, settings, private_base: int,
                 compile_config=None) -> CoreProgram:
    program, trace, in_ids, out_ids = traced
    written = sorted({acc.tensor for s, _ in walk(program.body) if hasattr(s, "writes")
                      for _, acc in s.writes} & set(in_ids))
    final = run_passes(program, target, settings, private_base, compile_config)
    final = replace(final, meta=final.meta + (("traced_instrs", count_instrs(program.body)),
                                              ("loop_budget", settings.loop_budget),
                                              ("row_chains", settings.row_chains)))
    covered = frozenset(t for t in out_ids if trace.fully_written(t))
    return CoreProgram(final, dict(trace.constants), in_ids, out_ids, written, covered,
                       tuple(trace.files_read))


def describe(core: CoreProgram) -> str:
    return format_program(core.program)
