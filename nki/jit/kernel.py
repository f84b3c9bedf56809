"""``nki.jit``: the Kernel object, launches, and the call path numpy/torch in → out."""

from __future__ import annotations

import collections
import functools
import inspect
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from nki.config import Settings, from_environment
from nki.cost.record import observe
from nki.errors import NkiValidationError, fail
from nki.ir.nodes import data_dependence
from nki.ir.printer import format_program
from nki.ir.target import get_target
from nki.jit.args import (
    TensorArg,
    flat_signature,
    is_tensor,
    keyword_adapter,
    refuse_shape_only,
    signature_of,
    tensor_args,
    wrap_output,
    write_back,
)
from nki.jit.cache import DependencyRecorder, ProgramCache, spec_key
from nki.jit.configs import check_configs, inline_nested
from nki.jit.hbm import hbm_for_call, keep_arena, lay_out, returned_arrays, written_inputs
from nki.jit.races import check_core_races
from nki.jit.specialize import CoreProgram, Launch, specialize_cores
from nki.jit.torch_values import REAL, fake_outputs, kernel_created
from nki.lang.tracer import active, user_loc
from nki.sim.runtime import Executable, run_cores
from nki.sim.tier import TierSwitch

# keywords AWS's nki.jit accepts that do not change how we simulate
_AWS_KWARGS = {"mode", "show_compiler_tb",
               "additional_compile_opt", "experimental_flags",
               "kernel_return", "debug_kernel", "enable_out_of_bound_check", "save_neff_name",
               "save_trace_name", "artifacts_dir", "working_directory", "overwrite",
               "profile_nth", "warmup", "iters", "compiler_args"}


@dataclass
class Specialization:
    """A kernel specialized for concrete arguments: its IR and generated source per core."""

    cores: list[CoreProgram]
    settings: Settings
    # warnings the trace raised (message, category, file, line): replayed when the program
    # is loaded from the disk cache, so a warm process warns exactly like a cold one
    warnings: list = field(default_factory=list)
    # the kernel's nki.compiler.CompileConfig (None: the default), recorded as given
    compile_config: object = None

    def replay_warnings(self) -> None:
        for message, category, filename, lineno in self.warnings:
            warnings.warn_explicit(message, category, filename, lineno)

    @property
    def ir(self) -> str:
        """The rerolled, placed IR of every core, as text."""
        return "\n\n".join(format_program(c.program) for c in self.cores)

    @property
    def source(self) -> str:
        """The generated Python of every core."""
        return "\n\n".join(c.generated.source for c in self.cores)

    @property
    def num_instructions(self) -> int:
        return sum(len(c.generated.origins) for c in self.cores)


#: specializations a kernel keeps in memory (the most recently used; older ones reload from
#: the disk cache). Unbounded, a kernel called at hundreds of shapes (a parametrized test
#: suite: nki-library's) held every traced program and its machine code to the end.
SPECIALIZATIONS_KEPT = 16


