"""Indirect DMA (gathers, scatters, ``dma_compute`` scatter-add), ``nc_n_gather``, and the
host-call gathers ``local_gather`` and trn3 tensor indirection.

``dma_rows`` moves an access row by row (row = first dim: partitions on chip). Operands
marked indirect take row ``index[p]`` (times their first-dim stride, which the rule set to
the indexed dim's stride) instead of row ``p``; every index is checked against the range
the rule computed at trace time: out of range faults (fault 3: ``L[13]`` = row, ``L[14]`` =
index) or, under ``oob_mode.skip``, the row is skipped. Rows run in order, so repeated
indices of a scatter-add accumulate like ``np.add.at``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from nki.errors import NkiRuntimeError, fail
from nki.ir.ops import OobMode, Opcode
from nki.sim.emit import emitter
from nki.sim.emit.collectives import HostCall, host_call, host_op
from nki.sim.emit.control import registers
from nki.sim.helpers.memory import (
    _rows_layout,
    _width,
    arena,
    copy_raw,
    copy_row,
    element_offset,
    load_bits,
    load_f32,
    load_i64,
    shape_of,
    store_bits,
    store_f32,
)
from nki.sim.helpers.registry import helper
from nki.sim.layout import (
    MAX_OPERANDS,
    NSLOTS,
    O_COEF,
    O_COUNT,
    O_DTYPE,
    O_OFF,
    O_PARTS,
    O_SPACE,
    O_STRIDE,
    OPS,
    OPW,
    operand_base,
)
from nki.sim.record import SKIPPED_ROWS

DST, IDX, SRC0 = operand_base(0), operand_base(1), operand_base(2)
FAULT_INDEX, FAULT_GATHER = 3, 4   # codes in L[15] (see nki.sim.runtime)


@njit(cache=True, nogil=True)
def _row_view(irow, sub, offs, L):
    """``sub`` = ``irow`` with every operand cut to one row at a constant offset; ``offs``
    receives each operand's full element offset (loop and register terms applied)."""
    sub[:] = irow
    for k in range(MAX_OPERANDS):
        b = OPS + k * OPW
        if irow[b + O_SPACE] < 0:
            continue
        offs[k] = element_offset(irow, b, L)
        for s in range(NSLOTS):
            sub[b + O_COEF + s] = 0
        sub[b + O_COUNT] = 1
        sub[b + O_PARTS] = 1


@njit(cache=True, nogil=True)
def _row_bytes(sub, width):
    """Bytes per row when a row of dst and of src0 (``sub``: one row each) is one contiguous
    run of equal length and the two live in different arenas (so a row cannot overlap
    itself): then a row is a plain byte copy, where ``copy_raw`` re-derived the layout and
    checked overlap per row (~0.3 us a row: 39 us of a 128-row one-element gather). 0
    otherwise (the general path)."""
    ds, ss = sub[DST + O_SPACE], sub[SRC0 + O_SPACE]
    if ds == ss or (ds >= 2 and ss >= 2):     # spaces >= 2 share the PSUM arena
        return 0
    drows, _, dn = _rows_layout(sub, DST)
    srows, _, sn = _rows_layout(sub, SRC0)
    if drows != 1 or srows != 1 or dn != sn:
        return 0
    return dn * width


@helper
@njit(cache=True, nogil=True)
def dma_rows(H, S, PS, irow, frow, L):
    """dst row p = sum of the src rows (fp32), or their bits when there is one src of the
    same dtype. ints: nsrcs, indirect mask (bit k = operand k), has_index, lo, hi, skip,
    bitcopy. operands: dst, index, src0..src3."""
    nsrc, mask, has_idx, lo, hi, skip, bitcopy = (irow[2], irow[3], irow[4], irow[5],
                                                  irow[6], irow[7], irow[8])
    rows = irow[DST + O_COUNT]
    idx = np.zeros(rows, np.int64)
    if has_idx == 1:
        idx = load_i64(H, S, PS, irow, IDX, L).ravel()
    sub = irow.copy()
    offs = np.zeros(MAX_OPERANDS, np.int64)
    _row_view(irow, sub, offs, L)
    width = _width(irow[SRC0 + O_DTYPE])
    nbytes = _row_bytes(sub, width) if bitcopy == 1 else 0
    # the byte-copied rows' arenas, once: per row, two arena() calls and the slices of what
    # they returned cost an NRT incref and decref each (~60 ns a row)
    dmem, smem = arena(H, S, PS, sub[DST + O_SPACE]), arena(H, S, PS, sub[SRC0 + O_SPACE])
    for p in range(rows):
        if has_idx == 1 and (idx[p] < lo or idx[p] > hi):
            if skip == 1:
                registers(PS)[SKIPPED_ROWS] += 1      # the run record (nki/sim/record.py)
                continue
            L[13] = p
            L[14] = idx[p]
            L[15] = FAULT_INDEX
            return 1
        for k in range(MAX_OPERANDS):
            b = OPS + k * OPW
            if k != 1 and irow[b + O_SPACE] >= 0:
                r = idx[p] if (mask >> k) & 1 else p
                sub[b + O_OFF] = offs[k] + r * irow[b + O_STRIDE]
        if nbytes > 0:
            d0, s0 = sub[DST + O_OFF] * width, sub[SRC0 + O_OFF] * width
            copy_row(dmem[d0:d0 + nbytes], smem[s0:s0 + nbytes])
        elif bitcopy == 1:
            copy_raw(H, S, PS, sub, DST, SRC0, L)
        else:
            acc = load_f32(H, S, PS, sub, SRC0, L)
            for j in range(1, nsrc):
                acc = acc + load_f32(H, S, PS, sub, SRC0 + j * OPW, L)
            store_f32(H, S, PS, sub, DST, L, acc)
    return 0


