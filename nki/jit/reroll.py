"""Reroll: fold the iterations Python unrolled back into IR loops.

New-dialect loops run as Python, so the trace holds one block of instructions per iteration
(recorded by ``nl.affine_range`` and friends as :class:`RecordedLoop`). When every block has
the same instructions and each operand offset (and each inner trip count) is an affine function
of the iteration number, the blocks become one :class:`Loop` whose offsets use the loop slot.
A first or last iteration that differs (``accumulate=False`` on the first matmul of a K loop,
a partial edge tile) is peeled. IR size therefore does not grow with trip counts.

Runs on placed operands, so tiles reallocated every iteration (same address each time) and
tiles kept in a list (addresses in arithmetic progression) fold alike.
"""

from __future__ import annotations

from dataclasses import replace

from nki.ir import nodes
from nki.ir.affine import Affine
from nki.ir.nodes import (
    DYN_LOOPS,
    FreshInstance,
    Instr,
    Loop,
    Placed,
    Program,
    RecordedLoop,
    Stmt,
)
from nki.ir.ops import LoopKind
from nki.jit.fold import fold_plain_loops

NSLOTS_LIMIT = 7  # loop slots available to generated code (nki.sim.layout.NSLOTS - 1)


class _NoFoldError(Exception):
    pass


def _progression(values: list[Affine], slot: int) -> Affine:
    """``v0 + i_slot * d`` if values[t] == v0 + t*d for a constant d."""
    first = values[0]
    if len(values) == 1:
        return first
    # v == first + t*d, compared without building the Affines (called per operand of
    # every unrolled instruction); terms are canonical (sorted, no zero coefficients), so
    # the step is a constant exactly when the terms are equal
    c0, terms = first.const, first.terms
    if values[1].terms != terms:
        raise _NoFoldError
    d = values[1].const - c0
    for t, v in enumerate(values):
        if v.terms != terms or v.const != c0 + d * t:
            raise _NoFoldError
    return first + Affine.var(slot, d)


def _unify_operand(ops: list, slot: int, inputs: frozenset):
    """One operand for all instances. An HBM operand may walk across tensors (adjacent
    allocations whose addresses progress), but never into or out of an input: inputs may be
    read where the caller has them (nki/jit/hbm.py), so their distance from other tensors
    is only known per call."""
    first = ops[0]
    if not isinstance(first, Placed):
        raise _NoFoldError
    for o in ops[1:]:
        if not first.same_form(o):
            raise _NoFoldError
        if o.tensor != first.tensor and (o.tensor in inputs or first.tensor in inputs):
            raise _NoFoldError
    # the constructor, not dataclasses.replace: called per operand of every unrolled instruction
    return Placed(first.tensor, first.space, first.dtype,
                  _progression([o.offset for o in ops], slot), first.dims, _instances(ops, slot))


def _instances(ops: list, slot: int):
    """The instances the iterations' operands touch, as one ``Placed.instance``: None (one
    instance throughout), an Affine of the slots, or a FreshInstance when ids do not
    progress affinely."""
    if all([o.instance is None for o in ops]):
        # the usual case, on ints (called per operand of every unrolled instruction)
        t0 = ops[0].tensor
        step = ops[1].tensor - t0 if len(ops) > 1 else 0
        if all([o.tensor == t0 + step * k for k, o in enumerate(ops)]):
            return None if step == 0 else Affine(t0, ((slot, step),))
        return FreshInstance(t0, (slot,))
    ids = [Affine(o.tensor) if o.instance is None else o.instance for o in ops]
    if not any(isinstance(i, FreshInstance) for i in ids):
        try:
            return _progression(ids, slot)
        except _NoFoldError:
            pass
    inner = {s for i in ids for s in (i.slots if isinstance(i, FreshInstance)
                                      else (t for t, _ in i.terms))}
    first = ops[0].instance.first if isinstance(ops[0].instance, FreshInstance) else \
        ops[0].tensor
    return FreshInstance(first, tuple(sorted(inner | {slot})))


def _unify_instr(instrs: list[Instr], slot: int, inputs: frozenset) -> Instr:
    first = instrs[0]
    for x in instrs[1:]:
        if (x.opcode != first.opcode or x.attrs != first.attrs or
                not nodes.same_hints(x.hints, first.hints) or len(x.writes) !=
                len(first.writes) or len(x.reads) != len(first.reads)):
            raise _NoFoldError

    def group(field):
        rows = [getattr(x, field) for x in instrs]
        out = []
        for j, (role, _) in enumerate(rows[0]):
            if any(r[j][0] != role for r in rows):
                raise _NoFoldError
            out.append((role, _unify_operand([r[j][1] for r in rows], slot, inputs)))
        return tuple(out)

    return Instr(first.opcode, group("writes"), group("reads"), first.attrs, first.loc,
                 first.name, first.hints)