class _Recent:
    """The ``size`` most recently used entries of a dict (one lock: kernels are called from
    several threads, e.g. the ranks of a multi-rank run)."""

    def __init__(self, size: int):
        self.size = size
        self._entries: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key, value) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class Kernel:
    """What ``@nki.jit`` returns. Call it with numpy arrays or torch tensors.

    ``kernel[2](...)`` launches it on two logical cores (LNC 2). Our execution keywords:
    ``backend="numba"|"python"``, ``target="trn1"|"trn2"|"trn3"`` (also AWS's
    ``platform_target=``), ``check_uninit=True``, ``check_races=True``, ``precise_fp=False``.
    """

    # the release whose compiler refuses a ``*`` in a kernel's signature (migration guide,
    # "Remove keyword-only argument separator"): earlier ones took it, so it still runs
    keyword_only_dropped_in: str | None = "NKI 0.3.0 (Neuron 2.29)"

    def __init__(self, fn, **options):
        functools.update_wrapper(self, fn)
        self.fn = fn
        if "platform_target" in options:
            options.setdefault("target", options.pop("platform_target"))
        self.compile_config, self.specialization_config = check_configs(
            options.pop("compile_config", None), options.pop("specialization_config", None))
        unknown = set(options) - _AWS_KWARGS - set(Settings.__dataclass_fields__)
        if unknown:
            raise TypeError(f"nki.jit got unexpected keyword(s) {sorted(unknown)}")
        self.options = {k: v for k, v in options.items() if k not in _AWS_KWARGS}
        self._lnc = 1
        self._cache = _Recent(SPECIALIZATIONS_KEPT)
        self._last_record: list = [None]   # shared with kernel[2] clones (last_run_record)
        self._flat_views: dict = {}         # shared too: _flat_view per (LNC, schedule)
        kernel_created(self)
        _warn_keyword_only(fn, self.keyword_only_dropped_in)

    def __getitem__(self, grid) -> Kernel:
        lnc = grid[0] if isinstance(grid, tuple) and len(grid) == 1 else grid
        if not isinstance(lnc, int) or lnc not in (1, 2):
            raise fail("nki_lnc_degree", f"kernel[{grid!r}]: the launch takes one LNC degree, "
                       "1 or 2", user_loc())
        clone = Kernel.__new__(Kernel)
        clone.__dict__.update(self.__dict__)
        clone._lnc = lnc
        kernel_created(clone)
        return clone

    def with_schedule(self, schedule) -> Kernel:
        """AWS's scheduling hints: ``[(name_after, name_before_or_names), ...]`` over the
        ``name=`` of ISA calls. The simulator runs instructions in program order, so any
        order the hints ask for already holds; they are checked for shape and kept.

        Example:
            >>> k2 = kernel.with_schedule([("store_out", "matmul_0")])  # doctest: +SKIP
        """
        pairs = []
        for item in schedule:
            if not (isinstance(item, (tuple, list)) and len(item) == 2
                    and isinstance(item[0], str)
                    and (isinstance(item[1], str) or all(isinstance(n, str) for n in item[1]))):
                raise fail("nki_invalid_argument", f"with_schedule: {item!r} is not a pair "
                           "(instruction name, name or list of names)", user_loc())
            pairs.append((item[0], item[1] if isinstance(item[1], str) else tuple(item[1])))
        clone = Kernel.__new__(Kernel)
        clone.__dict__.update(self.__dict__)
        clone.schedule = tuple(pairs)
        return clone

    def settings(self, **overrides) -> Settings:
        return from_environment().with_overrides(**{**self.options, **overrides})

    @functools.cached_property
    def _signature(self) -> inspect.Signature:
        """The kernel function's signature (computed once: every call binds against it)."""
        return inspect.signature(self.fn)

    @functools.cached_property
    def _keyword_only(self) -> tuple[str, ...]:
        """The kernel's keyword-only parameters, which the call path passes positionally
        after the positional ones, so a tensor among them is a kernel tensor like the others
        (none in a kernel with ``*args``: its count of positional arguments varies)."""
        params = self._signature.parameters.values()
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            return ()
        return tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY)

    @functools.cached_property
    def _traced(self):
        """The function the trace calls with the positional form of a call (``_positional``):
        the kernel's own, or an adapter handing keyword-only parameters back by name."""
        if not self._keyword_only:
            return self.fn
        positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                         for p in self._signature.parameters.values())
        return keyword_adapter(self.fn, positional, self._keyword_only)

    def _flat_view(self) -> Kernel:
        """This kernel taking its keyword-only parameters positionally, as the call path
        passes them: what a ``torch.compile`` graph node calls again with a call's positional
        form (``nki.torch.jit_ops``). The kernel itself when it has none; one per launch."""
        if not self._keyword_only:
            return self
        key = (self._lnc, getattr(self, "schedule", ()))
        view = self._flat_views.get(key)
        if view is None:
            view = Kernel.__new__(type(self))
            view.__dict__.update(self.__dict__)
            for cached in ("_signature", "_keyword_only", "_traced"):
                view.__dict__.pop(cached, None)
            view.fn = flat_signature(self._traced, self._signature)
            view = self._flat_views.setdefault(key, view)
        return view

    def _positional(self, args, kwargs) -> tuple[tuple, dict]:
        """Arguments with every named parameter made positional (defaults filled in;
        keyword-only ones after the others, in signature order), so tensors passed by
        keyword are kernel tensors like positional ones, keyed by position and named by
        their parameter (``list(self._signature.parameters)``)."""
        sig = self._signature
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise fail("nki_invalid_argument", f"{self.fn.__name__}{sig}: {e}",
                       user_loc()) from None
        bound.apply_defaults()
        names = self._keyword_only
        kwargs = {k: v for k, v in bound.kwargs.items() if k not in names}
        for name, value in kwargs.items():
            if is_tensor(value):
                raise fail("nki_invalid_argument", f"tensor argument {name!r} reaches the "
                           "kernel through **kwargs or after *args; kernel tensors must be "
                           "named parameters (positional or keyword-only) of a kernel "
                           "without *args", user_loc())
        return bound.args + tuple(bound.arguments[n] for n in names), kwargs

    def _tensor_args(self, args) -> dict[int, TensorArg]:
        return tensor_args(args, list(self._signature.parameters), user_loc())

    def _runnable(self, spec: Specialization, targs: dict[int, TensorArg]) -> None:
        """Refuse to simulate shape-only placeholder arguments (nki/jit/args.py)."""
        refuse_shape_only(targs, list(self._signature.parameters),
                          data_dependence(spec.cores[0].program), user_loc())

    def specialize(self, *args, **kwargs) -> Specialization:
        """Trace and compile for these arguments (cached per shapes/dtypes/constants)."""
        args, kwargs = self._positional(args, kwargs)
        return self._specialize(args, kwargs, self._tensor_args(args))

    def specialize_for_model(self, *args, **kwargs) -> Specialization:
        """:meth:`specialize` for a cost model: the programs without their generated code
        (made when something first asks a core for it), so an estimate never loads the
        simulator's emitters. A disk entry it writes holds no code either."""
        args, kwargs = self._positional(args, kwargs)
        return self._specialize(args, kwargs, self._tensor_args(args), code=False)

    def _specialize(self, args, kwargs, tensor_args, rank=None,
                    code: bool = True) -> Specialization:
        """``rank``: ``(rank, world size)`` of a multi-rank run (each rank is traced apart:
        ``ncc.rank_id()`` is a trace-time constant). ``code``: generate every core's code
        before a disk entry is written, so a warm load runs without generating it."""
        settings = self.settings()
        signature = (tuple(signature_of(a) for a in args),
                     tuple(sorted((k, signature_of(v)) for k, v in kwargs.items())))
        launch = Launch(self._lnc, rank, self.compile_config, self.specialization_config,
                        getattr(self, "schedule", ()))
        key = (signature, launch, settings)
        spec = self._cache.get(key)
        if spec is not None:
            return spec
        disk_key = spec_key(self.fn, signature, launch, settings) if settings.cache else None
        disk = ProgramCache(settings.cache_dir) if disk_key else None
        spec = disk.load(disk_key) if disk else None
        if spec is None:
            target = get_target(settings.target)
            # dependencies matter only for a disk entry, and only the trace runs user code
            deps = DependencyRecorder() if disk else None
            caught: list = []
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    cores = specialize_cores(self._traced, args, kwargs, tensor_args, target,
                                             launch, settings, recorder=deps)
                    _check_core_races(cores, target, settings.check_races)
            except BaseException:
                # what the failed trace warned about is still said (then the error)
                Specialization([], settings, _warning_records(caught)).replay_warnings()
                raise
            spec = Specialization(cores, settings, _warning_records(caught),
                                  self.compile_config)
            if disk and deps.cacheable and not any(core.files_read for core in cores):
                if code:
                    for core in cores:
                        core.generated   # noqa: B018  (made now, so the entry holds it)
                disk.store(disk_key, spec, deps.snapshot())
        spec.replay_warnings()
        self._cache.put(key, spec)
        return spec

    def __call__(self, *args, **kwargs):
        if active() is not None:     # called from another kernel: a sub-kernel, inlined
            return inline_nested(self, args, kwargs)
        args, kwargs = self._positional(args, kwargs)
        tensor_args = self._tensor_args(args)
        spec = self._specialize(args, kwargs, tensor_args)
        # torch.compile tracing (fake tensors): outputs described or a graph node, not run
        described = fake_outputs(spec, tensor_args, (self._flat_view(), args, kwargs))
        if described is not REAL:
            return described
        observe(self, spec)          # python -m nki.cost: estimate every call (else a no-op)
        self._runnable(spec, tensor_args)
        records: list = []
        out = execute(spec, tensor_args, records=records)
        self._last_record[0] = tuple(records)
        return out

    @property
    def last_run_record(self) -> tuple | None:
        """What the last call of this kernel did that its IR cannot say, one
        :class:`nki.sim.record.RunRecord` per core: the entries and iterations of every
        runtime loop (``nl.fori_loop``/``while_loop``/``dynamic_range``) and the rows
        ``oob_mode.skip`` left out. None before the first call. A cost model reads it for
        data-dependent kernels (``nki.ir.nodes.data_dependence``).

        Example:
            >>> out = kernel(x, n)                                      # doctest: +SKIP
            >>> kernel.last_run_record[0].loops[0].trips                # doctest: +SKIP
        """
        return self._last_record[0]

    def profile(self, *args, **kwargs) -> list:
        """Run once with every instruction timed; one ``InstructionProfile`` per core.

        The helpers run their compiled code; the loops run as Python, which adds a few
        microseconds per instruction (reported apart). Times are this simulator's on this
        CPU, not a NeuronCore's.

        Example:
            >>> print(softmax_rows.profile(x)[0].table(top=10))   # doctest: +SKIP
        """
        args, kwargs = self._positional(args, kwargs)
        tensor_args = self._tensor_args(args)
        profiles: list = []
        spec = self._specialize(args, kwargs, tensor_args)
        self._runnable(spec, tensor_args)
        execute(spec, tensor_args, profiles)
        return profiles


