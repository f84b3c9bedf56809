"""Liveness on the unrolled trace: when each tensor is first and last used.

Two answers, for two questions:

* :func:`live_ranges` — how long our placement keeps a tensor's bytes. Longer than its uses
  where loops need it (a tile created before a loop stays live for the whole loop), so a tile
  re-allocated every iteration lands at the same address each time and reroll can fold the
  loop (nki/jit/allocate.py).
* :func:`exact_ranges` — first use to last use, as a compiler frees a tile after its last read
  (AWS: NKI's linear allocator "assigns an address to a tile at its first write and releases
  the address after its last read"). The capacity check (nki/jit/capacity.py) measures live
  bytes on these, so it is never stricter than a real allocator.

Both keep a tensor a runtime loop (``DynFor``/``DynWhile``) touches live for the whole loop
(the body was traced once but runs many times), except a tensor of the body's own: used only
inside the loop, its first use an instruction that overwrites all of it without reading it
(:func:`overwrites_whole`), or an on-chip one written in the body only by plain writes at
fixed places (:func:`plain_write`, in any order and extent) that the trace saw before every
read of its bytes. Every pass then rewrites it before reading it, so no value crosses
passes and its bytes may be shared with the body's other tiles, as a compiler's allocator
shares them within the body (AWS's blockwise MoE while-loop holds more PSUM tiles over one
pass than PSUM has banks; flash_paged_attn_varlen fills its body's buffers tile by tile).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nki.ir.nodes import DYN_LOOPS, Access, Instr, Program, RecordedLoop, TensorDecl
from nki.ir.ops import OobMode, Opcode

Frame = tuple[tuple[int, int], ...]   # the (loop, iteration) pairs around a statement


@dataclass
class Liveness:
    """What one pass over the unrolled trace learns, by instruction index (program order).

    Example:
        >>> live = walk_program(program)                          # doctest: +SKIP
        >>> first, last = exact_ranges(live)[tensor_id]           # doctest: +SKIP
    """

    uses: dict[int, tuple[int, int]] = field(default_factory=dict)  # tid -> first, last use
    frames: list[Frame] = field(default_factory=list)               # per instruction
    instrs: list[Instr] = field(default_factory=list)               # per instruction
    spans: list[list[int]] = field(default_factory=list)            # per loop: first, last
    dyn: set[int] = field(default_factory=set)                      # runtime loops
    born: dict[int, tuple[Frame, int]] = field(default_factory=dict)
    """tid -> (frame it was created in, last instruction of that iteration) for tensors
    created inside a recorded loop (``RecordedLoop.tensors``); the rest were created outside
    every recorded loop."""

    decls: dict[int, TensorDecl] = field(default_factory=dict)
    fresh: set[int] = field(default_factory=set)
    """Tensors first used inside a runtime loop by an instruction that overwrites all of them."""
    written_in: dict[int, int] = field(default_factory=dict)
    """tid -> the innermost runtime loop every write of the tensor is in, each a plain write
    at a fixed place (:func:`plain_write`); ``-1`` when some write is not that."""

    def visit(self, stmts, frame: Frame) -> None:
        for stmt in stmts:
            if isinstance(stmt, (RecordedLoop, *DYN_LOOPS)):
                loop = len(self.spans)
                self.spans.append([len(self.frames), len(self.frames)])
                if isinstance(stmt, RecordedLoop):
                    for k, body in enumerate(stmt.iterations):
                        self.visit(body, frame + ((loop, k),))
                        made = stmt.tensors[k] if k < len(stmt.tensors) else ()
                        for tid in made:
                            self.born[tid] = (frame + ((loop, k),), len(self.frames) - 1)
                else:
                    self.dyn.add(loop)
                    self.visit(stmt.body, frame + ((loop, 0),))
                self.spans[loop][1] = len(self.frames) - 1
            elif isinstance(stmt, Instr):
                self.visit_instr(stmt, frame)

    def visit_instr(self, stmt: Instr, frame: Frame) -> None:
        index = len(self.frames)
        in_dyn = bool(self.dyn) and any(lp in self.dyn for lp, _ in frame)
        uses = self.uses
        for role, acc in stmt.writes:
            if in_dyn and acc.tensor not in uses and \
                    overwrites_whole(stmt, role, acc, self.decls.get(acc.tensor)):
                self.fresh.add(acc.tensor)
            self.note_write(stmt, role, acc, frame)
            # indexes only grow: the first use is kept, the last is this one
            uses[acc.tensor] = (uses.get(acc.tensor, (index,))[0], index)
        for _, acc in stmt.reads:
            uses[acc.tensor] = (uses.get(acc.tensor, (index,))[0], index)
        self.frames.append(frame)
        self.instrs.append(stmt)

    def note_write(self, instr: Instr, role: str, acc: Access, frame: Frame) -> None:
        if not self.dyn:       # no runtime loop entered yet: none is around this write
            self.written_in[acc.tensor] = -1
            return
        loops = [lp for lp, _ in frame if lp in self.dyn]
        loop = loops[-1] if loops and plain_write(instr, role, acc) else -1
        if self.written_in.setdefault(acc.tensor, loop) != loop:
            self.written_in[acc.tensor] = -1

    def in_runtime_loop(self, index: int) -> bool:
        """Whether instruction ``index`` is inside a ``DynFor``/``DynWhile`` body."""
        return any(loop in self.dyn for loop, _ in self.frames[index])


def walk_program(program: Program) -> Liveness:
    """One walk over ``program``'s unrolled trace."""
    live = Liveness(decls={d.id: d for d in program.tensors})
    live.visit(program.body, ())
    live.fresh |= _written_before_read(live)
    for tid in live.fresh:                 # a body's own tensor is born where it is written
        first = live.uses[tid][0]
        if tid not in live.born:
            loop = next(lp for lp, _ in reversed(live.frames[first]) if lp in live.dyn)
            live.born[tid] = (live.frames[first], live.spans[loop][1])
    return live


