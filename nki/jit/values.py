"""Value liveness for the SBUF capacity check under neuronx-cc's allocator.

A kernel often keeps one tile for a value it recomputes every iteration (nki-library's
cross-entropy allocates ``batch_chunk`` once and reloads it per vocabulary chunk). Between
a read of such a tile and a later instruction that overwrites all of it without reading it,
the tile holds no value anyone reads. neuronx-cc turns the kernel's reused buffers into
single values before it allocates (our reading of ``CompileConfig.non_ssa_legalization``;
AWS does not document its allocator's interference rule) and colours values, not tiles, so
it needs no bytes for the tile there. AWS tuned nki-library's cross-entropy at chunk sizes
that fit only under these rules. Two rules follow, both of a standard
interference graph (a value interferes with what is live *after* its definition):

* **dead gaps**: from just after the last read of one value of a tile to just before the
  whole overwrite that starts the next, the tile's bytes are not live;
* **dst over a dying source**: an element-wise instruction (each output element computed
  from the input elements at the same position, read before it is written, as NKI allows
  ``dst`` to be ``data`` itself) may write its result into the bytes of a source whose value
  it reads for the last time, when the two have the same shape and element size. There the
  two count once (the cross-entropy's 128 KiB ``tensor_scalar`` from ``batch_chunk`` into
  ``batch_exp_chunk`` on trn2's 192 KiB partitions).

Only straight-line uses of automatically placed tiles are considered: a tile a runtime loop
touches keeps its whole range (its uses repeat at run time), and so does an ``address=``
tile (the kernel's own placement). The simulation itself keeps every tile apart (in overflow
pages when our placement cannot pack them), so values stay exact.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from nki.ir.ops import Opcode
from nki.jit.liveness import Liveness, overwrites_whole

# each dst element from the same-position elements of its tensor operands
_ELEMENTWISE = frozenset((Opcode.TENSOR_TENSOR, Opcode.TENSOR_SCALAR,
                          Opcode.SCALAR_TENSOR_TENSOR, Opcode.ACTIVATION, Opcode.TENSOR_COPY))


def _value_uses(items, live: Liveness):
    """Per item index: its uses (instruction indices) and which of them start a new value
    (a whole overwrite, or the first use being a write); items in runtime loops left out."""
    index = {it.decl.id: k for k, it in enumerate(items) if it.spillable}
    uses: dict[int, list[int]] = defaultdict(list)
    starts: dict[int, set[int]] = defaultdict(set)
    for i, ins in enumerate(live.instrs):
        for role, acc, is_write in ins.accesses():
            k = index.get(acc.tensor)
            if k is None:
                continue
            if not uses[k] or uses[k][-1] != i:
                uses[k].append(i)
                if is_write and (len(uses[k]) == 1 or overwrites_whole(
                        ins, role, acc, items[k].decl)):
                    starts[k].add(i)
            elif not is_write:
                starts[k].discard(i)       # read too: the value carries on
    for k in [k for k, u in uses.items() if any(live.in_runtime_loop(i) for i in u)]:
        del uses[k]
    return uses, starts


def apply_value_liveness(items, profile: np.ndarray, live: Liveness) -> dict[int, set[int]]:
    """Take out of ``profile`` (instructions x bands, B/partition) the bytes the two rules
    of the module doc free. Returns, per tensor id, its dead gaps (gap ``j`` lies between
    its uses ``j-1`` and ``j``), which hold nothing to spill."""
    uses, starts = _value_uses(items, live)
    dying: dict[int, list[int]] = defaultdict(list)     # instruction -> items read last
    dead: dict[int, set[int]] = {}
    for k, u in uses.items():
        it = items[k]
        for j in range(1, len(u)):
            if u[j] in starts[k]:
                profile[u[j - 1] + 1:u[j], it.bands] -= it.nbytes
                dead.setdefault(it.decl.id, set()).add(j)
                if u[j - 1] not in starts[k]:
                    dying[u[j - 1]].append(k)
        if u[-1] not in starts[k]:
            dying[u[-1]].append(k)
    of_tensor: dict[int, list[int]] = defaultdict(list)   # tensor id -> its items, in order
    for k, it in enumerate(items):
        of_tensor[it.decl.id].append(k)
    for i, ks in dying.items():
        _share_dst(items, profile, live.instrs[i], i, ks, starts, of_tensor)
    return dead


def _share_dst(items, profile, ins, i: int, dying: list[int], starts,
               of_tensor: dict[int, list[int]]) -> None:
    """The ``dst`` of element-wise ``ins`` written over a source it reads for the last time."""
    if ins.opcode not in _ELEMENTWISE or ins.attr("accumulate"):
        return
    index = {items[k].decl.id: k for k in dying}
    dst = next((a for r, a in ins.writes if r == "dst"), None)
    # the first of dst's items whose value this instruction starts (a dict lookup, not a scan
    # of every item: 41 s of an output_proj_cte test with 23,486 dying instructions)
    born = None if dst is None else next(
        (k for k in of_tensor.get(dst.tensor, ()) if i in starts.get(k, ())), None)
    if born is None:
        return
    for _, src in ins.reads:
        k = index.get(src.tensor)
        if k is not None and src.dims == dst.dims and src.dtype.itemsize == dst.dtype.itemsize \
                and items[k].nbytes == items[born].nbytes and \
                np.array_equal(items[k].bands, items[born].bands):
            profile[i, items[born].bands] -= items[born].nbytes
            return