def reference_dma_rows(table: np.ndarray, index: np.ndarray, skip: bool) -> np.ndarray:
    """Oracle of an indirect gather: rows of ``table`` by ``index`` (skipped rows: None)."""
    rows = [table[i] if 0 <= i < len(table) else None for i in np.ravel(index)]
    if not skip and any(r is None for r in rows):
        raise IndexError("index out of bounds")
    return rows


def _encode_rows(ins, w, ops):
    srcs = [k for k in range(4) if f"src{k}" in ops]
    indirect = ins.attr("indirect", ())
    mask = 1 if "dst" in indirect else 0
    for j in srcs:
        mask |= (1 << (2 + j)) if f"src{j}" in indirect else 0
    dst, src0 = ops["dst"], ops["src0"]
    bitcopy = len(srcs) == 1 and dst.code == src0.code
    w.ints(len(srcs), mask, int("index" in ops), ins.attr("idx_lo"), ins.attr("idx_hi"),
           int(ins.attr("oob_mode") is OobMode.skip), int(bitcopy))
    w.operand(dst).operand(ops.get("index"))
    for j in srcs:
        w.operand(ops[f"src{j}"])


@emitter(Opcode.DMA_INDIRECT, dma_rows, reference_dma_rows)
def encode_dma_indirect(ins, w, ops):
    _encode_rows(ins, w, ops)


@emitter(Opcode.DMA_COMPUTE, dma_rows)
def encode_dma_compute(ins, w, ops):
    _encode_rows(ins, w, ops)


@helper
@njit(cache=True, nogil=True)
def nc_n_gather(H, S, PS, irow, frow, L):
    """dst[p, j] = data[p, indices[p, j]] over each partition's flattened free elements
    (raw bits). operands: dst, data, indices."""
    P, N = shape_of(irow, OPS + OPW)
    M = shape_of(irow, OPS + 2 * OPW)[1]
    bits = load_bits(H, S, PS, irow, OPS + OPW, L, P, N)
    idx = load_i64(H, S, PS, irow, OPS + 2 * OPW, L)
    out = np.empty((P, M), np.int64)
    for p in range(P):
        for j in range(M):
            i = idx[p, j]
            if i < 0 or i >= N:
                L[13] = p
                L[14] = i
                L[15] = FAULT_GATHER
                return 1
            out[p, j] = bits[p, i]
    store_bits(H, S, PS, irow, DST, L, out)
    return 0