def _written_before_read(live: Liveness) -> set[int]:
    """On-chip tensors used only inside one runtime loop's body and written there only by
    plain writes at fixed places (not in a runtime loop nested in it) that the trace saw
    before every read of their bytes: a read before any write got a fill before the
    outermost runtime loop (``insert_fresh_fills``), a write outside the body. Every pass
    then writes each byte it reads before reading it, so no value crosses passes, whatever
    the order and extent of the writes (AWS's flash_paged_attn_varlen writes its body's
    score and transpose buffers tile by tile)."""
    own = set()
    for tid, loop in live.written_in.items():
        decl = live.decls.get(tid)
        if loop < 0 or decl is None or not decl.memory.on_chip or tid not in live.uses:
            continue
        lo, hi = live.uses[tid]
        if live.spans[loop][0] <= lo and hi <= live.spans[loop][1]:
            own.add(tid)
    return own


def plain_write(instr: Instr, role: str, acc: Access) -> bool:
    """Whether ``instr`` writes every element of ``acc`` (its ``dst``) whenever it runs, at
    a place fixed at trace time: an overwriting instruction with no accumulation, skipped
    rows, index tile or register offset."""
    return role == "dst" and instr.opcode in _OVERWRITING and not instr.attr("accumulate") \
        and instr.attr("oob_mode", OobMode.error) == OobMode.error \
        and not instr.attr("indirect") and acc.offset.is_const and acc.partition.is_const


# instructions whose ``dst`` gets every element of the written view, none of it read first
_OVERWRITING = frozenset((
    Opcode.DMA_COPY, Opcode.DMA_TRANSPOSE, Opcode.TENSOR_COPY, Opcode.TENSOR_TENSOR,
    Opcode.TENSOR_SCALAR, Opcode.SCALAR_TENSOR_TENSOR, Opcode.TENSOR_REDUCE, Opcode.MEMSET,
    Opcode.IOTA, Opcode.ACTIVATION, Opcode.NC_TRANSPOSE, Opcode.NC_MATMUL))


