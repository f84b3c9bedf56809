"""Lowering: turn logical operands (tensor + view) into placed operands (space + affine element
offset + dims in elements), using the addresses the allocator chose."""

from __future__ import annotations

from dataclasses import replace

from nki.ir.affine import Affine
from nki.ir.nodes import DYN_LOOPS, Access, Instr, Loop, Placed, Program, RecordedLoop
from nki.ir.target import Target


def place_access(acc: Access, program: Program, target: Target) -> Placed:
    t = program.tensor(acc.tensor)
    isz = acc.dtype.itemsize
    if t.memory.is_hbm:
        base = t.address[1] // isz
        return Placed(acc.tensor, t.memory, acc.dtype, acc.offset + base, acc.dims)
    row = target.arena_pitch(t.memory) // isz
    part0, byte0 = t.address
    if acc.partition.terms or acc.offset.terms:
        offset = (acc.partition + part0) * row + acc.offset + byte0 // isz
    else:   # constants (every operand of an unrolled trace): one Affine, not four
        offset = Affine((acc.partition.const + part0) * row + acc.offset.const + byte0 // isz)
    dims = ((row, acc.dims[0][1]),) + acc.dims[1:]
    return Placed(acc.tensor, t.memory, acc.dtype, offset, dims)


def lower(program: Program, target: Target) -> Program:
    """Replace every Access by its Placed form (recorded loops included)."""

    def fix(acc):
        return place_access(acc, program, target) if isinstance(acc, Access) else acc

    def body(stmts):
        out = []
        for s in stmts:
            if isinstance(s, Instr):
                out.append(s.map_accesses(fix))
            elif isinstance(s, (Loop, *DYN_LOOPS)):
                out.append(replace(s, body=tuple(body(s.body))))
            elif isinstance(s, RecordedLoop):
                out.append(replace(s, iterations=[body(it) for it in s.iterations]))
        return out

    return replace(program, body=tuple(body(program.body)))
