"""Tensor-engine family: ``nc_matmul`` (fp32 PSUM accumulation, bit-exact transpose mode)
and the bit-exact transposes ``nc_transpose`` / ``dma_transpose``.

Matmul products go through BLAS ``sgemm`` — ``nki_sgemm`` of nki/sim/blas.py (numpy's bundled
OpenBLAS when present). Compiled helpers call it by symbol; the python backend calls the very
same C function through ctypes, with the same arguments, so both backends get the same bits.

fp32 operands laid out as rows (a partition range × a contiguous free range — the usual
tile) are handed to sgemm *in place*: the partition stride of the arena is the matrix's
leading dimension, and accumulation into PSUM is sgemm's ``beta = 1``. Nothing is copied,
which roughly halves the time of a K-tiled matmul (each 128-deep product otherwise
gathers its inputs and reads, adds and writes back its PSUM tile). Other operands (bf16,
fp8, strided views) are decoded into contiguous fp32 first.

bf16 and fp8 operands (fp8 widened exactly to bf16) try the CPU's bf16 dot unit first
(``nki_bgemm``, nki/sim/bf16.py), which runs them in place as well and declines (the guard:
subnormals, inf/NaN, exponents whose products could underflow fp32) before touching PSUM;
the sgemm path then runs as before. fp16 and tf32 never use the unit (not exact in bf16).

A K loop (an IR loop whose body is one accumulating ``nc_matmul`` into the same PSUM tile,
its operands advancing with the loop) is run by one helper call (:func:`fold_k_loop`, asked
by codegen): on the bf16 unit as one folded ``nki_bgemm`` whose segments are the loop's
instructions, so PSUM is read and written once per loop instead of once per instruction
(each segment's sum is still added to PSUM as its own instruction's would be: the same
bits); elsewhere the helper runs the instructions one by one itself. The IR keeps the loop
(the cost model and the checks see every instruction); ``Kernel.profile`` counts the folded
row once per loop.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numba import njit
from numba.extending import overload

from nki.ir.affine import Affine
from nki.ir.nodes import Instr, Loop, Placed
from nki.ir.ops import Opcode
from nki.sim.blas import (
    NO_TRANS,
    ROW_MAJOR,
    TRANS,
    nki_bgemm,
    nki_bgemm_py,
    nki_sgemm,
    nki_sgemm_py,
)
from nki.sim.emit import emitter
from nki.sim.helpers.memory import (
    BF16,
    E4M3,
    E4M3FN,
    E5M2,
    _rows_layout,
    arena,
    copy_raw,
    element_offset,
    gather,
    load_bits,
    load_f32,
    shape_of,
    store_bits,
    store_f32,
)
from nki.sim.helpers.registry import helper
from nki.sim.layout import O_DTYPE, O_SPACE, PhysOperand, operand_base
from nki.sim.numerics import FP8_DECODE

OP0, OP1, OP2 = (operand_base(i) for i in range(3))


# ----- BLAS, identical in both backends (nki/sim/blas.py) -------------------------------------
def sgemm_rows(c, c_off, ldc, st, st_off, ldst, mv, mv_off, ldmv, M, N, K, accumulate):
    """``C[M, N] (+)= st[K, M].T @ mv[K, N]`` on row-major fp32 matrices inside flat arrays.

    Each matrix starts at an element offset of its flat fp32 array and has a row stride
    (``ld*``), so no operand is copied. ``accumulate`` is sgemm's ``beta = 1``.

    Example:
        >>> c = np.zeros(4, np.float32); a = np.ones(4, np.float32)
        >>> sgemm_rows(c, 0, 2, a, 0, 2, a, 0, 2, 2, 2, 2, False); c.tolist()
        [2.0, 2.0, 2.0, 2.0]
    """
    size = c.itemsize       # int(): numpy integers are no ctypes pointers (compile-free tier)
    nki_sgemm_py(ROW_MAJOR, TRANS, NO_TRANS, M, N, K, 1.0, int(st.ctypes.data + st_off * size),
                 ldst, int(mv.ctypes.data + mv_off * size), ldmv, 1.0 if accumulate else 0.0,
                 int(c.ctypes.data + c_off * size), ldc)


@overload(sgemm_rows, jit_options={"nogil": True})
def _sgemm_rows_numba(c, c_off, ldc, st, st_off, ldst, mv, mv_off, ldmv, M, N, K, accumulate):
    def impl(c, c_off, ldc, st, st_off, ldst, mv, mv_off, ldmv, M, N, K, accumulate):
        beta = np.float32(1.0) if accumulate else np.float32(0.0)
        nki_sgemm(ROW_MAJOR, TRANS, NO_TRANS, M, N, K, np.float32(1.0), st[st_off:].ctypes,
                  ldst, mv[mv_off:].ctypes, ldmv, beta, c[c_off:].ctypes, ldc)

    return impl


def bgemm_rows(c, c_off, ldc, st, st_off, ldst, st_step, mv, mv_off, ldmv, mv_step, M, N, K,
               nseg, accumulate):
    """:func:`sgemm_rows` for bf16 bit patterns (uint16 arrays) on the bf16 unit, over
    ``nseg`` segments (instructions) whose operands start ``st_step`` / ``mv_step`` elements
    apart; returns ``nki_bgemm``'s status (0 done; otherwise ``c`` is untouched)."""
    c2, s2, m2 = c.itemsize, st.itemsize, mv.itemsize
    return nki_bgemm_py(M, N, K, nseg, int(st.ctypes.data + st_off * s2), ldst, st_step,
                        int(mv.ctypes.data + mv_off * m2), ldmv, mv_step,
                        int(c.ctypes.data + c_off * c2), ldc, 1 if accumulate else 0)