def _unify(stmts: list[Stmt], slot: int, inputs: frozenset) -> Stmt:
    first = stmts[0]
    if isinstance(first, Instr):
        if not all(isinstance(s, Instr) for s in stmts):
            raise _NoFoldError
        return _unify_instr(stmts, slot, inputs)
    if isinstance(first, Loop):
        if not all(isinstance(s, Loop) and s.slot == first.slot and
                   len(s.body) == len(first.body) for s in stmts):
            raise _NoFoldError
        stmts = _adopt_steps(stmts)
        first = stmts[0]
        trip = _progression([s.trip for s in stmts], slot)
        body = tuple(_unify([s.body[j] for s in stmts], slot, inputs)
                     for j in range(len(first.body)))
        return replace(first, trip=trip, body=body)
    raise _NoFoldError


def _adopt_steps(loops: list[Loop]) -> list[Loop]:
    """A one-trip loop has no step to read off its offsets (its variable is always 0); give
    it the steps of a sibling with more trips so the instances compare equal (a triangular
    nest's first row has one inner iteration)."""
    ref = next((lp for lp in loops if not (lp.trip.is_const and lp.trip.const <= 1)), None)
    if ref is None:
        return loops
    return [_with_steps(lp, ref) if lp.trip.is_const and lp.trip.const == 1 else lp
            for lp in loops]


def _with_steps(loop: Loop, ref: Loop) -> Loop:
    def fix_op(op, ref_op):
        if not isinstance(op, Placed) or not isinstance(ref_op, Placed):
            return op
        if not op.offset.coef(loop.slot) and ref_op.offset.coef(loop.slot):
            op = replace(op, offset=op.offset + Affine.var(loop.slot,
                                                           ref_op.offset.coef(loop.slot)))
        ref = ref_op.instance
        if op.instance is None and isinstance(ref, Affine) and ref.coef(loop.slot):
            # a new instance per iteration, as in ref
            op = replace(op, instance=Affine(op.tensor) + Affine.var(loop.slot,
                                                                      ref.coef(loop.slot)))
        return op

    body = []
    for s, r in zip(loop.body, ref.body):
        if isinstance(s, Instr) and isinstance(r, Instr) and len(s.writes) == len(r.writes) \
                and len(s.reads) == len(r.reads):
            s = replace(s, writes=tuple((k, fix_op(a, b[1])) for (k, a), b in
                                        zip(s.writes, r.writes)),
                        reads=tuple((k, fix_op(a, b[1])) for (k, a), b in zip(s.reads, r.reads)))
        body.append(s)
    return replace(loop, body=tuple(body))


def _make_loop(iters: list[list[Stmt]], slot: int, rec: RecordedLoop,
               inputs: frozenset) -> Loop:
    length = len(iters[0])
    if any(len(it) != length for it in iters):
        raise _NoFoldError
    body = tuple(_unify([it[j] for it in iters], slot, inputs) for j in range(length))
    return Loop(slot, Affine(len(iters)), body, rec.kind, rec.loc, rec.spmd_axis)


def _fold(rec: RecordedLoop, slot: int, inputs: frozenset) -> list[Stmt]:
    iters = [reroll_body(it, slot + 1, inputs) for it in rec.iterations]
    if not iters:
        return []
    if slot >= NSLOTS_LIMIT:    # no loop slot left this deep: the loop stays unrolled
        return [s for it in iters for s in it]
    n = len(iters)
    plans = [(0, n)]
    if n > 2:
        plans += [(1, n), (0, n - 1), (1, n - 1)]
    for lo, hi in plans:
        try:
            loop = _make_loop(iters[lo:hi], slot, rec, inputs)
        except _NoFoldError:
            continue
        out: list[Stmt] = [s for it in iters[:lo] for s in it]
        out.append(loop)
        out.extend(s for it in iters[hi:] for s in it)
        return out
    return [s for it in iters for s in it]


def reroll_body(stmts, slot: int = 0, inputs: frozenset = frozenset()) -> list[Stmt]:
    """Fold the recorded and plain loops of ``stmts`` (``inputs``: the program's input
    tensor ids, which an operand may not walk into or out of)."""
    out: list[Stmt] = []
    for s in stmts:
        if isinstance(s, RecordedLoop):
            out.extend(_fold(s, slot, inputs))
        elif isinstance(s, DYN_LOOPS):
            # a runtime loop stays as it is (it was traced once); only its body is folded
            out.append(replace(s, body=tuple(reroll_body(s.body, slot, inputs))))
        else:
            out.append(s)
    if slot < NSLOTS_LIMIT:
        def plain_loop(blocks: list[list[Stmt]], at: int) -> Loop:
            rec = RecordedLoop(LoopKind.PYTHON, getattr(blocks[0][0], "loc", None))
            return _make_loop(blocks, at, rec, inputs)

        out = fold_plain_loops(out, slot, plain_loop)
    return out


def reroll(program: Program) -> Program:
    """Fold every recorded loop (innermost first); unfoldable loops stay unrolled."""
    inputs = frozenset(program.inputs)
    return replace(program, body=tuple(reroll_body(program.body, 0, inputs)))