def _warn_keyword_only(fn, dropped_in: str | None) -> None:
    """A ``DeprecationWarning`` at the kernel's ``def`` when its signature has keyword-only
    parameters and the dialect's current release no longer accepts them."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if dropped_in is None or code is None or not code.co_kwonlyargcount:
        return
    warnings.warn_explicit(f"kernel {fn.__name__!r}: the keyword-only separator '*' in a "
                           f"kernel signature was dropped in {dropped_in}; it runs as before "
                           "(move the parameters before it to keep it compiling there)",
                           DeprecationWarning, code.co_filename, code.co_firstlineno)


def _warning_records(caught) -> list:
    return [(str(w.message), w.category, w.filename, w.lineno) for w in caught]


def _check_core_races(cores: list[CoreProgram], target, strict: bool) -> None:
    """Two LNC cores should not write the same shared HBM bytes (each core was traced alone);
    an error when ``strict``, else a warning."""
    if len(cores) > 1:
        programs = check_core_races([c.program for c in cores], target, strict)
        for core, program in zip(cores, programs):
            core.program = program


def execute(spec: Specialization, tensor_args: dict[int, TensorArg], profiles=None,
            records: list | None = None):
    """Lay out HBM, run every core, copy outputs out and written inputs back. With a list
    ``profiles``, every instruction is timed and each core's InstructionProfile appended;
    with a list ``records``, each core's RunRecord is appended."""
    call = prepare_call(spec, tensor_args, profiles)
    target = get_target(spec.settings.target)
    try:
        done = run_cores(call.exes, call.view, target, spec.settings.check_uninit,
                         switch=call.switch)
    except TierSwitch:       # the helpers compiled meanwhile: from the start, on them
        print(f"nki: the compiled helpers are ready; {spec.cores[0].program.name} runs "
              "again on them", file=sys.stderr)
        call = prepare_call(spec, tensor_args, profiles, tier="numba")
        done = run_cores(call.exes, call.view, target, spec.settings.check_uninit)
    if records is not None:
        records.extend(done)
    return finish_call(call)