def reference_nc_n_gather(data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Oracle: ``np.take_along_axis`` on each partition's flattened row."""
    flat = data.reshape(data.shape[0], -1)
    return np.take_along_axis(flat, indices.reshape(indices.shape[0], -1).astype(np.int64),
                              axis=1).reshape(indices.shape)


@emitter(Opcode.NC_N_GATHER, nc_n_gather, reference_nc_n_gather)
def encode_nc_n_gather(ins, w, ops):
    w.operand(ops["dst"]).operand(ops["data"]).operand(ops["indices"])


# ----- local_gather and tensor indirection: host calls (numpy, both backends alike) ---------
GROUP = 16


def _fault(call: HostCall, what: str) -> None:
    text, loc = call.where()
    raise fail("nki_runtime_out_of_bounds", f"core {call.ctx.core}: {text}: {what}", loc,
               NkiRuntimeError)


def reference_local_gather(src: np.ndarray, index: np.ndarray, num_elem: int,
                           num_valid: int) -> np.ndarray:
    """Oracle: per group of 16 partitions, offsets = the group's index flattened partition
    first; ``out[p, j*E:(j+1)*E] = src[p].flatten()[off[j]:off[j]+E]`` (raw values)."""
    P = src.shape[0]
    flat, idx = src.reshape(P, -1), index.reshape(P, -1).astype(np.int64)
    out = np.empty((P, num_valid * num_elem), src.dtype)
    for g in range(0, P, GROUP):
        offs = idx[g:g + GROUP].flatten(order="F")[:num_valid]
        cols = (offs[:, None] + np.arange(num_elem)).reshape(-1)
        out[g:g + GROUP] = flat[g:g + GROUP][:, cols]
    return out


@host_op(Opcode.LOCAL_GATHER)
def _local_gather(call: HostCall) -> None:
    """ints: num_elem, num_valid. operands: dst, src, index."""
    ne, nv = int(call.irow[2]), int(call.irow[3])
    src, idx = call.bits(1), call.bits(2)
    n = src.shape[1]
    for g in range(0, src.shape[0], GROUP):
        offs = idx[g:g + GROUP].flatten(order="F")[:nv]
        bad = np.flatnonzero(offs + ne > n)
        if bad.size:
            _fault(call, f"index {int(offs[bad[0]])} (position {int(bad[0])} of partitions "
                   f"{g}..{g + GROUP - 1}) reads {ne} elements past the {n} of each partition")
    call.put_bits(0, reference_local_gather(src, idx, ne, nv))


@emitter(Opcode.LOCAL_GATHER, host_call, reference_local_gather)
def encode_local_gather(ins, w, ops):
    w.ints(ins.attr("num_elem"), ins.attr("num_valid"))
    w.operand(ops["dst"]).operand(ops["src"]).operand(ops["index"])


def _ti_columns(num_elem: int, group: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(column i, index row offset i % G, index column i // G) of the snake layout."""
    i = np.arange(num_elem)
    return i, i % group, i // group


def reference_tensor_gather(data: np.ndarray, index: np.ndarray, num_elem: int,
                            group: int = GROUP) -> np.ndarray:
    """Oracle of tensor indirection: in the group of ``group`` partitions starting at ``s``,
    column ``i`` of every partition reads flattened element ``index[s + i % G, i // G]``."""
    P = data.shape[0]
    flat, idx = data.reshape(P, -1), index.reshape(P, -1).astype(np.int64)
    _, r, c = _ti_columns(num_elem, group)
    out = np.empty((P, num_elem), data.dtype)
    for s in range(0, P, group):
        out[s:s + group] = flat[s:s + group][:, idx[s + r, c]]
    return out


def reference_tensor_scatter(data: np.ndarray, src: np.ndarray, index: np.ndarray,
                             group: int = GROUP) -> np.ndarray:
    """Oracle of a tensor-indirection destination: ``data`` with, in the group of ``group``
    partitions starting at ``s``, flattened element ``index[s + i % G, i // G]`` of every
    partition set to column ``i`` of ``src``. Columns are written in order, so of repeated
    offsets the last column wins."""
    P = data.shape[0]
    out = data.reshape(P, -1).copy()
    idx = index.reshape(P, -1).astype(np.int64)
    cols, r, c = _ti_columns(src.shape[1], group)
    for s in range(0, P, group):
        offs = idx[s + r, c]
        for i in cols:
            out[s:s + group, offs[i]] = src[s:s + group, i]
    return out.reshape(data.shape)


@host_op(Opcode.TENSOR_GATHER)
def _tensor_gather(call: HostCall) -> None:
    """ints: group, scatter. gather operands: dst (P, num_elem), data, index; scatter
    operands: dst (the indirect view), data (P, num_elem), index."""
    group, scatter = int(call.irow[2]), int(call.irow[3])
    data, idx = call.bits(1), call.bits(2)
    view = call.bits(0) if scatter else data
    num = data.shape[1] if scatter else call.shape(0)[1]
    _, r, c = _ti_columns(num, group)
    for s in range(0, view.shape[0], group):
        offs = idx[s + r, c]
        bad = np.flatnonzero(offs >= view.shape[1])
        if bad.size:
            _fault(call, f"tensor indirection offset {int(offs[bad[0]])} (column {int(bad[0])}, "
                   f"partitions {s}..{s + group - 1}) is outside the {view.shape[1]} elements "
                   "of each partition")
    if scatter:
        call.put_bits(0, reference_tensor_scatter(view, data, idx, group))
    else:
        call.put_bits(0, reference_tensor_gather(data, idx, num, group))


@emitter(Opcode.TENSOR_GATHER, host_call, reference_tensor_gather)
def encode_tensor_gather(ins, w, ops):
    w.ints(ins.attr("group"), int(bool(ins.attr("scatter", False))))
    w.operand(ops["dst"]).operand(ops["data"]).operand(ops["index"])
