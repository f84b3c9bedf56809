"""Emit: IR program → one readable Python function + the instruction tables it runs on.

Every instruction is one row of the tables; the function runs them in program order, each
row's origin in a comment. A row that a register moves gets a line of its own; a run of
plain rows is one row loop::

    def nki_softmax_rows(ADDR, H, S, PS, IT, FT, L):
        for i0 in range(8):                                  # softmax.py:5 affine_range
            L[0] = i0
            # 0: softmax.py:7 dma_copy ...
            # 1: softmax.py:8 tensor_reduce ...
            for k in range(0, 2):
                if run_instr(ADDR, H, S, PS, IT, FT, k, L): return k

It returns -1 when the program finished, or the index of the instruction that faulted. The
same source runs compiled by Numba or as plain Python; only ``run_instr`` differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from nki.ir.affine import Affine
from nki.ir.nodes import DynFor, DynWhile, Instr, Loop, Placed, Program, Reg
from nki.ir.ops import OobMode
from nki.ir.printer import format_instr_short
from nki.ir.types import Memory
from nki.sim.emit import EMITTERS, load_all
from nki.sim.emit.control import register_file_source
from nki.sim.emit.matmul import fold_k_chain, fold_k_loop
from nki.sim.helpers.registry import (
    WINDOW_SLOT,
    helper_id,
    helper_id_by_name,
    helper_name,
    is_row_wise,
)
from nki.sim.layout import NF, NSLOTS, ROW, PhysOperand, RowWriter
from nki.sim.record import SKIPPED_RUNS, loop_slots
from nki.sim.rowchain import chain_rows

# L[STOP_SLOT] is the stop word: another thread (nki/sim/runtime.py, on Ctrl-C) sets it while
# the program runs, and the program checks it before every instruction, so it stops within one
# instruction and returns the row it would have run next (slots 13-15 are the fault record).
STOP_SLOT = 12
ROW_SLOT = 11   # where a stopped program was: the row it did not run
# fault code (L[15]) of a runtime loop over its budget: L[13] = the loop's index in
# ``Generated.loops``, L[14] = the iterations it ran
FAULT_LOOP_BUDGET = 6

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
    notes: dict = field(default_factory=dict)   # row -> what its runtime checks require
    # every HBM operand: (row, offset column, tensor id, element size), int64 (n, 4)
    hbm_slots: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), np.int64))
    loops: list = field(default_factory=list)   # runtime loops: (SourceLoc or None, api)
    # partitions of the SBUF arena: 0 = the target's; more when placement put tensors in
    # overflow pages after them (spilled or unpackable tiles, nki/jit/allocate.py)
    sbuf_rows: int = 0
    psum_rows: int = 0       # the same for the PSUM arena (nki/jit/reorder.py)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_compiled", None)   # per-process compiled callables are not pickled
        state.pop("_helper_ids", None)  # nor this process's helper ids
        return state

    def compiled(self) -> dict:
        """Per-process cache of this program's compiled callables, by backend."""
        if "_compiled" not in self.__dict__:
            self.__dict__["_compiled"] = {}
        return self.__dict__["_compiled"]

    def bind_helpers(self) -> set[int]:
        """Write this process's helper ids into column 0; returns the ids used."""
        bound = self.__dict__.get("_helper_ids")
        if bound is None:   # ids are fixed per process: look the names up once, not per call
            load_all()
            ids = np.array([helper_id_by_name(name) for name in self.helpers], np.int64)
            bound = self.__dict__["_helper_ids"] = (ids, {int(i) for i in ids})
        ids, used = bound
        if ids.size:
            self.int_table[:ids.size, 0] = ids
        return set(used)