@overload(bgemm_rows, jit_options={"nogil": True})
def _bgemm_rows_numba(c, c_off, ldc, st, st_off, ldst, st_step, mv, mv_off, ldmv, mv_step, M,
                      N, K, nseg, accumulate):
    def impl(c, c_off, ldc, st, st_off, ldst, st_step, mv, mv_off, ldmv, mv_step, M, N, K,
             nseg, accumulate):
        return nki_bgemm(M, N, K, nseg, st[st_off:].ctypes, ldst, st_step, mv[mv_off:].ctypes,
                         ldmv, mv_step, c[c_off:].ctypes, ldc, np.int32(1 if accumulate else 0))

    return impl


@njit(cache=True, nogil=True)
def _unit_dtype(code):
    """Whether the bf16 unit takes this dtype: bf16 itself, fp8 widened exactly."""
    return code == BF16 or code == E4M3 or code == E5M2 or code == E4M3FN


@njit(cache=True, nogil=True)
def _in_place_bf16(irow, base, rows, cols):
    """Whether a bf16 operand is read in place by the unit (rows of contiguous elements)."""
    n_rows, stride, length = _rows_layout(irow, base)
    return (irow[base + O_DTYPE] == BF16 and n_rows * length == rows * cols and length == cols
            and stride >= max(cols, 1))


@njit(cache=True, nogil=True)
def _bf16_matrix(H, S, PS, irow, base, L, rows, cols):
    """(flat uint16 bf16 bits, element offset, row stride) of a bf16/fp8 operand as a
    row-major ``rows x cols`` matrix: the arena itself for bf16 rows, else a widened copy
    (fp8 and bf16 values are exact in fp32, whose top half is then their bf16 encoding)."""
    if _in_place_bf16(irow, base, rows, cols):
        mem = arena(H, S, PS, irow[base + O_SPACE]).view(np.uint16)
        return mem, element_offset(irow, base, L), _rows_layout(irow, base)[1]
    code = irow[base + O_DTYPE]
    mem = arena(H, S, PS, irow[base + O_SPACE])
    P, F = shape_of(irow, base)
    if code == BF16:
        bits = gather(mem.view(np.uint16), element_offset(irow, base, L), irow, base, P, F)
        return bits.reshape(rows * cols), 0, cols
    out = np.empty(rows * cols, np.uint16)
    _widen_fp8_into(mem, irow, base, L, P, F, code, out, 0)
    return out, 0, cols


# bf16 encodings of every fp8 byte, per fp8 type code (row): the top halves of the exact
# fp32 values (fp8 values are exact in bf16)
_FP8_BF16 = (np.ascontiguousarray(FP8_DECODE).view(np.uint32) >> 16).astype(np.uint16)


@njit(cache=True, nogil=True)
def _widen_fp8_into(mem, irow, base, L, P, F, code, out, at):
    """An fp8 operand's values as bf16 bits into ``out[at:at + P * F]``, row-major: one
    table lookup per element, written where the caller wants it (a folded chain's segment),
    with the table built once at import rather than per call."""
    raw = gather(mem, element_offset(irow, base, L), irow, base, P, F).ravel()
    table = _FP8_BF16[code]
    for i in range(raw.size):
        out[at + i] = table[raw[i]]


