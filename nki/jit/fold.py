"""Folding loops nobody recorded: plain Python ``for`` loops in a kernel (NKI 0.6 semantics:
every loop is unrolled by Python) leave runs of identical-looking instruction blocks. This pass
finds them by signature and folds each run whose operands advance affinely into a ``Loop``.

Greedy, left to right: at each position, take the period and repeat count covering the most
statements (ties: the shorter period). Repeating the pass until nothing changes builds loop
nests from the inside out; the loop slots inside a new outer loop shift down by one.
"""

from __future__ import annotations

import bisect
from dataclasses import replace

from nki.ir.affine import Affine
from nki.ir.nodes import Instr, Loop, Placed, RecordedLoop, loop_hints
from nki.ir.ops import LoopKind

MAX_PERIOD = 256


def signature(stmt) -> tuple:
    """What must be equal for two statements to be instances of one loop body statement."""
    if isinstance(stmt, Instr):
        # list comprehensions over writes then reads (what accesses() lists), no generator
        # objects: asked about every instruction at each nesting level it is folded at
        ops = [(role, a.space, a.dtype.code, a.dims) if type(a) is Placed else (role, id(a))
               for role, a in stmt.writes]
        ops += [(role, a.space, a.dtype.code, a.dims) if type(a) is Placed else (role, id(a))
                for role, a in stmt.reads]
        return ("i", stmt.opcode, stmt.attrs, loop_hints(stmt.hints), tuple(ops))
    if isinstance(stmt, Loop):
        return ("l", stmt.slot, tuple(signature(s) for s in stmt.body))
    return ("r", id(stmt))


def shift_slots(stmt, first: int):
    """Renumber loop slots >= ``first`` by +1 (the statement moves one loop deeper)."""

    def aff(a: Affine) -> Affine:
        if not any([s >= first for s, _ in a.terms]):
            return a          # the usual case in a trace: constant or outer-slot offsets
        return Affine(a.const, tuple((s + 1 if s >= first else s, c) for s, c in a.terms))

    def op(a):
        if not isinstance(a, Placed):
            return a
        offset = aff(a.offset)
        instance = a.instance
        if isinstance(instance, Affine):
            instance = aff(instance)
        elif instance is not None:          # a FreshInstance: its slots shift too
            instance = replace(instance, slots=tuple(s + 1 if s >= first else s
                                                     for s in instance.slots))
        if offset is a.offset and instance is a.instance:
            return a
        return Placed(a.tensor, a.space, a.dtype, offset, a.dims, instance)

    if isinstance(stmt, Instr):
        if all([op(a) is a for _, a, _ in stmt.accesses()]):
            return stmt
        return stmt.map_accesses(op)
    if isinstance(stmt, Loop):
        return replace(stmt, slot=stmt.slot + 1 if stmt.slot >= first else stmt.slot,
                       trip=aff(stmt.trip), body=tuple(shift_slots(s, first)
                                                       for s in stmt.body))
    return stmt


def _best_run(sigs: list, i: int, where: dict) -> tuple[int, int]:
    """(period, repeats) of the longest periodic run starting at ``i`` (repeats >= 2).
    Candidate periods are the distances to the next occurrences of ``sigs[i]``."""
    n = len(sigs)
    best = (0, 0)
    positions = where[sigs[i]]
    start = bisect.bisect_right(positions, i)
    for j in positions[start:]:
        k = j - i
        if k > MAX_PERIOD or 2 * k > n - i:
            break
        reps = 1
        while i + (reps + 1) * k <= n and \
                sigs[i + reps * k:i + (reps + 1) * k] == sigs[i:i + k]:
            reps += 1
        if reps >= 2 and k * reps > best[0] * best[1]:
            best = (k, reps)
    return best