@dataclass
class PreparedCall:
    """One launch with its HBM laid out and its cores ready to run (``execute``, and each
    rank of ``nki.multi_rank_simulate``)."""

    spec: Specialization
    inputs: list
    hbm: np.ndarray
    view: np.ndarray
    exes: list
    profiles: list | None
    switch: Callable[[], bool] | None = None   # a plain-Python run's "compiled is ready"


def prepare_call(spec: Specialization, tensor_args: dict[int, TensorArg],
                 profiles=None, tier: str | None = None) -> PreparedCall:
    """HBM laid out for one call (inputs and constants in, outputs given the never-written
    sentinel where needed) and one Executable per core. ``tier``: ``"numba"`` skips the
    tier choice (a rerun after :class:`~nki.sim.tier.TierSwitch`)."""
    inputs = [tensor_args[i] for i in sorted(tensor_args)]
    hbm, in_place = lay_out(spec, inputs)
    backend = spec.settings.backend if profiles is None else "profile"
    switch = None
    if backend == "numba" and tier is None:   # compiled, or Python while helpers compile
        from nki.sim.tier import switch_check, tier_of_call

        programs = [c.generated for c in spec.cores]
        backend = tier_of_call(programs)
        switch = switch_check(programs) if backend == "pure" else None
    view, tables = hbm_for_call(spec, hbm, inputs, in_place)
    exes = [Executable(c.generated, backend, table=t)
            for c, t in zip(spec.cores, tables or [None] * len(spec.cores))]
    return PreparedCall(spec, inputs, hbm, view, exes, profiles, switch)