@njit(cache=True, nogil=True)
def _matmul_on_unit(H, S, PS, irow, L, K, M, N, acc):
    """The matmul on the bf16 unit when both inputs are bf16/fp8 and dst is fp32 rows in
    place; False (nothing written) when it does not apply or the unit's guard declines."""
    if not (_unit_dtype(irow[OP1 + O_DTYPE]) and _unit_dtype(irow[OP2 + O_DTYPE])):
        return False
    c, c_off, ldc, in_place = _matrix(H, S, PS, irow, OP0, L, M, N, False)
    if not in_place:
        return False
    st, st_off, ldst = _bf16_matrix(H, S, PS, irow, OP1, L, K, M)
    mv, mv_off, ldmv = _bf16_matrix(H, S, PS, irow, OP2, L, K, N)
    return bgemm_rows(c, c_off, ldc, st, st_off, ldst, 0, mv, mv_off, ldmv, 0, M, N, K, 1,
                      acc) == 0


@njit(cache=True, nogil=True)
def _segments(H, S, PS, irow, base, L, slot, trip, rows, cols):
    """(flat bf16 bits, element offset, row stride, segment step) of an operand over a folded
    K loop's ``trip`` segments: the arena itself for bf16 rows read in place (the offset is
    affine in the loop slot, so consecutive segments are a constant step apart), else the
    segments widened one after another into one contiguous copy (fp8, strided views)."""
    if _in_place_bf16(irow, base, rows, cols):
        L[slot] = 1
        second = element_offset(irow, base, L)
        L[slot] = 0
        mem, off, ld = _bf16_matrix(H, S, PS, irow, base, L, rows, cols)
        return mem, off, ld, second - off
    size = rows * cols
    out = np.empty(trip * size, np.uint16)
    code = irow[base + O_DTYPE]
    mem = arena(H, S, PS, irow[base + O_SPACE])
    P, F = shape_of(irow, base)
    for i in range(trip):
        L[slot] = i
        if code == BF16:
            bits, off, _ = _bf16_matrix(H, S, PS, irow, base, L, rows, cols)
            out[i * size:(i + 1) * size] = bits[off:off + size]
        else:   # fp8 straight into its segment: no per-segment array
            _widen_fp8_into(mem, irow, base, L, P, F, code, out, i * size)
    L[slot] = 0
    return out, 0, cols, size


@njit(cache=True, nogil=True)
def _folded_on_unit(H, S, PS, irow, L, K, M, N, slot, trip, acc):
    """A folded K loop as one ``nki_bgemm`` of ``trip`` segments (loop slot ``slot`` = the
    segment), for bf16/fp8 operands and an fp32 PSUM tile in place; False (nothing written)
    otherwise or when the guard declines."""
    if not (_unit_dtype(irow[OP1 + O_DTYPE]) and _unit_dtype(irow[OP2 + O_DTYPE])):
        return False
    c, c_off, ldc, in_place = _matrix(H, S, PS, irow, OP0, L, M, N, False)
    if not in_place:
        return False
    st, st_off, ldst, st_step = _segments(H, S, PS, irow, OP1, L, slot, trip, K, M)
    mv, mv_off, ldmv, mv_step = _segments(H, S, PS, irow, OP2, L, slot, trip, K, N)
    return bgemm_rows(c, c_off, ldc, st, st_off, ldst, st_step, mv, mv_off, ldmv, mv_step,
                      M, N, K, trip, acc) == 0


@njit(cache=True, nogil=True)
def _matrix(H, S, PS, irow, base, L, rows, cols, wanted):
    """(flat fp32 array, element offset, row stride, in place) of an operand as a row-major
    ``rows x cols`` matrix.

    The arena itself when the operand is fp32 rows of contiguous elements; otherwise a
    contiguous fp32 copy (bf16, fp8, strided views), decoded only if ``wanted`` (a dst that
    is overwritten needs no decoding)."""
    n_rows, stride, length = _rows_layout(irow, base)
    if (irow[base + O_DTYPE] == 0 and n_rows * length == rows * cols and length == cols
            and stride >= max(cols, 1)):
        mem = arena(H, S, PS, irow[base + O_SPACE]).view(np.float32)
        return mem, element_offset(irow, base, L), stride, True
    if wanted:
        return load_f32(H, S, PS, irow, base, L).reshape(rows * cols), 0, cols, False
    return np.empty(rows * cols, np.float32), 0, cols, False


