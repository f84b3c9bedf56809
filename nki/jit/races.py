"""Race checks: the same bytes written by two parallel writers.

``err_unexpected_output_dependencies`` names both writes, their file:line and the region.

Two kinds of parallel writers exist (spec §1.5, §6.2):

* **LNC cores.** Under ``kernel[2]`` both cores run at once over one shared HBM; a location
  of ``shared_hbm`` written by both is a race even when they write identical values. Each core
  is traced separately (with its own ``program_id``), so every offset is static: the check
  compares the exact byte sets each core's program writes to shared HBM. Always on.
* **Iterations of ``nl.affine_range``.** The loop promises independent iterations; two of
  them writing one location is a loop-carried dependency. In the current dialect
  ``affine_range`` is plain ``range``, so this check is opt-in (``check_races=True`` /
  ``NKI_CHECK_RACES=1``). Exempt: ``nc_matmul`` accumulation into PSUM allocated outside the
  loop (the documented reduction idiom) and tiles allocated inside the loop body (each
  iteration has its own instance). ``sequential_range`` / ``static_range`` never race.

Both checks run on the traced, unrolled, placed program (before reroll), where every access
is concrete. Accesses become sorted byte intervals of physical memory (a key space with SBUF,
PSUM and HBM apart), so ``address=`` aliases are seen, and sets are compared with numpy
(sort + running max / searchsorted), never byte by byte in Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from nki.errors import NkiValidationError, fail
from nki.ir.nodes import Instr, Placed, Program, RecordedLoop, TensorDecl, walk
from nki.ir.ops import LoopKind, Opcode
from nki.ir.target import Target
from nki.ir.types import Memory

CODE = "err_unexpected_output_dependencies"
META_KEY = "lnc_writes"
_SPACE_BIT = 50  # SBUF/PSUM keys live above every HBM byte address
_SPACE = {Memory.SBUF: 1 << _SPACE_BIT, Memory.PSUM: 2 << _SPACE_BIT,
          Memory.PRIVATE_HBM: 0, Memory.SHARED_HBM: 0}
_EMPTY = np.zeros(0, np.int64)


# ----- byte intervals of one operand ---------------------------------------------------------

def operand_intervals(op: Placed) -> tuple[np.ndarray, np.ndarray] | None:
    """``(starts, ends)`` byte keys of the bytes a placed operand touches, or None when its
    offset is dynamic (not statically checkable).

    The set of bytes does not depend on the order of the dims, so dims are sorted by stride
    and the innermost ones that continue a contiguous run are folded into it: a row-major
    tile gives one interval per partition, not one per element."""
    if not isinstance(op, Placed) or not op.offset.is_const:
        return None
    isz = op.dtype.itemsize
    dims = sorted((s * isz, c) for s, c in op.dims if c > 1 and s != 0)
    run, rest = isz, []
    for stride, count in dims:
        if not rest and stride == run:
            run *= count
        else:
            rest.append((stride, count))
    starts = np.array([_SPACE[op.space] + op.offset.const * isz], np.int64)
    for stride, count in rest:
        starts = (starts[:, None] + np.arange(count, dtype=np.int64) * stride).reshape(-1)
    return starts, starts + run


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint, sorted union of a list of intervals."""
    if len(starts) <= 1:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), np.bool_)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], reach[last]


@dataclass
class WriteSet:
    """The bytes a list of instructions writes, with which instruction wrote each interval."""

    starts: np.ndarray
    ends: np.ndarray
    owner: np.ndarray          # index into ``items`` per interval
    items: list[tuple[Instr, Placed]]

    @staticmethod
    def of(items: list[tuple[Instr, Placed]], cache: dict) -> WriteSet:
        starts, ends, owners = [], [], []
        for n, (_, op) in enumerate(items):
            iv = cache.get(id(op))
            if iv is None:
                iv = operand_intervals(op) or (_EMPTY, _EMPTY)
                cache[id(op)] = iv
            starts.append(iv[0])
            ends.append(iv[1])
            owners.append(np.full(len(iv[0]), n, np.int32))
        if not items:
            return WriteSet(_EMPTY, _EMPTY, np.zeros(0, np.int32), [])
        return WriteSet(np.concatenate(starts), np.concatenate(ends),
                        np.concatenate(owners), list(items))

    def union(self) -> tuple[np.ndarray, np.ndarray]:
        return union(self.starts, self.ends)

    def writer_of(self, key: int) -> tuple[Instr, Placed]:
        """An instruction of this set (and its operand) that writes the byte ``key``."""
        hit = np.flatnonzero((self.starts <= key) & (self.ends > key))[0]
        return self.items[int(self.owner[hit])]


