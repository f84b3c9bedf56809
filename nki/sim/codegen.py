"""Emit: IR program → one readable Python function + the instruction tables it runs on.

The function has one statement per instruction, each ending with its origin comment::

    def nki_softmax_rows(ADDR, H, S, PS, IT, FT, L):
        for i0 in range(8):                                  # softmax.py:5 affine_range
            L[0] = i0
            if run_instr(ADDR, H, S, PS, IT, FT, 0, L): return 0  # softmax.py:7 dma_copy ...

It returns -1 when the program finished, or the index of the instruction that faulted. The
same source runs compiled by Numba or as plain Python; only ``run_instr`` differs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nki.ir.nodes import Instr, Loop, Placed, Program
from nki.ir.printer import format_instr_short
from nki.ir.types import Memory
from nki.sim.emit import EMITTERS, load_all
from nki.sim.helpers.registry import helper_id, helper_id_by_name, helper_name
from nki.sim.layout import NF, ROW, PhysOperand, RowWriter

SPACES = {Memory.SHARED_HBM: 0, Memory.PRIVATE_HBM: 0, Memory.SBUF: 1, Memory.PSUM: 2}


@dataclass
class Generated:
    """What codegen produces for one program."""

    name: str
    source: str
    int_table: np.ndarray
    float_table: np.ndarray
    origins: list[str]       # per instruction row: "file.py:12 nisa.op(...)"
    locs: list               # per row: SourceLoc or None
    helpers: list[str]       # per row: helper name (ids are per process; names are stable)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_compiled", None)   # per-process compiled callables are not pickled
        return state

    def compiled(self) -> dict:
        """Per-process cache of this program's compiled callables, by backend."""
        if "_compiled" not in self.__dict__:
            self.__dict__["_compiled"] = {}
        return self.__dict__["_compiled"]

    def bind_helpers(self) -> set[int]:
        """Write this process's helper ids into column 0; returns the ids used."""
        load_all()
        ids = [helper_id_by_name(name) for name in self.helpers]
        if ids:
            self.int_table[:len(ids), 0] = ids
        return set(ids)


def phys(op: Placed) -> PhysOperand:
    return PhysOperand(SPACES[op.space], op.dtype.code, op.offset, op.dims)


class _Emitter:
    def __init__(self, program: Program):
        load_all()
        self.program = program
        self.lines: list[str] = []
        self.rows: list[np.ndarray] = []
        self.frows: list[np.ndarray] = []
        self.origins: list[str] = []
        self.locs: list = []
        self.helpers: list[str] = []

    def instr(self, ins: Instr, indent: str) -> None:
        em = EMITTERS.get(ins.opcode)
        if em is None:
            raise NotImplementedError(f"no emitter for {ins.opcode.name}")
        hid = helper_id(em.helper)
        self.helpers.append(helper_name(hid))
        writer = RowWriter(hid, int(ins.opcode))
        operands = {role: phys(a) for role, a, _ in ins.accesses()}
        em.encode(ins, writer, operands)
        k = len(self.rows)
        self.rows.append(writer.irow)
        self.frows.append(writer.frow)
        origin = format_instr_short(ins, self.program)
        self.origins.append(origin)
        self.locs.append(ins.loc)
        self.lines.append(f"{indent}if run_instr(ADDR, H, S, PS, IT, FT, {k}, L):"
                          f" return {k}  # {origin}")

    def body(self, stmts, indent: str) -> None:
        for s in stmts:
            if isinstance(s, Instr):
                self.instr(s, indent)
            elif isinstance(s, Loop):
                where = f"{s.loc.short} " if s.loc else ""
                self.lines.append(f"{indent}for i{s.slot} in range({s.trip}):"
                                  f"  # {where}{s.kind.value}")
                self.lines.append(f"{indent}    L[{s.slot}] = i{s.slot}")
                self.body(s.body, indent + "    ")
            else:
                raise TypeError(f"cannot emit {type(s).__name__}; run reroll first")


def generate(program: Program) -> Generated:
    """Emit the program's source and tables."""
    em = _Emitter(program)
    fname = "nki_" + "".join(c if c.isalnum() else "_" for c in program.name)
    header = [f"def {fname}(ADDR, H, S, PS, IT, FT, L):",
              f"    # {program.name}: core {program.core} of {program.num_cores}, "
              f"target {program.target}"]
    em.body(program.body, "    ")
    em.lines.append("    return -1")
    rows = np.stack(em.rows) if em.rows else np.zeros((1, ROW), np.int64)
    frows = np.stack(em.frows) if em.frows else np.zeros((1, NF), np.float64)
    return Generated(fname, "\n".join(header + em.lines) + "\n", rows, frows,
                     em.origins, em.locs, em.helpers)