def finish_call(call: PreparedCall):
    """After the cores ran: written inputs copied back, outputs as the kernel returned
    them (numpy, or torch when torch tensors came in)."""
    spec, inputs, hbm = call.spec, call.inputs, call.hbm
    first = spec.cores[0]
    if call.profiles is not None:
        call.profiles.extend(e.profile for e in call.exes)
    torch_in = [ta.original for ta in inputs if ta.is_torch]
    for ta, data in written_inputs(hbm, first, inputs):
        write_back(ta, data)
    outs = [wrap_output(a, torch_in[0] if torch_in else None)
            for a in returned_arrays(hbm, first)]
    if torch_in:   # torch in, torch out: on the inputs' device, no backward unless registered
        from nki.jit.torch_values import guard_backward

        outs = guard_backward(outs, torch_in, first.program.name)
    keep_arena(hbm)
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else tuple(outs)


def jit(fn=None, **options):
    """Decorator: turn a kernel function into a :class:`Kernel`.

    Example:
        >>> @nki.jit                                   # doctest: +SKIP
        ... def add(a, b):
        ...     ...
    """
    if fn is None:
        return lambda f: Kernel(f, **options)
    return Kernel(fn, **options)


def simulate(kernel):
    """AWS's ``nki.simulate(kernel)``: a callable that runs it on the CPU simulator."""
    if not isinstance(kernel, Kernel):
        kernel = Kernel(kernel)
    return kernel


def simulate_kernel(kernel, *args, **kwargs):
    """Legacy ``nki.simulate_kernel(kernel, *args)``."""
    return simulate(kernel)(*args, **kwargs)


__all__ = ["Kernel", "jit", "simulate", "simulate_kernel", "Specialization",
           "NkiValidationError"]
