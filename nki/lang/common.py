"""Shared rule checks used by every instruction family (spec §1.3, §4, §6)."""

from __future__ import annotations

from itertools import count

from nki.errors import NkiUnsupportedError, SourceLoc, fail
from nki.ir.nodes import (
    DYN_LOOPS,
    Access,
    Dependency,
    Instr,
    RecordedLoop,
    install_depends_on_rule,
)
from nki.ir.types import DType, Memory
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import Trace, current, user_loc, validation

ON_CHIP = (Memory.SBUF, Memory.PSUM)


class Call:
    """The context of one API call being checked: its name, trace and the user's location."""

    __slots__ = ("api", "trace", "loc")

    def __init__(self, api: str):
        self.api = api
        self.trace: Trace = current(api)
        self.loc: SourceLoc | None = user_loc()

    def error(self, code: str, detail: str):
        return validation(code, f"{self.api}: {detail}", self.loc)

    def tensor(self, value, role: str, memories=None) -> NkiTensor:
        """``value`` must be a tensor handle, in one of ``memories`` if given."""
        if not isinstance(value, NkiTensor):
            raise self.error("nki_invalid_argument",
                             f"operand {role!r} must be a tensor, got {type(value).__name__}")
        if memories is not None and value.buffer not in memories:
            names = "/".join(m.value for m in memories)
            raise self.error("err_unsupported_memory",
                             f"expected operand {role!r} to be in {names}, but got a tensor "
                             f"in {value.buffer.value}")
        return value

    def tile(self, value, role: str, memories=ON_CHIP) -> NkiTensor:
        """An on-chip tile operand: partition dim ≤ pmax."""
        t = self.tensor(value, role, memories)
        pmax = self.trace.target.pmax
        if t.shape[0] > pmax:
            raise self.error("err_num_partition_exceed_arch_limit",
                             f"partition dimension {t.shape[0]} of {role!r} exceeds the "
                             f"architecture limit of {pmax}")
        return t

    def same_partitions(self, a: NkiTensor, b: NkiTensor, ra: str, rb: str) -> None:
        if a.shape[0] != b.shape[0]:
            raise self.error("err_num_partition_mismatch",
                             f"{ra!r} has {a.shape[0]} partitions but {rb!r} has {b.shape[0]}")

    def same_elements(self, a: NkiTensor, b: NkiTensor, ra: str, rb: str) -> None:
        """Same partitions and the same number of elements per partition."""
        self.same_partitions(a, b, ra, rb)
        fa, fb = a.size // a.shape[0], b.size // b.shape[0]
        if fa != fb:
            raise self.error("nki_shape_mismatch",
                             f"{ra!r} {a.shape} has {fa} elements per partition but {rb!r} "
                             f"{b.shape} has {fb}")

    def not_both_psum(self, a: NkiTensor, b: NkiTensor, ra: str, rb: str) -> None:
        if a.buffer is Memory.PSUM and b.buffer is Memory.PSUM:
            raise self.error("err_unsupported_memory",
                             f"{ra!r} and {rb!r} cannot both be in PSUM")

    def scalar_vector(self, value, role: str, parts: int) -> NkiTensor | float:
        """A Python number, or a [P, 1] on-chip tile with ``parts`` partitions."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        t = self.tile(value, role)
        if t.size // t.shape[0] != 1 or t.shape[0] != parts:
            raise self.error("nki_shape_mismatch", f"{role!r} must be a scalar or a "
                             f"[{parts}, 1] tile, got shape {t.shape}")
        return t


def acc(t: NkiTensor) -> Access:
    return t.access()


def dtype_of(value) -> DType:
    if type(value) is DType:     # the usual case: no import statement per call
        return value
    from nki.lang.indexing import as_dtype

    return as_dtype(value)


# ----- NkiInstruction.depends_on ----------------------------------------------------------

def _is_iteration(parent: list, child: list) -> bool:
    return bool(parent) and isinstance(parent[-1], RecordedLoop) and \
        any(it is child for it in parent[-1].iterations)


def _placement(trace: Trace, wanted: set[int]) -> dict[int, tuple[int, tuple]]:
    """``id(instr) -> (program-order index, runtime loops around it)`` for the wanted
    instructions of the running trace. Recorded (Python) loops are unrolled and do not
    count; a runtime loop's body is only attached to its parent when the loop closes, so an
    open one (on the trace's statement stack) is visited after its parent's statements."""
    found: dict[int, tuple[int, tuple]] = {}
    order, stack = count(), trace._stack

    def visit(stmts, loops: tuple) -> None:
        for s in stmts:
            if isinstance(s, Instr):
                n = next(order)
                if id(s) in wanted:
                    found[id(s)] = (n, loops)
            elif isinstance(s, RecordedLoop):
                for it in s.iterations:
                    visit(it, loops)
            elif isinstance(s, DYN_LOOPS):
                visit(s.body, loops + (id(s),))
        k = next((i for i, level in enumerate(stack) if level is stmts), None)
        if k is not None and k + 1 < len(stack) and not _is_iteration(stmts, stack[k + 1]):
            visit(stack[k + 1], loops + (id(stack[k + 1]),))

    visit(trace.body, ())
    return found


def _site(instr: Instr) -> str:
    return instr.loc.short if instr.loc else "<unknown>"


def check_depends_on(consumer: Instr, producers: tuple, kind) -> None:
    """The rule of ``NkiInstruction.depends_on`` (spec §1.5 scheduling controls): producers
    are instruction handles of this kernel, ``kind`` a ``nisa.dependency``; a runtime edge
    (``kind`` runtime or omitted) is a semaphore wait, so the producer sits in the
    consumer's runtime loop or an enclosing scope. The simulator runs instructions in
    program order, so a producer traced after its consumer cannot be honoured."""
    call = Call("NkiInstruction.depends_on")
    if kind is not None and not isinstance(kind, Dependency):
        raise call.error("nki_invalid_argument", f"kind={kind!r} must be a nisa.dependency "
                         "member (nisa.dependency.runtime or nisa.dependency.schedule)")
    for i, p in enumerate(producers):
        if not isinstance(p, Instr):
            raise call.error("nki_invalid_argument", f"producer {i} must be an instruction "
                             "handle (what an nki.isa call returns), got "
                             f"{type(p).__name__}")
        if p is consumer:
            raise call.error("nki_invalid_argument", "an instruction cannot depend on itself")
    where = _placement(call.trace, {id(consumer)} | {id(p) for p in producers})
    for i, p in enumerate((consumer,) + producers):
        if id(p) not in where:
            role = "the consumer" if i == 0 else f"producer {i - 1}"
            raise call.error("nki_invalid_argument", f"{role} ({p.opcode.name.lower()} at "
                             f"{_site(p)}) is not an instruction of this kernel's trace")
    at, loops = where[id(consumer)]
    for i, p in enumerate(producers):
        p_at, p_loops = where[id(p)]
        if kind is not Dependency.schedule and loops[:len(p_loops)] != p_loops:
            raise call.error("nki_invalid_argument", f"producer {i} (at {_site(p)}) and the "
                             f"consumer (at {_site(consumer)}) sit in different runtime loops: "
                             "a runtime dependency is a semaphore wait, so the producer must be "
                             "in the consumer's runtime loop or an enclosing scope")
        if p_at > at:
            raise fail("nki_not_implemented", f"NkiInstruction.depends_on: producer {i} (at "
                       f"{_site(p)}) comes after the consumer (at {_site(consumer)}); the "
                       "simulator runs instructions in program order and cannot move one "
                       "after a later one: issue the producer first", call.loc,
                       NkiUnsupportedError)
    _record_edges(call.trace, consumer, producers, kind or Dependency.runtime)


def _record_edges(trace, consumer: Instr, producers: tuple, kind: Dependency) -> None:
    """Keep the edges in the IR for a cost model: each producer gets a ``dep_label`` hint
    (a number unique in the trace) and the consumer a ``depends_on`` hint listing
    ``(label, kind)``. The handles are the very instructions in the trace, not yet copied
    by any pass, so their hints are set in place (they are frozen for the passes' sake)."""
    edges = list(consumer.hint("depends_on", ()))
    for p in producers:
        label = p.hint("dep_label")
        if label is None:
            label = trace.next_label()
            object.__setattr__(p, "hints", p.hints + (("dep_label", label),))
        edges.append((label, kind))
    hints = tuple(kv for kv in consumer.hints if kv[0] != "depends_on")
    object.__setattr__(consumer, "hints", hints + (("depends_on", tuple(edges)),))


install_depends_on_rule(check_depends_on)