@njit(cache=True, nogil=True)
def _transpose_select(H, S, PS, irow, L, K, M, N):
    """Transpose mode: dst[m, n] = stationary[k, m] (bits) for the first k with
    moving[k, n] != 0, else 0; an identity ``moving`` gives ``stationary.T``."""
    sel = load_f32(H, S, PS, irow, OP2, L).reshape(K, N)
    src = load_bits(H, S, PS, irow, OP1, L, K, M)
    out = np.zeros((M, N), np.int64)
    for n in range(N):
        for k in range(K):
            if sel[k, n] != 0:
                out[:, n] = src[k, :]
                break
    store_bits(H, S, PS, irow, OP0, L, out)


# ----- helpers ------------------------------------------------------------------------------
@helper
@njit(cache=True, nogil=True)
def nc_matmul(H, S, PS, irow, frow, L):
    """dst[M, N] (+)= stationary[K, M].T @ moving[K, N] in fp32 (products exact, fp32
    accumulation), or the bit-exact transpose mode.

    ints: transpose, accumulate, row_split (2 for double_row: [K, 2, F] → [2K, F]), K, M, N,
    and for a folded K loop (:func:`fold_k_loop`) its slot and trip count (trip 0: none)."""
    split, K, M, N = irow[4], irow[5], irow[6], irow[7]
    slot, trip = irow[8], irow[9]
    acc = irow[3] == 1
    if trip > 0:    # a folded K chain: only its first instruction may store (acc False)
        if not _folded_on_unit(H, S, PS, irow, L, K * split, M, N, slot, trip, acc):
            for i in range(trip):    # the chain's instructions, one by one
                L[slot] = i
                _one_matmul(H, S, PS, irow, L, split, K, M, N, acc or i > 0)
        L[slot] = trip - 1
        return 0
    if irow[2] == 1:
        _transpose_select(H, S, PS, irow, L, K, M, N)
        return 0
    _one_matmul(H, S, PS, irow, L, split, K, M, N, acc)
    return 0


@njit(cache=True, nogil=True)
def _one_matmul(H, S, PS, irow, L, split, K, M, N, acc):
    """One (non-transpose) nc_matmul instruction, accumulating into dst or not: the bf16 unit
    if it takes it, else sgemm."""
    if _matmul_on_unit(H, S, PS, irow, L, K * split, M, N, acc):
        return
    st, st_off, ldst, _ = _matrix(H, S, PS, irow, OP1, L, K * split, M, True)
    mv, mv_off, ldmv, _ = _matrix(H, S, PS, irow, OP2, L, K * split, N, True)
    c, c_off, ldc, in_place = _matrix(H, S, PS, irow, OP0, L, M, N, acc)
    sgemm_rows(c, c_off, ldc, st, st_off, ldst, mv, mv_off, ldmv, M, N, K * split, acc)
    if not in_place:    # dst was a decoded copy: round and write it back
        store_f32(H, S, PS, irow, OP0, L, c.reshape(M, N))


@helper
@njit(cache=True, nogil=True)
def transpose_copy(H, S, PS, irow, frow, L):
    """dst = src bit-exactly, src read through dims the encoder permuted (the transposes)."""
    copy_raw(H, S, PS, irow, OP0, OP1, L)
    return 0


# ----- references (independent numpy oracles) -----------------------------------------------
def reference_matmul(stationary, moving, psum=None) -> np.ndarray:
    """Oracle: ``stationary.T @ moving`` in float64 of the decoded inputs (+ ``psum``)."""
    s = np.asarray(stationary).astype(np.float64)
    m = np.asarray(moving).astype(np.float64)
    out = s.reshape(s.shape[0], -1).T @ m.reshape(m.shape[0], -1)
    return out if psum is None else out + np.asarray(psum).astype(np.float64)


def reference_transpose(data) -> np.ndarray:
    """Oracle: the 2-D transpose with free dims flattened."""
    data = np.asarray(data)
    return data.reshape(data.shape[0], -1).T.copy()