def phys(op: Placed) -> PhysOperand:
    return PhysOperand(SPACES[op.space], op.dtype.code, op.offset, op.dims, op.tensor,
                       op.dtype.itemsize)


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
        self.notes: dict[int, str] = {}
        self.depth = 0            # enclosing IR loops: their slots are taken
        self.uses_registers = False
        self.loops: list = []     # runtime loops emitted: (loc, api); names their variables
        # iterations one run of a runtime loop may take before it faults (0: no budget)
        self.loop_budget = int(dict(program.meta).get("loop_budget", 0))
        self.queued: list[int] = []   # plain rows not emitted yet (see ``flush``)
        self.queued_instrs: list[tuple[Instr, bool]] = []   # theirs: (instr, row-wise helper)
        self.row_chains = bool(dict(program.meta).get("row_chains", True))
        self.trips: dict[int, int] = {}   # enclosing loop slots: largest trip count
        self.hbm_slots: list[tuple[int, int, int, int]] = []

    def instr(self, ins: Instr, indent: str) -> None:
        """Encode ``ins`` as the next table row and emit its line; a plain row (no register
        moves it) is only queued, so a run of them becomes one row loop (``flush``)."""
        em = EMITTERS.get(ins.opcode)
        if em is None:
            raise NotImplementedError(f"no emitter for {ins.opcode.name}")
        hid = helper_id(em.helper)
        self.helpers.append(helper_name(hid))
        k = len(self.rows)
        writer = RowWriter(hid, int(ins.opcode), row=k)
        ins, pre, guard = self._dynamic(ins, k, indent)
        operands = {role: phys(a) for role, a, _ in ins.accesses()}
        em.encode(ins, writer, operands)
        self.hbm_slots.extend((k, col, t, isz) for col, t, isz in writer.hbm_slots)
        self.rows.append(writer.irow)
        self.frows.append(writer.frow)
        origin = format_instr_short(ins, self.program)
        self.origins.append(origin)
        self.locs.append(ins.loc)
        if ins.opcode.name.startswith("REGISTER_"):
            self.uses_registers = True
        if ins.attr("idx_lo") is not None and ins.attr("indirect"):
            self.notes[k] = f"valid indices are [{ins.attr('idx_lo')}, {ins.attr('idx_hi')}]"
        if not pre and not guard:
            self.queued.append(k)
            self.queued_instrs.append((ins, is_row_wise(hid)))
            return
        self.flush(indent)
        self.lines.extend(pre)
        if guard:    # oob_mode=skip: the instruction runs only when its registers are in range
            self.lines.append(f"{indent}if {guard}:")
            self.call_row(str(k), indent + "    ", f"  # {self.origins[k]}")
            self.lines.append(f"{indent}else:  # skipped: counted in the run record")
            self.lines.append(f"{indent}    {_bump(SKIPPED_RUNS)}")
            return
        self.call_row(str(k), indent, f"  # {self.origins[k]}")

    def call_row(self, k: str, indent: str, comment: str = "") -> None:
        """One instruction call site: the stop-word check, then the helper call."""
        self.lines.append(f"{indent}if L[{STOP_SLOT}]: L[{ROW_SLOT}] = {k}; return {k}")
        self.lines.append(f"{indent}if run_instr(ADDR, H, S, PS, IT, FT, {k}, L):"
                          f" return {k}{comment}")

    def flush(self, indent: str) -> None:
        """Emit the queued rows. Consecutive rows run as one ``for k in range(a, b)`` loop
        (each row names its helper, so one call site serves them all): Numba's compile time
        grows faster than linearly with call sites (measured: 100 lines 3 s, 400 lines
        17 s), so a program costs per straight-line run, not per instruction. Each row's
        origin stays as a comment above the loop. Stretches of the run that may run as row
        chains (``nki/sim/rowchain.py``) run their row loop once per partition chunk."""
        rows, self.queued = self.queued, []
        instrs, self.queued_instrs = self.queued_instrs, []
        if len(rows) == 1:
            self.call_row(str(rows[0]), indent, f"  # {self.origins[rows[0]]}")
            return
        if not rows:
            return
        self.lines.extend(f"{indent}# {k}: {self.origins[k]}" for k in rows)
        for a, b, chunk in self.stretches(instrs):
            if chunk:
                self.chain(rows[a], rows[b - 1], instrs[a][0], chunk, indent)
            elif b - a == 1:
                self.call_row(str(rows[a]), indent)
            else:
                self.lines.append(f"{indent}for k in range({rows[a]}, {rows[b - 1] + 1}):")
                self.call_row("k", indent + "    ")

    def stretches(self, instrs: list[tuple[Instr, bool]]) -> list[tuple[int, int, int]]:
        """The run cut into (start, end, chunk rows) stretches: each stretch of row-wise
        rows a row chain of ``chunk`` partitions at a time where legal, the rest 0 (plain);
        without row chains, the whole run plain."""
        if not self.row_chains:
            return [(0, len(instrs), 0)]
        out: list[tuple[int, int, int]] = []
        a = 0
        while a < len(instrs):
            b = a + 1
            while b < len(instrs) and instrs[b][1] == instrs[a][1]:
                b += 1
            chunk = chain_rows([i for i, _ in instrs[a:b]], [rw for _, rw in instrs[a:b]],
                               self.trips)
            if out and not chunk and not out[-1][2]:
                out[-1] = (out[-1][0], b, 0)    # plain next to plain: one loop
            else:
                out.append((a, b, chunk))
            a = b
        return out

    def chain(self, first_row: int, last_row: int, first: Instr, chunk: int,
              indent: str) -> None:
        """Rows ``first_row .. last_row`` once per chunk of ``chunk`` partitions: the chunk
        window in ``L[WINDOW_SLOT]`` (rows) and ``L[WINDOW_SLOT + 1]`` (first partition)
        makes each row-wise helper run only those partitions; cleared after the run."""
        parts = next(a.dims[0][1] for _, a, _ in first.accesses())
        self.lines.append(f"{indent}L[{WINDOW_SLOT}] = {chunk}  # row chain: {chunk} "
                          "partitions at a time")
        self.lines.append(f"{indent}for pc in range(0, {parts}, {chunk}):")
        self.lines.append(f"{indent}    L[{WINDOW_SLOT + 1}] = pc")
        self.lines.append(f"{indent}    for k in range({first_row}, {last_row + 1}):")
        self.call_row("k", indent + "        ")
        self.lines.append(f"{indent}L[{WINDOW_SLOT}] = 0")

    def _dynamic(self, ins: Instr, k: int, indent: str) -> tuple[Instr, list[str], str]:
        """Registers that move operands: load each into a free loop slot of ``L`` (the
        helpers add ``coef * L[slot]`` like any loop variable) and check its value against
        the bounds the trace computed. Returns the rewritten instruction, the lines to put
        before it, and the condition guarding it under ``oob_mode=skip``."""
        regs = sorted({-1 - s for _, a, _ in ins.accesses() if isinstance(a, Placed)
                       for s, _ in a.offset.terms if s < 0})
        if not regs:
            return ins, [], ""
        free = [s for s in range(NSLOTS - 1, self.depth - 1, -1)][:len(regs)]
        if len(free) < len(regs):
            raise NotImplementedError(f"{ins.loc}: too many registers moving one instruction "
                                      "inside deep loops")
        slot = dict(zip(regs, free))
        self.uses_registers = True

        def fix(a):
            if not isinstance(a, Placed):
                return a
            terms = sorted((slot[-1 - s] if s < 0 else s, c) for s, c in a.offset.terms)
            return replace(a, offset=Affine(a.offset.const, tuple(terms)))

        pre = [f"{indent}L[{slot[r]}] = R[{r}]" for r in regs]
        conds, notes = [], []
        for role, reg, lo, hi in ins.attr("dyn_checks", ()):
            conds.append(f"{lo} <= L[{slot[reg]}] <= {hi}")
            notes.append(f"register r{reg} (moving {role!r}) must be in [{lo}, {hi}]")
            if ins.attr("oob_mode") is not OobMode.skip:
                pre.append(f"{indent}if not ({conds[-1]}):  # {role} out of bounds")
                pre.append(f"{indent}    L[14] = L[{slot[reg]}]; L[15] = 2; return {k}")
        self.notes[k] = "; ".join(notes)
        guard = " and ".join(conds) if ins.attr("oob_mode") is OobMode.skip else ""
        return ins.map_accesses(fix), pre, guard

    def dyn_loop(self, s, indent: str) -> None:
        """A runtime loop over register values (the body was traced once)."""
        self.uses_registers = True
        n = len(self.loops)
        self.loops.append((s.loc, s.api))
        where = f"  # {s.loc.short} {s.api}" if s.loc else f"  # {s.api}"
        inner = indent + "    "
        if self.loop_budget:
            self.lines.append(f"{indent}c{n} = 0")
        slots = loop_slots(n)          # the run record's counters (nki/sim/record.py)
        if slots is not None:
            self.lines.append(f"{indent}{_bump(slots[1])}")
        if isinstance(s, DynFor):
            self.lines.append(f"{indent}for v{n} in range({_val(s.start)}, {_val(s.stop)}, "
                              f"{s.step}):{where}")
            if slots is not None:
                self.lines.append(f"{inner}{_bump(slots[0])}")
            self.count_trip(n, inner)
            self.lines.append(f"{inner}R[{s.var.id}] = v{n}")
            self.body(s.body, inner)
            return
        test = s.var if s.var is not None else s.cond
        if s.var is not None:
            self.lines.append(f"{indent}R[{s.var.id}] = R[{s.cond.id}]")
        self.lines.append(f"{indent}while R[{test.id}] != 0:{where}")
        if slots is not None:
            self.lines.append(f"{inner}{_bump(slots[0])}")
        self.count_trip(n, inner)
        if not s.body and s.var is None:   # nothing in it checks the stop word: check here
            row = max(len(self.rows) - 1, 0)
            self.lines.append(f"{inner}if L[{STOP_SLOT}]: L[{ROW_SLOT}] = {row}; return {row}")
        self.body(s.body, inner)
        if s.var is not None:
            self.lines.append(f"{inner}R[{s.var.id}] = R[{s.next_cond.id}]")

    def count_trip(self, n: int, indent: str) -> None:
        """Under a loop budget: count this run's iterations of runtime loop ``n`` and fault
        past the budget (the fault names the loop; the row returned is not used)."""
        if not self.loop_budget:
            return
        self.lines.append(f"{indent}c{n} = c{n} + 1")
        self.lines.append(f"{indent}if c{n} > {self.loop_budget}:")
        self.lines.append(f"{indent}    L[13] = {n}; L[14] = c{n} - 1; "
                          f"L[15] = {FAULT_LOOP_BUDGET}; return 0")

    def enter_loop(self, s: Loop) -> None:
        """Take the loop's slot; note its largest trip count (the row chains' bounds on
        offsets that move with it), unknown when it depends on what is not known."""
        self.depth += 1
        try:
            self.trips[s.slot] = int(s.trip.bounds(self.trips)[1])
        except KeyError:
            self.trips.pop(s.slot, None)

    def body(self, stmts, indent: str) -> None:
        stmts, i = list(stmts), 0
        while i < len(stmts):
            s, after = stmts[i], stmts[i + 1] if i + 1 < len(stmts) else None
            i += 1
            chain = fold_k_chain(s, after) if isinstance(after, Loop) else None
            if chain is not None:     # a K chain and its first matmul: one row (emit/matmul)
                self.instr(chain, indent)
                i += 1
                continue
            if isinstance(s, Instr):
                self.instr(s, indent)
                continue
            folded = fold_k_loop(s) if isinstance(s, Loop) else None
            if folded is not None:    # a K loop: one row (nki/sim/emit/matmul.py)
                self.instr(folded, indent)
                continue
            self.flush(indent)
            if isinstance(s, Loop):
                where = f"{s.loc.short} " if s.loc else ""
                self.lines.append(f"{indent}for i{s.slot} in range({s.trip}):"
                                  f"  # {where}{s.kind.value}")
                self.lines.append(f"{indent}    L[{s.slot}] = i{s.slot}")
                self.enter_loop(s)
                self.body(s.body, indent + "    ")
                self.depth -= 1
                self.trips.pop(s.slot, None)
            elif isinstance(s, (DynFor, DynWhile)):
                self.dyn_loop(s, indent)
            else:
                raise TypeError(f"cannot emit {type(s).__name__}; run reroll first")
        self.flush(indent)


