"""HBM for one call: the arena the program addresses (laid out with inputs, constants and the
never-written sentinel, pooled between calls), outputs read back out of it as the kernel
returned them, and big read-only inputs left where the caller has them.

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
import sys
import threading

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


def lay_out(spec, inputs) -> tuple[np.ndarray, set[int]]:
    """The HBM arena for one call and the inputs read in place (not copied into it)."""
    first = spec.cores[0]
    prog = first.program
    # HBM is laid out per call: inputs and constants copied in, outputs given the NaN/4
    # sentinel of never-written memory unless some core's trace proved that plain DMA writes
    # cover every byte (a 16 MB fill costs ~1.5 ms); internal HBM tensors need nothing
    # (reads of unwritten bytes were found while tracing)
    hbm = take_arena(max(dict(c.program.meta).get("hbm_bytes", 64) for c in spec.cores) or 64)
    in_place = in_place_inputs(spec, inputs)   # big read-only inputs are not copied
    for i, (ta, tid) in enumerate(zip(inputs, first.input_ids)):
        if i not in in_place:
            hbm_slice(hbm, prog, tid)[:] = ta.array.reshape(-1).view(np.uint8)
    for tid, data in first.constants.items():
        hbm_slice(hbm, prog, tid)[:] = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    covered = {i for c in spec.cores for i, t in enumerate(c.output_ids)
               if t in c.covered_outputs}
    returned_inputs = set(first.input_ids)   # an input the kernel returns keeps its data
    for i, tid in enumerate(first.output_ids):
        if i not in covered and tid not in returned_inputs:
            fill_unwritten(hbm_slice(hbm, prog, tid), prog.tensor(tid).dtype)
    return hbm, in_place


def written_inputs(hbm: np.ndarray, core, inputs):
    """``(argument, its bytes after the run)`` of every input the kernel wrote."""
    for ta, tid in zip(inputs, core.input_ids):
        if tid in core.written_inputs:
            yield ta, read_tensor(hbm, core.program, tid)


def returned_arrays(hbm: np.ndarray, core) -> list[np.ndarray]:
    """The outputs as the kernel returned them (views of this call's arena)."""
    prog = core.program
    views = dict(prog.meta).get("output_views") or [None] * len(core.output_ids)
    return [returned_array(hbm, prog, tid, view) for tid, view in zip(core.output_ids, views)]


# Big HBM arenas are kept for the next call: a fresh 32 MB one costs ~3 ms of page faults
# (softmax 4096x1024: 21 ms -> 18 ms). Outputs are views of their call's arena, so one is
# reused only when no view of it is alive (its reference count is back to the pool's own).
# Stale bytes are never observable: inputs are copied in, outputs filled, and reads of
# unwritten internal tensors were rejected while tracing. Arenas above _POOL_MAX_BYTES are
# not kept: their page faults are a small share of a call that big, and a process running many
# differently shaped calls (nki-library's suite: one process per file) would otherwise hold
# two multi-GB arenas it never reuses after each large test.
_POOL: list[np.ndarray] = []
_POOL_LOCK = threading.Lock()
_POOL_MIN_BYTES = 1 << 20   # smaller ones come from malloc's free lists anyway
_POOL_MAX_BYTES = 64 << 20
_POOL_SIZE = 2


def take_arena(nbytes: int) -> np.ndarray:
    """A 64-byte aligned arena of ``nbytes`` (a view of a pooled or new buffer: views of
    the buffer, outputs included, all name it as their base, so the pool's reference count
    test sees them)."""
    raw = None
    if nbytes >= _POOL_MIN_BYTES:
        with _POOL_LOCK:
            for i in range(len(_POOL)):
                # 2 = the pool's reference + getrefcount's argument: no output view alive
                if _POOL[i].size == nbytes + 64 and sys.getrefcount(_POOL[i]) == 2:
                    raw = _POOL.pop(i)
                    break
    if raw is None:
        raw = np.empty(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + nbytes]


def keep_arena(hbm: np.ndarray) -> None:
    """Offer a finished call's arena to the next call (only a mid-sized one: see _POOL)."""
    if _POOL_MIN_BYTES <= hbm.size <= _POOL_MAX_BYTES:
        with _POOL_LOCK:
            _POOL.append(hbm.base)
            del _POOL[:-_POOL_SIZE]   # the oldest go


def fill_unwritten(raw: np.ndarray, dtype) -> None:
    """The sentinel of never-written memory: NaN for floats, all-ones bits for packed MX
    words (NaN lanes in the fp8 formats; fp4 has no NaN), 4 for integers."""
    if not dtype.is_float:
        raw.view(dtype.host_dtype())[:] = 4
    elif dtype.packed != 1:
        raw[:] = 0xFF          # the x4 host dtypes hold bits, not values
    else:
        raw.view(dtype.host_dtype())[:] = np.nan


def hbm_slice(hbm: np.ndarray, prog, tid: int) -> np.ndarray:
    decl = prog.tensor(tid)
    start = decl.address[1]
    return hbm[start:start + decl.free_size * decl.dtype.itemsize]


def read_tensor(hbm: np.ndarray, prog, tid: int) -> np.ndarray:
    """An output as a view of this call's HBM arena (fresh per call, so nothing else writes
    it): returning views saves a copy of every output (4 ms for 16 MB)."""
    decl = prog.tensor(tid)
    return hbm_slice(hbm, prog, tid).view(decl.dtype.host_dtype()).reshape(decl.shape)


def returned_array(hbm: np.ndarray, prog, tid: int, view) -> np.ndarray:
    """An output as the kernel returned it: the tensor, or the view of it it returned
    (``(element offset, shape, element strides, dtype)``, e.g. ``out.reshape(...)``)."""
    if view is None:
        return read_tensor(hbm, prog, tid)
    offset, shape, strides, dtype = view
    typed = hbm_slice(hbm, prog, tid).view(dtype.host_dtype())
    return np.lib.stride_tricks.as_strided(typed[offset:], shape,
                                           tuple(s * typed.itemsize for s in strides))
