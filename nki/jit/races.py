"""Race checks: the same bytes written by two parallel writers.

``err_unexpected_output_dependencies`` names both writes, their file:line and the region.

Two kinds of parallel writers exist (spec §1.5, §6.2):

* **LNC cores.** Under ``kernel[2]`` both cores run at once over one shared HBM; a location
  of ``shared_hbm`` written by both is a race even when they write identical values, unless
  a ``nisa.core_barrier``, a collective or a ``sendrecv`` orders the two writes. Each core
  is traced separately (with its own ``program_id``), so its writes are concrete byte sets,
  labelled by *epoch* (how many synchronising instructions precede them). The runtime's
  matching rules (a core's k-th round on a rank group meets every member's k-th; mailboxes
  are FIFO per sender, receiver and channel) are replayed on those instructions to give
  every epoch a vector clock; only writes of epochs neither of which happens before the
  other are compared. A barrier is two-way; a one-way message orders only the sender's
  earlier writes before the receiver's later ones. A sync inside a runtime loop runs an
  unknown number of times, so then nothing is trusted to order anything. A write at a
  register offset or through an index tile (indirect DMA) counts as writing its whole
  tensor (sound; exact when the other core does not write that tensor), and the message
  says so. Always on.
* **Iterations of ``nl.affine_range``.** The loop promises independent iterations; two of
  them writing one location is a loop-carried dependency. In the current dialect
  ``affine_range`` is plain ``range``, so this check is opt-in (``check_races=True`` /
  ``NKI_CHECK_RACES=1``). Exempt: ``nc_matmul`` accumulation into PSUM allocated outside the
  loop (the documented reduction idiom) and tiles allocated inside the loop body (each
  iteration has its own instance). ``sequential_range`` / ``static_range`` never race.
  Writes at run-time offsets are not compared here (the check is opt-in and best effort).

Both checks run on the traced, unrolled, placed program (before reroll), where every access
not moved by a register or an index tile is concrete. Accesses become sorted byte intervals
of physical memory (a key space with SBUF, PSUM and HBM apart), so ``address=`` aliases are
seen, and sets are compared with numpy (sort + running max / searchsorted), never byte by
byte in Python.
"""

from __future__ import annotations

import warnings
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field, replace

import numpy as np

from nki.errors import NkiRaceWarning, NkiValidationError, fail
from nki.ir.intervals import union
from nki.ir.nodes import (
    DYN_LOOPS,
    Instr,
    Loop,
    Placed,
    Program,
    RecordedLoop,
    TensorDecl,
    walk,
)
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