def intersection(a: tuple[np.ndarray, np.ndarray],
                 b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The intervals both disjoint sorted interval sets cover."""
    (as_, ae), (bs, be) = a, b
    first = np.searchsorted(be, as_, "right")
    count = np.maximum(np.searchsorted(bs, ae, "left") - first, 0)
    ia = np.repeat(np.arange(len(as_)), count)
    ib = np.repeat(first, count) + (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count,
                                                                        count))
    return np.maximum(as_[ia], bs[ib]), np.minimum(ae[ia], be[ib])


def first_overlap(a: tuple[np.ndarray, np.ndarray],
                  b: tuple[np.ndarray, np.ndarray]) -> tuple[int, int] | None:
    """The first overlapping byte range of two disjoint sorted interval sets, or None."""
    (as_, ae), (bs, be) = a, b
    if not len(as_) or not len(bs):
        return None
    hits = np.searchsorted(as_, be, "left") - np.searchsorted(ae, bs, "right")
    k = np.flatnonzero(hits > 0)
    if not len(k):
        return None
    k = int(k[0])
    j = int(np.searchsorted(ae, bs[k], "right"))
    return max(int(as_[j]), int(bs[k])), min(int(ae[j]), int(be[k]))


# ----- naming a byte range -------------------------------------------------------------------

def _element_index(decl: TensorDecl, key: int, target: Target) -> tuple[int, ...]:
    """The index of the element of ``decl`` holding byte ``key`` (a physical byte key)."""
    isz = decl.dtype.itemsize
    rel = key - _SPACE[decl.memory]
    if decl.memory.is_hbm:
        return tuple(int(i) for i in np.unravel_index((rel - decl.address[1]) // isz,
                                                      decl.shape))
    row = (target.sbuf_bytes_per_partition if decl.memory is Memory.SBUF
           else target.psum_bytes_per_partition)
    part = rel // row - decl.address[0]
    elem = (rel % row - decl.address[1]) // isz
    return (int(part),) + tuple(int(i) for i in np.unravel_index(elem, decl.shape[1:]))


def tensor_name(decl: TensorDecl) -> str:
    """The user's name for a tensor: its ``name=``, else the variable its creation line
    assigns (``out = nl.ndarray(...)``), else the generated name."""
    if decl.name != f"t{decl.id}" or decl.loc is None:
        return decl.name
    m = re.match(r"\s*([A-Za-z_]\w*)\s*(:[^=]*)?=[^=]", decl.loc.source_line())
    return m.group(1) if m else decl.name


def describe_overlap(decl: TensorDecl, op_a: Placed, op_b: Placed, target: Target) -> str:
    """``out[0, 0]..out[127, 63] (32768 bytes)``: the first and last element of ``decl`` both
    operands write, and how many bytes they share."""
    s, e = intersection(union(*operand_intervals(op_a)), union(*operand_intervals(op_b)))
    first = _element_index(decl, int(s.min()), target)
    last = _element_index(decl, int(e.max()) - 1, target)
    name = tensor_name(decl)

    def fmt(idx):
        return f"{name}[{', '.join(map(str, idx))}]"

    span = fmt(first) if first == last else f"{fmt(first)}..{fmt(last)}"
    return f"{span} ({int((e - s).sum())} bytes)"


def _site(instr: Instr) -> str:
    api = instr.opcode.name.lower()
    return f"{instr.loc.short} ({api})" if instr.loc else f"<unknown> ({api})"


def _written(instr: Instr):
    for _, op in instr.writes:
        if isinstance(op, Placed):
            yield op


# ----- affine_range iterations ---------------------------------------------------------------

def _created_in(stmts, rec_tensors: list[int]) -> set[int]:
    """Tensors created in one iteration, nested loops' iterations included."""
    made = set(rec_tensors)
    for s, _ in walk(stmts):
        if isinstance(s, RecordedLoop):
            for ids in s.tensors:
                made.update(ids)
    return made


def _exempt(instr: Instr, op: Placed) -> bool:
    """Writes that do not count: matmul accumulation into PSUM (the reduction idiom; the
    tensor is known to be allocated outside the loop) and the simulator's own fresh-tile
    fills."""
    if instr.opcode is Opcode.FILL_UNINIT:
        return True
    return (instr.opcode is Opcode.NC_MATMUL and op.space is Memory.PSUM
            and bool(instr.attr("accumulate")))


def _iteration_writes(rec: RecordedLoop, i: int, cache: dict) -> WriteSet:
    inner = _created_in(rec.iterations[i], rec.tensors[i] if i < len(rec.tensors) else [])
    items = [(s, op) for s, _ in walk(rec.iterations[i]) if isinstance(s, Instr)
             for op in _written(s) if op.tensor not in inner and not _exempt(s, op)]
    return WriteSet.of(items, cache)


def _cross_iteration(unions: list[tuple[np.ndarray, np.ndarray]]):
    """``(iter_a, iter_b, lo, hi)`` of the first byte range two iterations both write."""
    sizes = [len(u[0]) for u in unions]
    if sum(sizes) < 2:
        return None
    lab = np.repeat(np.arange(len(unions)), sizes)
    s = np.concatenate([u[0] for u in unions])
    e = np.concatenate([u[1] for u in unions])
    order = np.argsort(s, kind="stable")
    s, e, lab = s[order], e[order], lab[order]
    reach = np.maximum.accumulate(e)
    bad = np.flatnonzero(s[1:] < reach[:-1])
    if not len(bad):
        return None
    # each iteration's set is disjoint, so whatever reaches past s[k] is another iteration's
    k = int(bad[0]) + 1
    j = int(np.flatnonzero(e[:k] > s[k])[0])
    return int(lab[j]), int(lab[k]), int(s[k]), int(min(e[j], e[k]))


def check_affine_loop(rec: RecordedLoop, program: Program, target: Target,
                      cache: dict) -> None:
    """Raise if two iterations of one ``affine_range`` loop write the same bytes."""
    sets = [_iteration_writes(rec, i, cache) for i in range(len(rec.iterations))]
    hit = _cross_iteration([w.union() for w in sets])
    if hit is None:
        return
    a, b, lo, _ = hit
    instr_a, op_a = sets[a].writer_of(lo)
    instr_b, op_b = sets[b].writer_of(lo)
    region = describe_overlap(program.tensor(op_b.tensor), op_a, op_b, target)
    where = rec.loc.short if rec.loc else "<unknown>"
    raise fail(CODE, f"iterations {a} and {b} of the nl.affine_range loop at {where} both "
               f"write {region}: iteration {a} at {_site(instr_a)}, iteration {b} at "
               f"{_site(instr_b)}. The iterations of an affine_range loop must be independent: "
               "give each iteration its own locations, or use nl.sequential_range for a "
               "loop-carried dependency", rec.loc)


# ----- LNC cores -----------------------------------------------------------------------------

def shared_hbm_writes(program: Program) -> WriteSet:
    """Everything one core's program writes to shared HBM."""
    items = [(s, op) for s, _ in walk(program.body) if isinstance(s, Instr)
             and s.opcode is not Opcode.FILL_UNINIT
             for op in _written(s) if op.space is Memory.SHARED_HBM]
    return WriteSet.of(items, {})


def check_core_races(programs: list[Program], target: Target) -> list[Program]:
    """Raise if two LNC cores write the same shared HBM bytes; returns the programs without
    the write sets the races pass left in their meta."""
    sets = [dict(p.meta).get(META_KEY) for p in programs]
    stripped = [replace(p, meta=tuple(m for m in p.meta if m[0] != META_KEY))
                for p in programs]
    for c0 in range(len(sets)):
        for c1 in range(c0 + 1, len(sets)):
            if sets[c0] is None or sets[c1] is None:
                continue
            hit = first_overlap(sets[c0].union(), sets[c1].union())
            if hit is not None:
                raise _core_race(programs[c1], sets, c0, c1, hit, target)
    return stripped


def _core_race(program: Program, sets, c0: int, c1: int, hit, target) -> NkiValidationError:
    lo, _ = hit
    instr0, op0 = sets[c0].writer_of(lo)
    instr1, op1 = sets[c1].writer_of(lo)
    region = describe_overlap(program.tensor(op1.tensor), op0, op1, target)
    return fail(CODE, f"LNC cores {c0} and {c1} both write shared_hbm {region}: core {c0} at "
                f"{_site(instr0)}, core {c1} at {_site(instr1)}. Cores run at the same time, so "
                "this is a race even when both write the same values: give each core its own "
                "part of the output (index it with nl.program_id())", instr1.loc)


# ----- the pass ------------------------------------------------------------------------------

def check_races(program: Program, target: Target, affine: bool = False) -> Program:
    """The races pass (placed, not yet rerolled programs).

    Checks ``affine_range`` loops when ``affine`` is set (``check_races=True``); under an LNC
    launch it leaves this core's shared-HBM write set in ``program.meta`` for
    :func:`check_core_races`, which compares the cores once all are traced."""
    if affine:
        cache: dict = {}
        for s, _ in walk(program.body):
            if isinstance(s, RecordedLoop) and s.kind is LoopKind.AFFINE and \
                    len(s.iterations) > 1:
                check_affine_loop(s, program, target, cache)
    if program.num_cores > 1:
        program = replace(program, meta=program.meta + ((META_KEY, shared_hbm_writes(program)),))
    return program


__all__ = ["check_races", "check_core_races", "check_affine_loop", "operand_intervals",
           "union", "intersection", "first_overlap", "WriteSet", "describe_overlap"]
