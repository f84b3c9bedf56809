"""What the scheduler needs from a placed, rerolled program, computed once per IR node.

* each instruction's static cost (nki/cost/instr.py);
* each operand as a region of a *tensor family*: dependencies are between tensor instances,
  not between bytes of our placement (our allocator gives a tile re-allocated every
  iteration the same address, which would serialise every loop). A family is one tensor,
  or the tiles one rerolled operand walks across (a list of tiles created at one line), or
  every tensor the kernel placed itself (``address=``: there bytes are what the kernel
  fixed). Within a family, regions conflict by (partition, byte) overlap.
* rotation: a tile created anew in every iteration of a loop (its other instances were
  folded away by reroll) is a fresh instance per iteration, up to ``rotation_depth`` live
  copies (AWS's compiler colours and rotates its addresses; the depth is our assumption).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from nki.cost.facts import CostFacts
from nki.cost.instr import InstrCost, instr_cost
from nki.errors import NkiUnsupportedError, fail
from nki.ir.affine import Affine
from nki.ir.nodes import DYN_LOOPS, DynFor, Instr, Loop, Placed, Program
from nki.ir.ops import Opcode
from nki.ir.target import get_target
from nki.ir.types import Memory


@dataclass(frozen=True)
class OperandRef:
    """One operand of one instruction, for dependency tracking."""

    family: int
    write: bool
    offset: Affine            # element offset in its memory space
    pitch: int                # elements from one partition to the next (0: HBM, linear)
    partitions: int
    extent: int               # elements spanned inside a partition (or linearly in HBM)
    lo_shift: int             # how far negative strides reach below the offset
    itemsize: int
    owner: int                # loop id whose iterations make new instances, or -1
    by_bytes: bool            # family compared by bytes only (kernel-fixed addresses, HBM)


@dataclass
class StaticInstr:
    instr: Instr
    cost: InstrCost
    operands: tuple[OperandRef, ...]


@dataclass
class LoopNode:
    """A loop to expand. ``counts``: a runtime loop's trip count per execution, from a run
    record (``trip_counts=``); one count applies to every execution."""

    id: int
    slot: int
    trip: Affine
    body: list
    loc: object
    counts: tuple[int, ...] | None = None


@dataclass
class Prepared:
    """A program ready to be scheduled: ``body`` holds ints (indexes into ``instrs``) and
    :class:`LoopNode` s."""

    program: Program
    instrs: list[StaticInstr]
    body: list
    nloops: int
    # executed-instruction number -> [(static index of a spill DMA, tensor id)]
    spill_before: dict = field(default_factory=dict)
    spill_after: dict = field(default_factory=dict)


def _extent(op: Placed) -> tuple[int, int]:
    """(elements spanned inside a partition, reach below the offset) of the free dims."""
    dims = op.dims[1:] if op.space.on_chip else op.dims
    hi = lo = 0
    for stride, count in dims:
        span = stride * (count - 1)
        hi += max(0, span)
        lo += min(0, span)
    return hi - lo + 1, -lo


class _Families:
    """Union-find over tensor ids."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, t: int) -> int:
        p = self.parent.setdefault(t, t)
        if p != t:
            p = self.parent[t] = self.find(p)
        return p

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


FIXED_FAMILY = -1        # every kernel-placed (address=) on-chip tensor, by memory below


