"""HBM for one call: the arena the program addresses, with big read-only inputs left where the
caller has them.

A program addresses HBM as one flat byte array: every HBM tensor has an address in the
arena (placement) and every HBM operand an element offset from the arena's start (its
instruction row's offset column). Copying a 16 MB input into the arena costs ~2 ms, a
sixth of a 4096x1024 layernorm. So an input that no core writes is not copied: the helpers
get a view of the address range spanning the arena and those arrays, and a copy of each
core's instruction table whose HBM offsets are moved by the distance of each tensor from
the view's start (``Generated.hbm_slots`` lists every HBM operand with its tensor). Reads
see exactly the bytes a copy would have held; the arena is still where outputs, written
inputs and internal tensors live.
"""

from __future__ import annotations

import ctypes

import numpy as np

MIN_IN_PLACE_BYTES = 1 << 18   # below this a copy is cheaper than patching the tables


def in_place_inputs(spec, inputs) -> set[int]:
    """Indices of the inputs the program can read in place: at least 256 KiB, written by no
    core, and at an address every operand viewing them can reach in whole elements."""
    chosen = set()
    for i, ta in enumerate(inputs):
        if ta.array.nbytes < MIN_IN_PLACE_BYTES:
            continue
        addr = ta.array.ctypes.data
        if all(_readable_in_place(core, core.input_ids[i], addr) for core in spec.cores):
            chosen.add(i)
    return chosen


def _readable_in_place(core, tid: int, addr: int) -> bool:
    if tid in core.written_inputs:
        return False
    slots = core.generated.hbm_slots
    sizes = slots[slots[:, 2] == tid, 3]
    start = core.program.tensor(tid).address[1]
    # the shift of this tensor's operands, (addr - view start) - start, must be whole
    # elements; view starts are 64-byte aligned
    return all((addr - start) % int(s) == 0 for s in np.unique(sizes))


def hbm_for_call(spec, hbm: np.ndarray, inputs, chosen: set[int]):
    """``(view, tables)``: the byte array the helpers address and each core's instruction
    table; ``(hbm, None)`` (the arena and the programs' own tables) when nothing is read in
    place."""
    if not chosen or hbm.ctypes.data % 64:
        return hbm, None
    arrays = [inputs[i].array for i in sorted(chosen)]
    starts = [hbm.ctypes.data] + [a.ctypes.data for a in arrays]
    ends = [hbm.ctypes.data + hbm.nbytes] + [a.ctypes.data + a.nbytes for a in arrays]
    base = min(starts) & ~63
    size = (max(ends) - base + 63) & ~63
    view = np.frombuffer((ctypes.c_uint8 * size).from_address(base), np.uint8)
    tables = [_moved_table(core, hbm.ctypes.data - base,
                           {core.input_ids[i]: inputs[i].array.ctypes.data - base
                            for i in chosen})
              for core in spec.cores]
    return view, tables


def _moved_table(core, arena_shift: int, placed: dict[int, int]) -> np.ndarray:
    """A copy of ``core``'s instruction table with every HBM offset moved: by the arena's
    distance from the view's start, or (an input read in place) by its array's distance from
    where the arena would have held it."""
    g = core.generated
    g.bind_helpers()   # column 0 must hold this process's helper ids before the copy
    table = g.int_table.copy()
    slots = g.hbm_slots
    if len(slots) == 0:
        return table
    shift = np.full(len(slots), arena_shift, np.int64)
    for tid, where in placed.items():
        shift[slots[:, 2] == tid] = where - core.program.tensor(tid).address[1]
    table[slots[:, 0], slots[:, 1]] += shift // slots[:, 3]
    return table
