"""Number a traced kernel's virtual registers by live range (spec §1.5).

``nisa.register_alloc`` and every ``.ap(scalar_offset=tile)`` give the kernel a new
*virtual* register: AWS's docs say registers live in "a virtual register space" that needs
no freeing, and the compiler maps them onto each engine sequencer's 64 physical registers
"based on the dynamic program flow". So no documented limit applies to how many a kernel
allocates; only registers holding a value at the same time compete for the machine's. A
kernel such as nki-library's cross-entropy loads one register per position (thousands),
each read by the next DMA and never again.

This pass gives every virtual register a slot of the simulator's register file so that two
registers share a slot only when their live ranges (first to last reference, in program
order) do not overlap, and raises only when more are live at once than the file holds.
A register referenced inside a runtime loop is live for the whole loop (the body runs
again); one read before anything writes it keeps a slot no one used before, so it reads
the 0 of a fresh register file, as it did before numbering. The lowest free slot is taken
first, so the iterations of an unrolled loop get the same slots and fold alike (reroll).
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from nki.errors import SourceLoc, fail
from nki.ir.affine import Affine
from nki.ir.nodes import DYN_LOOPS, Access, DynFor, DynWhile, Instr, RecordedLoop, Reg
from nki.ir.ops import Opcode

_WRITES_REG = (Opcode.REGISTER_MOVE, Opcode.REGISTER_LOAD)


def instr_registers(ins: Instr) -> tuple[list[int], list[int]]:
    """(registers ``ins`` reads, registers it writes), by virtual id."""
    reads, writes = [], []
    reg = ins.attr("reg")
    if reg is not None:
        (writes if ins.opcode in _WRITES_REG else reads).append(reg)
    src = ins.attr("src_reg", -1)
    if src is not None and src >= 0:
        reads.append(src)
    reads.extend(r for _, r, _, _ in ins.attr("dyn_checks", ()))
    for _, a, _ in ins.accesses():
        if isinstance(a, Access):
            reads.extend(-1 - s for s, _ in a.offset.terms + a.partition.terms if s < 0)
    return reads, writes


class _Ranges:
    """Live ranges ``[first, last]`` of every register, over positions in program order."""

    def __init__(self):
        self.pos = 0
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.read_first: set[int] = set()

    def touch(self, reads, writes) -> set[int]:
        self.pos += 1
        for r in reads:
            if r not in self.first:
                self.read_first.add(r)
        for r in (*reads, *writes):
            self.first.setdefault(r, self.pos)
            self.last[r] = self.pos
        return set(reads) | set(writes)

    def visit(self, stmts) -> set[int]:
        """Record ``stmts``; returns the registers they reference."""
        seen: set[int] = set()
        for s in stmts:
            if isinstance(s, Instr):
                seen |= self.touch(*instr_registers(s))
            elif isinstance(s, RecordedLoop):
                for it in s.iterations:
                    seen |= self.visit(it)
            elif isinstance(s, DYN_LOOPS):
                seen |= self._dyn_loop(s)
        return seen

    def _dyn_loop(self, s) -> set[int]:
        head_reads, head_writes = _loop_registers(s)
        start = self.pos + 1
        inside = self.touch(head_reads, head_writes) | self.visit(s.body)
        end = self.pos
        for r in inside:       # the body runs again: whatever it touches lives throughout
            self.first[r] = min(self.first[r], start)
            self.last[r] = max(self.last[r], end)
        return inside


def _loop_registers(s) -> tuple[list[int], list[int]]:
    if isinstance(s, DynFor):
        return [b.id for b in (s.start, s.stop) if isinstance(b, Reg)], [s.var.id]
    reads = [s.cond.id, s.next_cond.id]
    return reads, ([s.var.id] if s.var is not None else [])


def assign_slots(ranges: _Ranges, capacity: int, sites: dict) -> dict[int, int]:
    """Linear scan: virtual id -> slot, lowest free slot first."""
    def start(r):          # read before written: live from the start, on a fresh slot
        return 0 if r in ranges.read_first else ranges.first[r]

    order = sorted(ranges.first, key=lambda r: (start(r), r))
    free: list[int] = []
    active: list[tuple[int, int]] = []        # (last position, slot)
    used = 0
    slots: dict[int, int] = {}
    for r in order:
        while active and active[0][0] < start(r):
            heapq.heappush(free, heapq.heappop(active)[1])
        if free:
            slot = heapq.heappop(free)
        elif used < capacity:
            slot, used = used, used + 1
        else:
            raise _full(r, len(active), capacity, sites.get(r))
        slots[r] = slot
        heapq.heappush(active, (ranges.last[r], slot))
    return slots


def _full(reg: int, live: int, capacity: int, loc: SourceLoc | None):
    return fail("nki_register_file_exceeded",
                f"{live + 1} virtual registers would be live at once (each from its first to "
                f"its last use; one used in a runtime loop, for the whole loop), more than "
                f"the simulator's register file holds ({capacity}); this one was allocated "
                "here. Hardware has 64 registers per engine sequencer: reuse a register "
                "(nisa.register_move / register_load into it) instead of allocating new ones",
                loc)


def number_registers(body: list, capacity: int, sites: dict) -> list:
    """``body`` with every virtual register renamed to its register-file slot."""
    ranges = _Ranges()
    ranges.visit(body)
    if not ranges.first:
        return body
    slots = assign_slots(ranges, capacity, sites)
    if all(v == k for k, v in slots.items()):
        return body
    return _rename(body, slots)


def _rename(stmts, slots: dict[int, int]) -> list:
    out = []
    for s in stmts:
        if isinstance(s, Instr):
            out.append(_rename_instr(s, slots))
        elif isinstance(s, RecordedLoop):
            out.append(replace(s, iterations=[_rename(it, slots) for it in s.iterations]))
        elif isinstance(s, DynFor):
            out.append(replace(s, var=Reg(slots[s.var.id]), start=_reg(s.start, slots),
                               stop=_reg(s.stop, slots), body=tuple(_rename(s.body, slots))))
        elif isinstance(s, DynWhile):
            out.append(replace(s, cond=Reg(slots[s.cond.id]),
                               next_cond=Reg(slots[s.next_cond.id]),
                               var=_reg(s.var, slots), body=tuple(_rename(s.body, slots))))
        else:
            out.append(s)
    return out


def _reg(value, slots):
    return Reg(slots[value.id]) if isinstance(value, Reg) else value


def _affine(a: Affine, slots) -> Affine:
    if not any(s < 0 for s, _ in a.terms):
        return a
    terms = sorted((-1 - slots[-1 - s] if s < 0 else s, c) for s, c in a.terms)
    return Affine(a.const, tuple(terms))


def _rename_instr(ins: Instr, slots) -> Instr:
    reads, writes = instr_registers(ins)
    if not reads and not writes:
        return ins

    def access(a):
        if not isinstance(a, Access):
            return a
        return replace(a, offset=_affine(a.offset, slots), partition=_affine(a.partition, slots))

    attrs = []
    for k, v in ins.attrs:
        if k == "reg":
            v = slots[v]
        elif k == "src_reg" and v >= 0:
            v = slots[v]
        elif k == "dyn_checks":
            v = tuple((role, slots[r], lo, hi) for role, r, lo, hi in v)
        attrs.append((k, v))
    return replace(ins.map_accesses(access), attrs=tuple(attrs))