def prepare(program: Program, facts: CostFacts,
            trip_counts: dict | None = None) -> Prepared:
    """Walk the program once: costs, loop tree, operand families and rotation owners.

    ``trip_counts`` is a run record of the runtime loops whose trip counts are data:
    ``{"kernel.py:42": 3}`` (every execution of the loop at that line runs 3 times) or
    ``{"kernel.py:42": [3, 0, 5]}`` (per execution, in order)."""
    target = get_target(program.target)
    instrs: list[StaticInstr] = []
    raw: list[tuple[Instr, tuple[int, ...]]] = []     # instr and its enclosing loop ids
    counter = [0]
    trips: dict[int, Affine] = {}                       # loop id -> trip count

    def build(stmts, loops: tuple[int, ...]) -> list:
        out: list = []
        for s in stmts:
            if isinstance(s, Instr):
                out.append(len(raw))
                raw.append((s, loops))
            elif isinstance(s, Loop):
                lid = counter[0]
                counter[0] += 1
                node = LoopNode(lid, s.slot, s.trip, [], s.loc)
                trips[lid] = s.trip
                node.body = build(s.body, loops + (lid,))
                out.append(node)
            elif isinstance(s, DYN_LOOPS):
                out.append(_dynamic_loop(s, loops, build, counter, trip_counts or {}))
        return out

    body = build(program.body, ())
    families, owners = _analyse_tensors(program, raw, trips)
    folded = psum_zeros_folded([ins for ins, _ in raw])
    for k, (ins, _) in enumerate(raw):
        refs = tuple(_ref(a, w, program, target, families, owners)
                     for _, a, w in ins.accesses() if isinstance(a, Placed))
        cost = FOLDED_ZEROS if k in folded else instr_cost(ins, program, facts)
        instrs.append(StaticInstr(ins, cost, refs))
    return Prepared(program, instrs, body, counter[0])


# The zeros of a PSUM accumulator that a matmul accumulation group starts from are not an
# instruction on hardware: the trn1 architecture guide ("Near-memory accumulation in PSUM")
# names "a psum buffer with zeros" as condition 1 of the accumulation pattern, and the
# group's first nc_matmul overwrites the bank (the instruction's psum_zero flag, Neuron
# Explorer's glossary), so the compiler folds the fill into that matmul.
FOLDED_ZEROS = InstrCost("none", 0.0, note="nl.zeros folded into the first nc_matmul")
_MATMULS = (Opcode.NC_MATMUL, Opcode.NC_MATMUL_MX)


def psum_zeros_folded(static: list[Instr]) -> set[int]:
    """Indexes (into ``static``, the program's instructions in text order) of the
    ``nl.zeros`` PSUM fills whose tile is next touched by a matmul writing exactly the
    zeroed region: the start of an accumulation group, which costs no fill."""
    folded: set[int] = set()
    pending: dict[int, tuple[int, Placed]] = {}      # tensor id -> (fill index, its dst)
    for k, ins in enumerate(static):
        for _, a, write in ins.accesses():
            if not isinstance(a, Placed) or a.tensor not in pending:
                continue
            fill, dst = pending.pop(a.tensor)
            if (ins.opcode in _MATMULS and write and a.offset == dst.offset
                    and a.dims == dst.dims):
                folded.add(fill)
        if ins.opcode is Opcode.MEMSET and ins.hint("api") == "nl.zeros":
            dst = ins.operand("dst")
            if isinstance(dst, Placed) and dst.space is Memory.PSUM:
                pending[dst.tensor] = (k, dst)
    return folded


