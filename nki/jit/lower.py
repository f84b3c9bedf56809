"""Lowering: turn logical operands (tensor + view) into placed operands (space + affine element
offset + dims in elements), using the addresses the allocator chose."""

from __future__ import annotations

from dataclasses import replace

from nki.ir.affine import Affine
from nki.ir.nodes import DYN_LOOPS, Access, Instr, Loop, Placed, Program, RecordedLoop
from nki.ir.target import Target


class _Placer:
    """``Access`` -> ``Placed`` for one program: each tensor's memory and address looked up
    once, not per operand (lowering places every operand of every unrolled instruction)."""

    __slots__ = ("_by_id", "_pitch", "_where", "_done")

    def __init__(self, program: Program, target: Target):
        self._by_id = program._by_id()
        self._pitch = {m: target.arena_pitch(m) for m in {t.memory for t in program.tensors}
                       if m.on_chip}
        self._where: dict[int, tuple] = {}
        # id(Access) -> (the Access, its Placed): a tile's handle keeps one Access, which
        # several instructions share (a load's dst is the matmul's stationary; a PSUM
        # accumulator is every matmul's dst), so each is placed once. The Access is kept
        # so that its id is not reused while this placer lives.
        self._done: dict[int, tuple[Access, Placed]] = {}

    def _tensor(self, tid: int) -> tuple:
        """(memory, pitch in bytes or 0 in HBM, first partition, byte offset)."""
        where = self._where.get(tid)
        if where is None:
            t = self._by_id[tid]
            part0, byte0 = t.address
            where = (t.memory, 0 if t.memory.is_hbm else self._pitch[t.memory], part0, byte0)
            self._where[tid] = where
        return where

    def __call__(self, acc: Access) -> Placed:
        done = self._done.get(id(acc))
        if done is not None and done[0] is acc:
            return done[1]
        placed = self._place(acc)
        self._done[id(acc)] = (acc, placed)
        return placed

    def _place(self, acc: Access) -> Placed:
        memory, pitch, part0, byte0 = self._tensor(acc.tensor)
        isz = acc.dtype.itemsize
        if not pitch:
            return Placed(acc.tensor, memory, acc.dtype, acc.offset + byte0 // isz, acc.dims)
        row = pitch // isz
        if acc.partition.terms or acc.offset.terms:
            offset = (acc.partition + part0) * row + acc.offset + byte0 // isz
        else:   # constants (every operand of an unrolled trace): one Affine, not four
            offset = Affine((acc.partition.const + part0) * row + acc.offset.const +
                            byte0 // isz)
        dims = acc.dims
        return Placed(acc.tensor, memory, acc.dtype, offset, ((row, dims[0][1]),) + dims[1:])


def place_access(acc: Access, program: Program, target: Target) -> Placed:
    """One operand's placed form (the allocator gave its tensor an address)."""
    return _Placer(program, target)(acc)


def lower(program: Program, target: Target) -> Program:
    """Replace every Access by its Placed form (recorded loops included)."""
    return replace(program, body=tuple(_lower_body(program.body, _Placer(program, target))))


def _lower_instr(s: Instr, place: _Placer) -> Instr:
    # the constructor, not map_accesses' generators: called for every unrolled instruction
    writes = tuple([(k, place(a) if type(a) is Access else a) for k, a in s.writes])
    reads = tuple([(k, place(a) if type(a) is Access else a) for k, a in s.reads])
    return Instr(s.opcode, writes, reads, s.attrs, s.loc, s.name, s.hints)


def _lower_body(stmts, place: _Placer) -> list:
    """A module-level function, not a closure that calls itself: a self-referencing closure
    is a reference cycle, which kept the whole unrolled program it saw alive until a full
    collection (tiled matmul: 1.4 s of collection later, inside the cache store)."""
    out = []
    for s in stmts:
        if type(s) is Instr:
            out.append(_lower_instr(s, place))
        elif isinstance(s, RecordedLoop):
            out.append(RecordedLoop(s.kind, s.loc, [_lower_body(it, place)
                                                    for it in s.iterations],
                                    s.tensors, s.spmd_axis))
        elif isinstance(s, (Loop, *DYN_LOOPS)):
            out.append(replace(s, body=tuple(_lower_body(s.body, place))))
        elif isinstance(s, Instr):
            out.append(_lower_instr(s, place))
    return out
