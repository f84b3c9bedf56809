"""IR nodes: frozen dataclasses for tensors, operands, instructions, loops and programs.

An operand (:class:`Access`) is a strided window of one tensor: up to five (stride, count)
pairs. On-chip tensors keep their partition dimension separate (``partition`` start, first
dim counted in partitions) so the placement pass can turn a view into a physical address
without re-deriving anything; HBM tensors are linear.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Union

from nki._frozen import fast_init
from nki.errors import SourceLoc
from nki.ir.affine import Affine
from nki.ir.ops import Alu, Engine, LoopKind, Opcode
from nki.ir.types import DType, Memory

MAX_DIMS = 5


@fast_init
@dataclass(frozen=True)
class TensorDecl:
    """One tensor instance (an allocation, a kernel parameter, or a constant).

    Attributes:
        id: unique within a program.
        name: readable name (user's ``name=`` or derived from the creation site).
        memory: where it lives.
        shape: declared shape; dim 0 is the partition dim on chip.
        dtype: declared element type.
        role: ``"input"``, ``"output"``, ``"internal"`` or ``"constant"``.
        loc: where the user created it.
        address: on chip, (first partition, byte offset in each partition) once placed (or
            as the user gave it with ``address=``); in HBM, the byte offset in the HBM arena.
        site: identifies the creation site, so instances made by different iterations of a
            loop can be recognised as one family when rerolling.
    """

    id: int
    name: str
    memory: Memory
    shape: tuple[int, ...]
    dtype: DType
    role: str = "internal"
    loc: SourceLoc | None = None
    address: tuple[int, int] | None = None
    user_address: bool = False
    site: tuple = ()

    def __reduce__(self):
        # pickled as its fields in order, not as a dict of them: a trace holds one decl per
        # tile instance (~10^5), and the program cache pickles every one
        return (TensorDecl, (self.id, self.name, self.memory, self.shape, self.dtype,
                             self.role, self.loc, self.address, self.user_address, self.site))

    @property
    def partitions(self) -> int:
        return self.shape[0] if self.memory.on_chip else 1

    @property
    def free_size(self) -> int:
        """Elements per partition (on chip) or total elements (HBM)."""
        n = 1
        for d in (self.shape[1:] if self.memory.on_chip else self.shape):
            n *= d
        return n

    @property
    def bytes_per_partition(self) -> int:
        return self.free_size * self.dtype.itemsize

    @property
    def user_name(self) -> str:
        """The user's name for the tensor in messages: its ``name=``, else the variable its
        creation line assigns (``acc = nl.ndarray(...)``), else the generated name."""
        if self.name != f"t{self.id}" or self.loc is None:
            return self.name
        m = _ASSIGNED.match(self.loc.source_line())
        return m.group(1) if m else self.name


_ASSIGNED = re.compile(r"\s*([A-Za-z_]\w*)\s*(:[^=]*)?=[^=]")


@fast_init
@dataclass(frozen=True)
class Access:
    """A strided window of a tensor, as an instruction operand.

    ``dims`` are (stride, count) pairs, outermost first, strides in elements of ``dtype``.
    On chip, ``dims[0]`` is the partition dim (its stride counts partitions, always 1) and
    ``offset`` is the element offset inside each partition; ``partition`` is the first
    partition relative to the tensor. In HBM ``partition`` is 0 and ``offset`` is linear.
    """

    tensor: int
    dtype: DType
    offset: Affine
    dims: tuple[tuple[int, int], ...]
    partition: Affine = Affine(0)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(c for _, c in self.dims)

    @property
    def num_partitions(self) -> int:
        return self.dims[0][1]

    @property
    def free_elems(self) -> int:
        n = 1
        for _, c in self.dims[1:]:
            n *= c
        return n

    def with_offsets(self, offset: Affine, partition: Affine) -> Access:
        return replace(self, offset=offset, partition=partition)


@fast_init
@dataclass(frozen=True)
class Placed:
    """An operand after placement: an affine element offset into one memory space viewed as
    ``dtype``, and up to five (stride, count) dims in elements (partition stride included).
    ``tensor`` is kept for names in printed IR and error messages.

    ``instance``: in a rerolled loop, which tensor *instance* each iteration touches (a
    tile allocated in the body is a new instance every iteration): an ``Affine`` of the
    loop slots giving its id (``t7 + 3*i0``), or, when the ids do not progress affinely (a
    triangular nest allocates more tiles per outer iteration), a :class:`FreshInstance`
    naming the slots it changes with; None when it is ``tensor`` in every iteration.
    :meth:`instance_key` compares instances across operands and iterations.
    """

    tensor: int
    space: Memory
    dtype: DType
    offset: Affine
    dims: tuple[tuple[int, int], ...]
    instance: Affine | None = None

    def instance_key(self, slots):
        """What identifies the instance touched when the loop slots have the values
        ``slots`` (a mapping or sequence indexed by slot): its tensor id, or for a
        :class:`FreshInstance` the first instance's id and the slot values."""
        inst = self.instance
        if inst is None:
            return self.tensor
        if isinstance(inst, FreshInstance):
            return (inst.first,) + tuple(slots[s] for s in inst.slots)
        return inst.const + sum(c * slots[s] for s, c in inst.terms)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(c for _, c in self.dims)

    def same_form(self, other: Placed) -> bool:
        return (self.space is other.space and self.dtype == other.dtype
                and self.dims == other.dims)


@fast_init
@dataclass(frozen=True)
class FreshInstance:
    """An operand's instance where instance ids are not affine in the loop slots: a new
    instance for every value of ``slots``, ``first`` the id of the first one."""

    first: int
    slots: tuple[int, ...]


Operand = Union[Access, Placed]


class Dependency(Enum):
    """``nisa.dependency``: what an edge added by :meth:`Instr.depends_on` asks for."""

    runtime = "runtime"      # a hardware semaphore wait, ordering the pair across engines
    schedule = "schedule"    # an issue-order constraint for the compiler's scheduler only


# The rule behind Instr.depends_on needs the running trace, which lives in nki.lang (ir
# never imports lang): nki.lang installs it here when imported.
_DEPENDS_ON: list[Callable[[Instr, tuple, Any], None]] = []


def install_depends_on_rule(rule: Callable[[Instr, tuple, Any], None]) -> None:
    """Install the checker :meth:`Instr.depends_on` calls (``nki.lang.common`` does)."""
    _DEPENDS_ON[:] = [rule]


@fast_init
@dataclass(frozen=True)
class Instr:
    """One instruction. Operands are named by role; ``attrs`` are the typed static attributes
    the family's rule decided (enums, floats, ints, tuples): what the instruction computes.

    ``hints`` are what the kernel said about *how* it runs, which never changes the result
    (a cost model reads them; the simulator does not): ``engine`` (the ``engine=`` asked for,
    a :class:`~nki.ir.ops.Engine`; see :func:`engine_of` for the engine that runs it),
    ``dge_mode`` (:class:`~nki.ir.ops.DgeMode`), ``priority`` (DMA quality of service 0-3),
    ``perf_mode`` (:class:`~nki.ir.ops.MatmulPerfMode`), ``dma_engine``
    (:class:`~nki.ir.ops.DmaEngine`), ``api`` (the public call that emitted it, e.g.
    ``"nl.load"``), ``depends_on`` (``((label, nisa.dependency), ...)``: edges added by
    :meth:`depends_on`, naming producers by their ``dep_label`` hint)."""

    opcode: Opcode
    writes: tuple[tuple[str, Operand], ...]
    reads: tuple[tuple[str, Operand], ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    loc: SourceLoc | None = None
    name: str = ""
    hints: tuple[tuple[str, Any], ...] = ()

    def attr(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def hint(self, key: str, default: Any = None) -> Any:
        """A recorded hint (see the class docstring), or ``default``."""
        for k, v in self.hints:
            if k == key:
                return v
        return default

    @property
    def engine(self) -> Engine | None:
        """The engine that runs this instruction (:func:`engine_of`)."""
        return engine_of(self)

    @property
    def dge_mode(self):
        """The ``dge_mode=`` the kernel asked for (a ``DgeMode``), or None."""
        return self.hint("dge_mode")

    @property
    def priority(self) -> int | None:
        """The DMA ``priority=`` (0 highest .. 3), or None."""
        return self.hint("priority")

    @property
    def perf_mode(self):
        """The matmul ``perf_mode=`` (a ``MatmulPerfMode``), or None."""
        return self.hint("perf_mode")

    def operand(self, role: str) -> Access | None:
        for k, a in self.writes + self.reads:
            if k == role:
                return a
        return None

    def accesses(self) -> tuple[tuple[str, Operand, bool], ...]:
        """``(role, operand, is_write)`` of every operand, writes first (a tuple, not a
        generator: it is walked for every instruction by every pass)."""
        return tuple([(k, a, True) for k, a in self.writes] +
                     [(k, a, False) for k, a in self.reads])

    def map_accesses(self, fn) -> Instr:
        # the constructor, not dataclasses.replace (which re-reads the fields each call):
        # lowering and reroll map every operand of every unrolled instruction
        return Instr(self.opcode, tuple((k, fn(a)) for k, a in self.writes),
                     tuple((k, fn(a)) for k, a in self.reads), self.attrs, self.loc, self.name,
                     self.hints)

    def depends_on(self, *producers: Instr, kind: Dependency | None = None) -> Instr:
        """``NkiInstruction.depends_on``: run this instruction after each producer (handles
        returned by earlier ``nisa`` calls). Returns ``self``, so calls chain.

        The simulator runs instructions in program order, so an edge from an earlier
        instruction already holds: edges are checked (handles, ``kind``, runtime-loop
        nesting, order), not enforced.

        Example:
            >>> c = nisa.tensor_tensor(dst=z, data1=x, data2=y, op=nl.add)  # doctest: +SKIP
            >>> c.depends_on(a, b, kind=nisa.dependency.runtime)  # doctest: +SKIP
        """
        if _DEPENDS_ON:
            _DEPENDS_ON[0](self, producers, kind)
        return self


NkiInstruction = Instr   # the spec's name for the handle an nki.isa call returns

# hints that name one traced instance (the labels of depends_on edges): they differ between
# the iterations of a loop without making the iterations different instructions
_INSTANCE_HINTS = frozenset(("dep_label", "depends_on"))


def loop_hints(hints: tuple) -> tuple:
    """``hints`` without the per-instance ones: what must be equal for two instructions to
    be instances of one loop-body instruction (reroll keeps the first instance's labels,
    so an edge inside a rerolled body joins the producer of the same iteration)."""
    if not hints:
        return hints
    return tuple(kv for kv in hints if kv[0] not in _INSTANCE_HINTS)


def same_hints(a: tuple, b: tuple) -> bool:
    return a == b or loop_hints(a) == loop_hints(b)


@fast_init
@dataclass(frozen=True)
class Loop:
    """``for i_slot in range(trip): body``. Start and step are folded into the body's affine
    offsets, so every IR loop counts from 0 by 1; ``trip`` may depend on outer slots."""

    slot: int
    trip: Affine
    body: tuple[Stmt, ...]
    kind: LoopKind = LoopKind.PYTHON
    loc: SourceLoc | None = None
    spmd_axis: int | None = None    # a legacy SPMD grid dim: iteration k is program k


@dataclass
class RecordedLoop:
    """Trace-time record of a loop that Python unrolled: one statement list per iteration.

    Mutable because the tracer appends to it while the kernel runs; the reroll pass turns it
    into :class:`Loop` nodes or splices the iterations inline.
    """

    kind: LoopKind
    loc: SourceLoc | None
    iterations: list[list[Stmt]] = field(default_factory=list)
    tensors: list[list[int]] = field(default_factory=list)  # tensors created per iteration
    spmd_axis: int | None = None    # a legacy SPMD grid dim (see Loop)


@dataclass(frozen=True)
class Reg:
    """A virtual register (``nisa.register_alloc``), by number; a run-time int value."""

    id: int

    def __str__(self) -> str:
        return f"r{self.id}"


@dataclass(frozen=True)
class DynFor:
    """A loop run by the machine over register values (``nl.fori_loop``,
    ``nl.dynamic_range``): ``for v in range(start, stop, step): var = v; body``.

    The body was traced once; its tiles are allocated once and live for the whole loop.
    ``start``/``stop`` are ints or registers, ``step`` is a positive int, ``var`` the register
    that receives the induction value every iteration."""

    var: Reg
    start: int | Reg
    stop: int | Reg
    step: int
    body: tuple[Stmt, ...]
    loc: SourceLoc | None = None
    api: str = "nl.fori_loop"


@dataclass(frozen=True)
class DynWhile:
    """``var = cond; while var != 0: body; var = next_cond`` over registers
    (``nl.while_loop``, whose body receives ``var``); the body was traced once. ``var`` is
    None for ``while reg:``, which tests ``cond`` itself (``next_cond`` is ``cond``)."""

    cond: Reg
    next_cond: Reg
    var: Reg | None
    body: tuple[Stmt, ...]
    loc: SourceLoc | None = None
    api: str = "nl.while_loop"


DYN_LOOPS = (DynFor, DynWhile)

Stmt = Union[Instr, Loop, RecordedLoop, DynFor, DynWhile]


@dataclass(frozen=True)
class Program:
    """A whole kernel for one core: tensors, parameters, outputs and the statement tree.

    ``core`` of ``num_cores`` (an LNC launch, ``kernel[2]``): the programs of a launch run
    at the same time, one per physical core. ``meta`` keys a cost model reads (absent when
    not applicable): ``"schedule"`` (the ``Kernel.with_schedule`` pairs, by instruction
    ``name``), ``"spmd_grid"`` (a legacy grid ``kernel[g0, g1, ...]``: per dim
    ``(size, cores)``, ``cores`` > 1 for a dim written ``nl.nc(n)``/``nl.spmd_dim``; the
    simulator runs every program serially on one core, the grid dims being the Loops
    marked ``spmd_axis``), ``"spills"``, ``"hbm_bytes"``, ``"traced_instrs"``."""

    name: str
    tensors: tuple[TensorDecl, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    body: tuple[Stmt, ...]
    target: str = "trn3"
    core: int = 0
    num_cores: int = 1
    loc: SourceLoc | None = None
    meta: tuple[tuple[str, Any], ...] = ()

    def tensor(self, tid: int) -> TensorDecl:
        return self._by_id()[tid]

    def _by_id(self) -> dict[int, TensorDecl]:
        cache = self.__dict__.get("_by_id_cache")
        if cache is None:
            cache = {t.id: t for t in self.tensors}
            object.__setattr__(self, "_by_id_cache", cache)
        return cache


def walk(body, depth: int = 0) -> Iterator[tuple[Stmt, int]]:
    """Every statement with its loop depth, in program order (recorded loops included)."""
    for s in body:
        yield s, depth
        if isinstance(s, (Loop, DynFor, DynWhile)):
            yield from walk(s.body, depth + 1)
        elif isinstance(s, RecordedLoop):
            for it in s.iterations:
                yield from walk(it, depth + 1)


def count_instrs(body) -> int:
    """Number of instruction nodes (not executions) in a statement tree."""
    return sum(1 for s, _ in walk(body) if isinstance(s, Instr))


# The engine each opcode runs on when the kernel does not say (``engine=`` omitted or
# ``engine=unknown``): the engine column of the NKI ISA reference (nki-spec.md §4.1).
_DEFAULT_ENGINE: dict[Opcode, Engine] = {
    **dict.fromkeys((Opcode.DMA_COPY, Opcode.DMA_TRANSPOSE, Opcode.DMA_INDIRECT,
                     Opcode.DMA_COMPUTE, Opcode.SENDRECV, Opcode.COLLECTIVE,
                     Opcode.COLLECTIVE_V, Opcode.PERMUTE_IMPLICIT), Engine.dma),
    **dict.fromkeys((Opcode.NC_MATMUL, Opcode.NC_MATMUL_MX), Engine.tensor),
    **dict.fromkeys((Opcode.ACTIVATION, Opcode.ACTIVATE2), Engine.scalar),
    **dict.fromkeys((Opcode.IOTA, Opcode.AFFINE_SELECT, Opcode.TENSOR_PARTITION_REDUCE,
                     Opcode.LOCAL_GATHER, Opcode.NC_N_GATHER, Opcode.SEQUENCE_BOUNDS,
                     Opcode.NONZERO_WITH_COUNT, Opcode.TOPK, Opcode.CORE_BARRIER),
                    Engine.gpsimd),
    # register instructions run on an engine's sequencer, not its datapath
    **dict.fromkeys((Opcode.REGISTER_MOVE, Opcode.REGISTER_LOAD, Opcode.REGISTER_STORE),
                    Engine.sync),
}

# Simulator bookkeeping with no hardware instruction of its own: the NaN fill of a fresh
# tile, debug printing, and the gather/scatter that stands for a tensor-indirection access
# pattern of the instruction that consumes it.
NOT_ON_HARDWARE = frozenset((Opcode.FILL_UNINIT, Opcode.DEVICE_PRINT, Opcode.TENSOR_GATHER))


def engine_of(instr: Instr) -> Engine | None:
    """The engine that runs ``instr``; None for simulator bookkeeping (``NOT_ON_HARDWARE``).

    The rule, in order:

    1. an engine the rule resolved and recorded in ``attrs`` (``nc_transpose``: Tensor for a
       PSUM destination, else Vector; ``rng``);
    2. the ``engine=`` the kernel passed, unless it is ``engine.unknown``;
    3. the opcode's documented engine (spec §4.1). ``tensor_tensor`` with ``op=power``, and
       ``tensor_tensor``/``tensor_scalar`` whose operands are all 32-bit integers with
       arithmetic ops, default to GpSimd (native ints); everything else not listed in
       ``_DEFAULT_ENGINE`` runs on the Vector engine.

    ``engine=unknown`` therefore means "the documented default", not a choice the model
    makes; :func:`engine_fixed` says whether the kernel fixed the engine. Legacy ``nl.*``
    calls (``nl.exp``, ``nl.add``, ``nl.load``, ...) have no ``engine=``: each takes the
    default of the instruction it lowers to (``nl.exp`` → activation → Scalar, ``nl.add`` →
    tensor_tensor → Vector), as AWS's compiler does not document its own choice.
    """
    if instr.opcode in NOT_ON_HARDWARE:
        return None
    resolved = instr.attr("engine")
    if isinstance(resolved, Engine) and resolved is not Engine.unknown:
        return resolved
    asked = instr.hint("engine")
    if asked is not None and asked is not Engine.unknown:
        return asked
    found = _DEFAULT_ENGINE.get(instr.opcode)
    if found is not None:
        return found
    if instr.opcode in (Opcode.TENSOR_TENSOR, Opcode.TENSOR_SCALAR):
        ops = [instr.attr(k) for k in ("op", "op0", "op1")]
        if Alu.power in ops:
            return Engine.gpsimd
        if instr.attr("int_math") and not any(isinstance(o, Alu) and o.is_bitvec for o in ops):
            return Engine.gpsimd
    return Engine.vector


def engine_fixed(instr: Instr) -> bool:
    """Whether the kernel chose the engine (``engine=`` other than unknown); otherwise the
    engine is the documented default and a compiler could move the instruction."""
    asked = instr.hint("engine")
    return asked is not None and asked is not Engine.unknown


def _reads_register_offset(instr: Instr) -> bool:
    """An operand placed by a register (an affine term on a negative slot)."""
    for _, a, _ in instr.accesses():
        parts = (a.offset, a.partition) if isinstance(a, Access) else (a.offset,)
        if any(s < 0 for p in parts for s, _ in p.terms):
            return True
    return False


def data_dependence(program: Program) -> SourceLoc | None:
    """Where the kernel's control flow or addressing first reads tensor data, or None when
    shapes alone determine everything it does (then an estimate needs no input data).

    Data-dependent: a runtime loop whose trip count comes from registers (``nl.while_loop``,
    an ``nl.fori_loop``/``dynamic_range`` with a register bound), a register loaded from
    memory, an operand moved by a register, and indirect accesses (``vector_offset``,
    tensor indirection, gathers), whose rows (and skipped rows under ``oob_mode.skip``)
    depend on index values. The location is the user's line (the loop's or instruction's).
    """
    for s, _ in walk(program.body):
        if isinstance(s, DynWhile) or (isinstance(s, DynFor) and
                                       (isinstance(s.start, Reg) or isinstance(s.stop, Reg))):
            return s.loc
        if isinstance(s, Instr) and (s.opcode in _DATA_ADDRESSED or s.attr("indirect")
                                     or _reads_register_offset(s)):
            return s.loc
    return None


# instructions whose rows or registers come from tensor data
_DATA_ADDRESSED = frozenset((Opcode.DMA_INDIRECT, Opcode.TENSOR_GATHER, Opcode.LOCAL_GATHER,
                             Opcode.NC_N_GATHER, Opcode.REGISTER_LOAD))