def overwrites_whole(instr: Instr, role: str, acc: Access, decl: TensorDecl | None) -> bool:
    """Whether ``instr`` writes every element of ``decl`` through ``acc`` at a place fixed at
    trace time, without reading the tensor: a whole, contiguous view as ``dst`` of a plain
    overwriting instruction (no accumulating matmul, predicate, mask or skipped rows)."""
    if decl is None or role != "dst" or instr.opcode not in _OVERWRITING or \
            instr.attr("accumulate") or instr.attr("oob_mode", OobMode.error) != OobMode.error or \
            instr.attr("indirect") or acc.dtype != decl.dtype:
        return False
    if any(a.tensor == acc.tensor for _, a in instr.reads):
        return False
    if not (acc.offset.is_const and acc.offset.const == 0 and acc.partition.is_const
            and acc.partition.const == 0):
        return False
    dims = acc.dims if decl.memory.on_chip else ((1, 1),) + acc.dims
    if dims[0][1] != decl.partitions:
        return False
    stride = 1
    for step, count in reversed(dims[1:]):
        if count > 1 and step != stride:
            return False
        stride *= count
    return stride == decl.free_size


def _around_runtime_loops(live: Liveness, lo: int, hi: int, tid: int) -> tuple[int, int]:
    """``lo..hi`` widened to each runtime loop around either end, except loops holding all
    of a tensor whose first use overwrites it whole (see the module doc)."""
    if not live.dyn:
        return lo, hi
    inside = set(live.frames[lo]) & set(live.frames[hi]) if tid in live.fresh else set()
    for loop, k in live.frames[lo] + live.frames[hi]:
        if loop in live.dyn and (loop, k) not in inside:
            lo, hi = min(lo, live.spans[loop][0]), max(hi, live.spans[loop][1])
    return lo, hi


def exact_ranges(live: Liveness) -> dict[int, tuple[int, int]]:
    """First and last instruction index using each tensor (whole runtime loops included)."""
    return {tid: _around_runtime_loops(live, lo, hi, tid) for tid, (lo, hi) in
            live.uses.items()}


def live_ranges(live: Liveness) -> dict[int, tuple[int, int]]:
    """First and last statement index (in unrolled order) during which our placement keeps
    each tensor.

    A tensor is live from its first to its last use, with two exceptions, both about loops:

    * A tensor used inside a loop that it was created before stays live for that whole loop
      (as a compiler keeps a loop-invariant value): freeing it after its last use, or
      placing it only at its first use, would share its bytes with tiles of other
      iterations. Those iterations would then be laid out differently (and could not be
      folded), and the iterations of an ``affine_range``, which may run in parallel, would
      write the same bytes. What matters is where the tensor was *created*, which may be
      an earlier loop than its first use (a tile made in one loop and first written in the
      next): such a tensor is live from its creation.
    * A runtime loop (``DynFor``/``DynWhile``) was traced once but runs many times: every
      tensor its body touches is live for the whole loop, so no two of them share bytes."""
    made_by = _creation_bounds(live.uses)
    ranges = {}
    for tid, (lo, hi) in live.uses.items():
        born, it_end = live.born.get(tid, ((), lo))
        if born != live.frames[lo]:        # created in another iteration or outside a loop
            lo = min(lo, made_by[tid], it_end, _entry_of(live, born, live.frames[lo]))
            lo = max(lo, 0)
        lo, hi = _around_runtime_loops(live, lo, hi, tid)
        outer = {loop for loop, _ in born}
        for loop, _ in live.frames[hi]:
            if loop not in outer:          # created before this loop: live to its end
                hi = max(hi, live.spans[loop][1])
        ranges[tid] = (lo, hi)
    return ranges


def _creation_bounds(uses: dict[int, tuple[int, int]]) -> dict[int, int]:
    """An upper bound on where each tensor was created: the trace numbers tensors in
    creation order, so a tensor exists before any later-numbered tensor is first used."""
    bounds, soonest = {}, None
    for tid in sorted(uses, reverse=True):
        first = uses[tid][0]
        soonest = first if soonest is None else min(soonest, first)
        bounds[tid] = soonest
    return bounds


def _entry_of(live: Liveness, born: Frame, used: Frame) -> int:
    """The first instruction of the outermost loop around ``used`` that the tensor was
    created outside of, else a large number. (Created in an earlier iteration of a loop
    around ``used``: the end of that iteration bounds the creation better.)"""
    common = 0
    while common < min(len(born), len(used)) and born[common] == used[common]:
        common += 1
    if common == len(used) or (common < len(born) and born[common][0] == used[common][0]):
        return len(live.frames)
    return live.spans[used[common][0]][0]