def _dynamic_loop(s, loops, build, counter, trip_counts: dict) -> LoopNode:
    """A runtime loop with constant bounds runs a known number of times; one whose trip count
    is data (registers, ``while``) needs its counts from a run record."""
    fixed, counts = None, None       # a count for every execution / one per execution
    if isinstance(s, DynFor) and isinstance(s.start, int) and isinstance(s.stop, int):
        fixed = max(0, -(-(s.stop - s.start) // s.step))
    elif s.loc is not None and (s.loc.short in trip_counts or
                                (s.loc.filename, s.loc.lineno) in trip_counts):
        given = trip_counts.get(s.loc.short, trip_counts.get((s.loc.filename, s.loc.lineno)))
        if isinstance(given, int):
            fixed = given
        else:
            counts = tuple(int(c) for c in given)
    if fixed is None and counts is None:
        where = s.loc.short if s.loc is not None else "the loop's line"
        raise fail("nki_cost_data_dependent", f"{s.api}: the trip count of this runtime loop "
                   "depends on data (register values), which the cost model cannot know from "
                   "the program alone; give the loop constant bounds, or pass its counts as a "
                   f"run record: nki.estimate(..., trip_counts={{{where!r}: n}})",
                   s.loc, NkiUnsupportedError)
    lid = counter[0]
    counter[0] += 1
    node = LoopNode(lid, -1, Affine(fixed or 0), [], s.loc, counts)
    node.body = build(s.body, loops + (lid,))
    return node


def _analyse_tensors(program: Program, raw, trips: dict[int, Affine]
                     ) -> tuple[_Families, dict[int, int]]:
    """Families (tiles one operand walks across) and rotation owners (tensor -> loop id).

    A tile rotates in the innermost loop holding all its uses when its creation line made
    at least as many instances as that loop has iterations (so it was created per
    iteration, not once before the loop by a helper that made others elsewhere)."""
    families = _Families()
    same_line: dict[tuple, list[int]] = defaultdict(list)
    for t in program.tensors:
        same_line[(t.site, t.memory, t.shape, t.dtype)].append(t.id)
    loops_of: dict[int, list[tuple[int, ...]]] = defaultdict(list)
    walked: set[int] = set()
    for ins, loops in raw:
        for _, a, _ in ins.accesses():
            if isinstance(a, Placed):
                loops_of[a.tensor].append(loops)
                if a.offset.terms and a.tensor not in walked:
                    walked.add(a.tensor)
                    _union_walk(program, a, families, same_line)
    referenced_per_family: dict[int, int] = defaultdict(int)
    for tid in loops_of:
        referenced_per_family[families.find(tid)] += 1
    owners: dict[int, int] = {}
    for tid, uses in loops_of.items():
        decl = program.tensor(tid)
        if not decl.memory.on_chip or decl.user_address or not decl.site:
            continue
        if len(same_line[(decl.site, decl.memory, decl.shape, decl.dtype)]) < 2:
            continue
        if referenced_per_family[families.find(tid)] > 1:
            continue            # a list of tiles: its members are distinct already
        common = _common_prefix(uses)
        if not common:
            continue
        trip = trips.get(common[-1])
        made = len(same_line[(decl.site, decl.memory, decl.shape, decl.dtype)])
        if trip is None or not trip.is_const or made >= trip.const:
            owners[tid] = common[-1]
    return families, owners


def _common_prefix(seqs: list[tuple[int, ...]]) -> tuple[int, ...]:
    first = seqs[0]
    n = min(len(s) for s in seqs)
    k = 0
    while k < n and all(s[k] == first[k] for s in seqs):
        k += 1
    return first[:k]


def _union_walk(program: Program, a: Placed, families: _Families,
                same_line: dict[tuple, list[int]]) -> None:
    """Join the tensor an operand names with the tensors of the same creation line (and
    shape) its offset may walk into: the loop reads a list of tiles through one operand."""
    t = program.tensor(a.tensor)
    for other in same_line[(t.site, t.memory, t.shape, t.dtype)]:
        families.union(t.id, other)


def _ref(a: Placed, write: bool, program: Program, target, families: _Families,
         owners: dict[int, int]) -> OperandRef:
    decl = program.tensor(a.tensor)
    extent, below = _extent(a)
    if a.space.on_chip:
        pitch = target.arena_pitch(a.space) // a.dtype.itemsize
        parts = a.dims[0][1] if a.dims else 1
    else:
        pitch, parts = 0, 1
    fixed = decl.memory.on_chip and decl.user_address
    family = (FIXED_FAMILY - list(type(a.space)).index(a.space)) if fixed \
        else families.find(a.tensor)
    by_bytes = fixed or not a.space.on_chip
    return OperandRef(family, write, a.offset, pitch, parts, extent, below,
                      a.dtype.itemsize, owners.get(a.tensor, -1), by_bytes)