class _Codes:
    """Signatures as small ints, each statement's worked out once per fold: a pass compares
    and hashes them many times (candidate periods, repeats), and a signature is a deep tuple
    whose hash is not kept. Equal ints exactly when the signatures are equal."""

    def __init__(self) -> None:
        self.of_sig: dict[tuple, int] = {}
        self.of_stmt: dict[int, tuple[object, int]] = {}  # id -> (the statement kept alive, code)

    def __call__(self, stmt) -> int:
        hit = self.of_stmt.get(id(stmt))
        if hit is not None and hit[0] is stmt:
            return hit[1]
        # a loop by its body's codes: equal exactly when the bodies' signatures are
        sig = ("l", stmt.slot, tuple([self(s) for s in stmt.body])) \
            if isinstance(stmt, Loop) else signature(stmt)
        code = self.of_sig.get(sig)
        if code is None:
            code = self.of_sig[sig] = len(self.of_sig)
        self.of_stmt[id(stmt)] = (stmt, code)
        return code


def fold_once(stmts: list, slot: int, make_loop, codes=None) -> tuple[list, bool]:
    """One greedy pass; ``make_loop(blocks, slot)`` unifies blocks or raises. ``codes``: a
    :class:`_Codes` kept across the passes over one statement list."""
    codes = codes or _Codes()
    sigs = [codes(s) for s in stmts]
    where: dict = {}
    for idx, sig in enumerate(sigs):
        where.setdefault(sig, []).append(idx)
    out, i, changed = [], 0, False
    # each statement shifted at most once per pass: a run that does not fold is retried from
    # the next position over nearly the same statements (shifting them again was most of
    # reroll's time in long unrolled traces)
    shifted: dict[int, object] = {}

    def shift(idx: int):
        s = shifted.get(idx)
        if s is None:
            s = shifted[idx] = shift_slots(stmts[idx], slot)
        return s

    while i < len(stmts):
        k, reps = _best_run(sigs, i, where)
        # shifted once: a shorter run retried is a prefix of the same blocks
        blocks = [[shift(i + j * k + m) for m in range(k)]
                  for j in range(reps)] if reps >= 2 else []
        loop, reps = _longest_loop(make_loop, blocks, slot)
        if loop is not None:
            out.append(loop)
            i += k * reps
            changed = True
        else:
            out.append(stmts[i])
            i += 1
    return out, changed


def _longest_loop(make_loop, blocks: list, slot: int) -> tuple[object, int]:
    """``(loop, n)`` for the longest prefix of ``blocks`` (n >= 2) that ``make_loop`` folds,
    ``(None, 0)`` when none does. A prefix of blocks whose offsets advance affinely advances
    affinely too, so the longest is found by bisection: trying every shorter run in turn
    unified O(n^2) blocks (215 of an output_proj_cte test's 333 s)."""
    if len(blocks) < 2:
        return None, 0
    try:
        return make_loop(blocks, slot), len(blocks)
    except Exception:  # offsets not affine in the iteration: a shorter run may be
        pass
    best, lo, hi = (None, 0), 2, len(blocks) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        try:
            best, lo = (make_loop(blocks[:mid], slot), mid), mid + 1
        except Exception:
            hi = mid - 1
    return best


def _may_repeat(stmts: list) -> bool:
    """Whether two statements could have equal signatures (a run needs two): keys that
    equal signatures always share. Most loop bodies (a recorded iteration: load, load,
    matmul) have none, and are then not signed at all."""
    seen = set()
    for s in stmts:
        if isinstance(s, Instr):
            key = (s.opcode, s.writes[0][1].dims if s.writes else None)
        elif isinstance(s, Loop):
            key = ("l", s.slot)
        else:
            key = ("r", id(s))
        if key in seen:
            return True
        seen.add(key)
    return False


def fold_plain_loops(stmts: list, slot: int, make_loop) -> list:
    """Fold every periodic run at this nesting level, repeatedly (inner loops first)."""
    if any(isinstance(s, RecordedLoop) for s in stmts) or not _may_repeat(stmts):
        return stmts
    changed, codes = True, _Codes()
    while changed and len(stmts) > 1:
        stmts, changed = fold_once(stmts, slot, make_loop, codes)
    return stmts


__all__ = ["fold_plain_loops", "LoopKind"]