def reference_dma_transpose(src, axes=None) -> np.ndarray:
    """Oracle: ``np.transpose`` with dma_transpose's default permutations."""
    src = np.asarray(src)
    default = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}[src.ndim]
    return np.transpose(src, axes or default).copy()


# ----- encoders -----------------------------------------------------------------------------
def _permuted(op: PhysOperand, ndim: int, axes) -> PhysOperand:
    """``op`` read in the order of its dims permuted by ``axes`` (placed dims are plain
    element strides, so the partition dim can move like any other)."""
    real = op.real_dims
    assert len(real) == ndim
    return PhysOperand(op.space, op.code, op.offset, tuple(real[a] for a in axes), op.tensor,
                       op.itemsize)


@emitter(Opcode.NC_MATMUL, nc_matmul, reference_matmul)
def encode_nc_matmul(ins, w, ops):
    slot, trip = ins.attr("k_fold", (0, 0))
    w.ints(int(ins.attr("transpose")), int(ins.attr("accumulate")), int(ins.attr("row_split")),
           int(ins.attr("k")), int(ins.attr("m")), int(ins.attr("n")), slot, trip)
    w.operand(ops["dst"]).operand(ops["stationary"]).operand(ops["moving"])


def fold_k_loop(loop: Loop) -> Instr | None:
    """The one-row replacement codegen emits for a K loop, or None: ``loop`` is a constant
    trip (>= 2) over one accumulating, non-transpose ``nc_matmul`` whose dst does not move
    with the loop and whose operands no register moves (so no instruction of it can fault).
    The instruction carries the loop as ``k_fold = (slot, trip)``; only codegen sees it."""
    if len(loop.body) != 1 or loop.trip.terms or int(loop.trip.const) < 2:
        return None
    ins = loop.body[0]
    if (not isinstance(ins, Instr) or ins.opcode is not Opcode.NC_MATMUL
            or ins.attr("transpose") or not ins.attr("accumulate")):
        return None
    for role, a, _ in ins.accesses():
        if not isinstance(a, Placed) or any(s < 0 for s, _ in a.offset.terms):
            return None
        if role == "dst" and any(s == loop.slot for s, _ in a.offset.terms):
            return None
    return replace(ins, attrs=ins.attrs + (("k_fold", (loop.slot, int(loop.trip.const))),))


def fold_k_chain(first: Instr, loop: Loop) -> Instr | None:
    """:func:`fold_k_loop` with the chain's first instruction taken in, or None: ``first`` is
    the loop's own instruction one iteration before the loop's first (the same source line
    and attributes, ``accumulate=False``, every operand one step back), so the row runs
    ``trip + 1`` segments and stores the first one's sum instead of adding it."""
    if (not isinstance(first, Instr) or first.opcode is not Opcode.NC_MATMUL
            or first.attr("accumulate")):
        return None
    folded = fold_k_loop(loop)
    if folded is None or first.loc != folded.loc:
        return None
    body, slot = loop.body[0], loop.slot

    def others(ins):
        return tuple((k, v) for k, v in ins.attrs if k != "accumulate")

    if others(first) != others(body):
        return None
    for (role, a, _), (role_first, b, _) in zip(body.accesses(), first.accesses()):
        if role != role_first or not isinstance(b, Placed) or (
                b.tensor, b.space, b.dtype, b.dims, b.offset) != (
                a.tensor, a.space, a.dtype, a.dims, a.offset.substitute(slot, -1)):
            return None
    earlier = Affine.var(slot) - 1     # iteration i of the new loop is the old i - 1
    attrs = tuple((k, False if k == "accumulate" else v) for k, v in body.attrs)
    return replace(body.map_accesses(
        lambda a: replace(a, offset=a.offset.substitute(slot, earlier))),
        attrs=attrs + (("k_fold", (slot, int(loop.trip.const) + 1)),))


@emitter(Opcode.NC_TRANSPOSE, transpose_copy, reference_transpose)
def encode_nc_transpose(ins, w, ops):
    ndim = len(ins.operand("data").dims)
    w.operand(ops["dst"]).operand(_permuted(ops["data"], ndim, tuple(range(1, ndim)) + (0,)))


@emitter(Opcode.DMA_TRANSPOSE, transpose_copy, reference_dma_transpose)
def encode_dma_transpose(ins, w, ops):
    ndim = len(ins.operand("src").dims)
    w.operand(ops["dst"]).operand(_permuted(ops["src"], ndim, ins.attr("axes")))
