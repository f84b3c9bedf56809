"""IR nodes: frozen dataclasses for tensors, operands, instructions, loops and programs.

An operand (:class:`Access`) is a strided window of one tensor: up to five (stride, count)
pairs. On-chip tensors keep their partition dimension separate (``partition`` start, first
dim counted in partitions) so the placement pass can turn a view into a physical address
without re-deriving anything; HBM tensors are linear.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Union

from nki.errors import SourceLoc
from nki.ir.affine import Affine
from nki.ir.ops import LoopKind, Opcode
from nki.ir.types import DType, Memory

MAX_DIMS = 5


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


@dataclass(frozen=True)
class Placed:
    """An operand after placement: an affine element offset into one memory space viewed as
    ``dtype``, and up to five (stride, count) dims in elements (partition stride included).
    ``tensor`` is kept for names in printed IR and error messages."""

    tensor: int
    space: Memory
    dtype: DType
    offset: Affine
    dims: tuple[tuple[int, int], ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(c for _, c in self.dims)

    def same_form(self, other: Placed) -> bool:
        return (self.space is other.space and self.dtype == other.dtype
                and self.dims == other.dims)


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


@dataclass(frozen=True)
class Instr:
    """One instruction. Operands are named by role; ``attrs`` are the typed static attributes
    the family's rule decided (enums, floats, ints, tuples)."""

    opcode: Opcode
    writes: tuple[tuple[str, Operand], ...]
    reads: tuple[tuple[str, Operand], ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    loc: SourceLoc | None = None
    name: str = ""

    def attr(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

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
                     tuple((k, fn(a)) for k, a in self.reads), self.attrs, self.loc, self.name)

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


@dataclass(frozen=True)
class Loop:
    """``for i_slot in range(trip): body``. Start and step are folded into the body's affine
    offsets, so every IR loop counts from 0 by 1; ``trip`` may depend on outer slots."""

    slot: int
    trip: Affine
    body: tuple[Stmt, ...]
    kind: LoopKind = LoopKind.PYTHON
    loc: SourceLoc | None = None


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
    """A whole kernel for one core: tensors, parameters, outputs and the statement tree."""

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