def _bump(slot: int) -> str:
    """The line adding one to a run-record counter in the register file."""
    return f"R[{slot}] = R[{slot}] + 1"


def generate(program: Program) -> Generated:
    """Emit the program's source and tables."""
    em = _Emitter(program)
    fname = "nki_" + "".join(c if c.isalnum() else "_" for c in program.name)
    header = [f"def {fname}(ADDR, H, S, PS, IT, FT, L):",
              f"    # {program.name}: core {program.core} of {program.num_cores}, "
              f"target {program.target}"]
    em.body(program.body, "    ")
    em.lines.append("    return -1")
    if em.uses_registers:   # the register file, read by runtime loops and dynamic offsets
        header.append(f"    R = {register_file_source()}")
    rows = np.stack(em.rows) if em.rows else np.zeros((1, ROW), np.int64)
    frows = np.stack(em.frows) if em.frows else np.zeros((1, NF), np.float64)
    slots = np.array(em.hbm_slots, np.int64).reshape(-1, 4)
    return Generated(fname, "\n".join(header + em.lines) + "\n", rows, frows,
                     em.origins, em.locs, em.helpers, em.notes, slots, em.loops,
                     int(dict(program.meta).get("sbuf_rows", 0)),
                     int(dict(program.meta).get("psum_rows", 0)))


def _val(v: int | Reg) -> str:
    return f"R[{v.id}]" if isinstance(v, Reg) else str(int(v))