@dataclass
class WriteSet:
    """The bytes a list of instructions writes, with which instruction wrote each interval.

    ``ivs[n]`` are the intervals of item ``n``; the flat ``starts``/``ends``/``owner`` arrays
    keep the items' order, so the intervals of a run of items are one slice."""

    starts: np.ndarray
    ends: np.ndarray
    owner: np.ndarray          # index into ``items`` per interval
    items: list[tuple[Instr, Placed]]
    ivs: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    @staticmethod
    def of(items: list[tuple[Instr, Placed]], cache: dict) -> WriteSet:
        """The write set of statically placed operands (a dynamic one counts as no bytes)."""
        ivs = []
        for _, op in items:
            iv = cache.get(id(op))
            if iv is None:
                iv = operand_intervals(op) or (_EMPTY, _EMPTY)
                cache[id(op)] = iv
            ivs.append(iv)
        return WriteSet.from_intervals(items, ivs)

    @staticmethod
    def from_intervals(items: list[tuple[Instr, Placed]],
                       ivs: list[tuple[np.ndarray, np.ndarray]]) -> WriteSet:
        """The write set of items whose intervals are already known."""
        if not items:
            return WriteSet(_EMPTY, _EMPTY, np.zeros(0, np.int32), [], [])
        owners = [np.full(len(iv[0]), n, np.int32) for n, iv in enumerate(ivs)]
        return WriteSet(np.concatenate([iv[0] for iv in ivs]),
                        np.concatenate([iv[1] for iv in ivs]),
                        np.concatenate(owners), list(items), list(ivs))

    def union(self, lo: int = 0, hi: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The union of the intervals ``lo:hi`` (all by default)."""
        return union(self.starts[lo:hi], self.ends[lo:hi])

    def writer_of(self, key: int, lo: int = 0, hi: int | None = None) -> int:
        """The index of an item (among intervals ``lo:hi``) that writes the byte ``key``."""
        s, e = self.starts[lo:hi], self.ends[lo:hi]
        hit = np.flatnonzero((s <= key) & (e > key))[0]
        return int(self.owner[lo + hit])


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
    row = target.arena_pitch(decl.memory)
    part = rel // row - decl.address[0]
    elem = (rel % row - decl.address[1]) // isz
    return (int(part),) + tuple(int(i) for i in np.unravel_index(elem, decl.shape[1:]))


def describe_overlap(decl: TensorDecl, op_a: Placed, op_b: Placed, target: Target) -> str:
    """``out[0, 0]..out[127, 63] (32768 bytes)``: the first and last element of ``decl`` both
    operands write, and how many bytes they share."""
    return describe_region(decl, operand_intervals(op_a), operand_intervals(op_b), target)


def describe_region(decl: TensorDecl, iv_a: tuple[np.ndarray, np.ndarray],
                    iv_b: tuple[np.ndarray, np.ndarray], target: Target) -> str:
    """:func:`describe_overlap` for two interval sets (``(starts, ends)`` byte keys)."""
    s, e = intersection(union(*iv_a), union(*iv_b))
    first = _element_index(decl, int(s.min()), target)
    last = _element_index(decl, int(e.max()) - 1, target)
    name = decl.user_name

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
    instr_a, op_a = sets[a].items[sets[a].writer_of(lo)]
    instr_b, op_b = sets[b].items[sets[b].writer_of(lo)]
    region = describe_overlap(program.tensor(op_b.tensor), op_a, op_b, target)
    where = rec.loc.short if rec.loc else "<unknown>"
    raise fail(CODE, f"iterations {a} and {b} of the nl.affine_range loop at {where} both "
               f"write {region}: iteration {a} at {_site(instr_a)}, iteration {b} at "
               f"{_site(instr_b)}. The iterations of an affine_range loop must be independent: "
               "give each iteration its own locations, or use nl.sequential_range for a "
               "loop-carried dependency", rec.loc)


# ----- LNC cores: what each core writes, and what orders it -------------------------------

@dataclass(frozen=True)
class Sync:
    """A synchronising instruction of one core (barrier, collective, sendrecv), as the
    runtime matches it: ``round`` is the rank group of a barrier/collective round (a core's
    k-th round on a group meets every member's k-th); ``sends``/``recvs`` are
    ``(peer, channel)`` mailboxes (FIFO per sender, receiver and channel)."""

    instr: Instr
    round: tuple[int, ...] | None = None
    sends: tuple[tuple[int, object], ...] = ()
    recvs: tuple[tuple[int, object], ...] = ()
    in_loop: bool = False       # inside a runtime loop: runs an unknown number of times


def sync_of(instr: Instr, in_loop: bool = False) -> Sync | None:
    """The ordering an instruction gives across cores, or None when it gives none
    (mirrors ``nki/sim/emit/collectives.py``)."""
    if instr.opcode is Opcode.CORE_BARRIER:
        return Sync(instr, round=tuple(instr.attr("cores")), in_loop=in_loop)
    if instr.opcode is Opcode.SENDRECV:
        ch = ("sendrecv", instr.attr("pipe_id"), instr.attr("reduce") is not None)
        return Sync(instr, sends=((instr.attr("send_to"), ch),),
                    recvs=((instr.attr("recv_from"), ch),), in_loop=in_loop)
    if instr.opcode is Opcode.COLLECTIVE:
        group = tuple(instr.attr("group"))
        if instr.attr("kind") != "collective_permute":
            return Sync(instr, round=group, in_loop=in_loop)
        to, frm = group
        return Sync(instr, sends=((to, "permute"),) if to >= 0 else (),
                    recvs=((frm, "permute"),) if frm >= 0 else (), in_loop=in_loop)
    if instr.opcode is Opcode.COLLECTIVE_V:
        return Sync(instr, round=tuple(instr.attr("group")), in_loop=in_loop)
    if instr.opcode is Opcode.PERMUTE_IMPLICIT:     # a ring: send on, receive from behind
        to, frm = instr.attr("ring")
        ch = ("implicit", instr.attr("op") is not None, instr.attr("channel"))
        return Sync(instr, sends=((to, ch),), recvs=((frm, ch),), in_loop=in_loop)
    return None


def _program_order(body, in_loop: bool = False):
    """``(instr, in_runtime_loop)`` in program order (recorded loops are unrolled)."""
    for s in body:
        if isinstance(s, Instr):
            yield s, in_loop
        elif isinstance(s, RecordedLoop):
            for it in s.iterations:
                yield from _program_order(it, in_loop)
        elif isinstance(s, (Loop,) + DYN_LOOPS):
            yield from _program_order(s.body, True)


@dataclass
class CoreWrites:
    """What the LNC check needs of one core: its shared-HBM writes in program order, each
    labelled with its epoch (how many synchronising instructions precede it; a sync's own
    writes land after it), the synchronising instructions, and which writes were widened to
    their whole tensor because their offsets are only known at run time."""

    writes: WriteSet
    epochs: np.ndarray          # per interval of ``writes``, non-decreasing
    syncs: list[Sync]
    whole: frozenset[int]       # indices into ``writes.items``


def _whole_tensor(program: Program, op: Placed) -> tuple[np.ndarray, np.ndarray]:
    """Every byte of the (HBM) tensor ``op`` writes."""
    decl = program.tensor(op.tensor)
    start = _SPACE[decl.memory] + decl.address[1]
    size = max(decl.free_size * decl.dtype.itemsize, 1)
    return np.array([start], np.int64), np.array([start + size], np.int64)


def shared_hbm_writes(program: Program) -> CoreWrites:
    """Everything one core's program writes to shared HBM, split into epochs.

    A write moved by a register (dynamic offset) or through an index tile (indirect rows)
    may touch any row at run time: it counts as writing its whole tensor (sound, and exact
    whenever the other core does not write that tensor)."""
    items, ivs, item_epochs, whole, syncs = [], [], [], set(), []
    for instr, in_loop in _program_order(program.body):
        sync = sync_of(instr, in_loop)
        if sync is not None:
            syncs.append(sync)
        if instr.opcode is Opcode.FILL_UNINIT:
            continue
        indirect = instr.attr("indirect", ())
        for role, op in instr.writes:
            if not isinstance(op, Placed) or op.space is not Memory.SHARED_HBM:
                continue
            iv = None if role in indirect else operand_intervals(op)
            if iv is None:
                whole.add(len(items))
                iv = _whole_tensor(program, op)
            items.append((instr, op))
            ivs.append(iv)
            item_epochs.append(len(syncs))
    ws = WriteSet.from_intervals(items, ivs)
    epochs = np.asarray(item_epochs, np.int64)[ws.owner] if items else _EMPTY
    return CoreWrites(ws, epochs, syncs, frozenset(whole))


class _Clocks:
    """Vector clocks of the cores' synchronising instructions, by running the runtime's
    matching rules on them: ``clocks[c][k][d]`` is how many of core ``d``'s synchronising
    instructions happen before core ``c``'s epoch ``k``. A core stuck in a wait (the launch
    would deadlock) keeps its last clock, which orders nothing new."""

    def __init__(self, syncs: list[list[Sync]]):
        n = len(syncs)
        self.syncs = syncs
        self.vc = np.zeros((n, n), np.int64)
        self.clocks = [[self.vc[c].copy()] for c in range(n)]
        self.mail: dict = defaultdict(deque)
        self.rounds: dict = defaultdict(dict)
        self.ordinal: Counter = Counter()
        self.posted: list = [None] * n     # the round key of a sync that started waiting

    def run(self) -> list[np.ndarray]:
        progress = True
        while progress:
            progress = False
            for c, mine in enumerate(self.syncs):
                # clocks[c] has one row per epoch so far: the next sync is mine[len - 1]
                while len(self.clocks[c]) <= len(mine) and \
                        self._step(c, mine[len(self.clocks[c]) - 1]):
                    progress = True
        for c, mine in enumerate(self.syncs):
            self.clocks[c] += [self.clocks[c][-1]] * (len(mine) + 1 - len(self.clocks[c]))
        return [np.array(cl, np.int64) for cl in self.clocks]

    def _step(self, c: int, s: Sync) -> bool:
        """Run core ``c``'s next sync as far as it can; True when it completed."""
        if self.posted[c] is None:      # first attempt: tick, send, post to the round
            self.vc[c, c] += 1
            for peer, ch in s.sends:
                self.mail[(c, peer, ch)].append(self.vc[c].copy())
            key = ()
            if s.round is not None:
                key = (s.round, self.ordinal[(c, s.round)])
                self.ordinal[(c, s.round)] += 1
                self.rounds[key][c] = self.vc[c].copy()
            self.posted[c] = key
        key = self.posted[c]
        if key and len(self.rounds[key]) < len(s.round):
            return False
        if any(not self.mail[(peer, c, ch)] for peer, ch in s.recvs):
            return False
        for peer, ch in s.recvs:
            self.vc[c] = np.maximum(self.vc[c], self.mail[(peer, c, ch)].popleft())
        for other in (self.rounds[key].values() if key else ()):
            self.vc[c] = np.maximum(self.vc[c], other)
        self.posted[c] = None
        self.clocks[c].append(self.vc[c].copy())
        return True


def epoch_clocks(syncs: list[list[Sync]]) -> list[np.ndarray]:
    """Per core, the vector clock of each epoch (``len(syncs[c]) + 1`` rows)."""
    if any(s.in_loop for mine in syncs for s in mine):
        # a sync in a runtime loop runs an unknown number of times, so the k-th call of one
        # core cannot be matched with the other's: trust no ordering at all
        n = len(syncs)
        return [np.zeros((len(mine) + 1, n), np.int64) for mine in syncs]
    return _Clocks(syncs).run()


def _concurrent_epochs(ca: np.ndarray, cb: np.ndarray, i: int, a: int, b: int):
    """The range ``[lo, hi]`` of core ``b``'s epochs that nothing orders against core ``a``'s
    epoch ``i`` (neither happens before the other); both clock columns never decrease."""
    lo = int(np.searchsorted(cb[:, b], ca[i, b], "left"))     # b's epoch not before a's i
    hi = int(np.searchsorted(cb[:, a], ca[i, a], "right")) - 1  # a's i not before b's epoch
    return lo, hi


def _pair_race(wa: CoreWrites, wb: CoreWrites, ca: np.ndarray, cb: np.ndarray, a: int,
               b: int):
    """``(lo, (a_slice), (b_slice))`` of the first byte cores ``a`` and ``b`` both write in
    epochs nothing orders, or None."""
    for i in np.unique(wa.epochs):
        jlo, jhi = _concurrent_epochs(ca, cb, int(i), a, b)
        if jlo > jhi:
            continue
        sa = (int(np.searchsorted(wa.epochs, i, "left")),
              int(np.searchsorted(wa.epochs, i, "right")))
        sb = (int(np.searchsorted(wb.epochs, jlo, "left")),
              int(np.searchsorted(wb.epochs, jhi, "right")))
        if sb[0] == sb[1]:
            continue
        hit = first_overlap(wa.writes.union(*sa), wb.writes.union(*sb))
        if hit is not None:
            return hit[0], sa, sb
    return None


def check_core_races(programs: list[Program], target: Target,
                     strict: bool = False) -> list[Program]:
    """Find two LNC cores writing the same shared HBM bytes with no barrier, collective or
    sendrecv ordering the two writes: an error when ``strict`` (``check_races=True``), else
    an ``NkiRaceWarning`` (AWS's own kernels have both cores store identical values, which
    hardware makes benign); returns the programs without the write sets the races pass left
    in their meta."""
    sets = [dict(p.meta).get(META_KEY) for p in programs]
    stripped = [replace(p, meta=tuple(m for m in p.meta if m[0] != META_KEY))
                for p in programs]
    if len(sets) < 2 or any(w is None for w in sets):
        return stripped
    clocks = epoch_clocks([w.syncs for w in sets])
    for c0 in range(len(sets)):
        for c1 in range(c0 + 1, len(sets)):
            hit = _pair_race(sets[c0], sets[c1], clocks[c0], clocks[c1], c0, c1)
            if hit is None:
                continue
            err = _core_race(programs[c1], sets, (c0, c1), hit, target, strict)
            if strict:
                raise err
            loc = err.loc
            warnings.warn_explicit(str(err), NkiRaceWarning, loc.filename if loc else "nki",
                                   loc.lineno if loc else 0)
    return stripped


def _core_race(program: Program, sets: list[CoreWrites], cores: tuple[int, int], hit,
               target: Target, strict: bool) -> NkiValidationError:
    (c0, c1), (key, s0, s1) = cores, hit
    n0, n1 = sets[c0].writes.writer_of(key, *s0), sets[c1].writes.writer_of(key, *s1)
    (instr0, _), (instr1, op1) = sets[c0].writes.items[n0], sets[c1].writes.items[n1]
    region = describe_region(program.tensor(op1.tensor), sets[c0].writes.ivs[n0],
                             sets[c1].writes.ivs[n1], target)
    if n0 in sets[c0].whole or n1 in sets[c1].whole:
        region += " (dynamic offsets: the whole tensor is assumed written)"
    return fail(CODE, f"LNC cores {c0} and {c1} both write shared_hbm {region}: core {c0} at "
                f"{_site(instr0)}, core {c1} at {_site(instr1)}, and no nisa.core_barrier, "
                "sendrecv or collective both cores reach orders the two writes. Cores run at "
                "the same time: the result is whichever write lands last, defined only if "
                "both write the same values" + ("" if strict else
                                                 " (check_races=True makes this an error)")
                + ". Give each core its own part of the output (index it with "
                "nl.program_id()), or put a nisa.core_barrier between the writes", instr1.loc)


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
           "union", "intersection", "first_overlap", "WriteSet", "CoreWrites", "Sync",
           "sync_of", "epoch_clocks", "shared_hbm_writes", "describe_overlap",
           "describe_region"]
