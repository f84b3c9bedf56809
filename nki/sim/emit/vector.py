"""Vector-engine elementwise family: ``tensor_tensor``, ``tensor_scalar``, ``tensor_copy``,
``memset``, ``reciprocal``. Arithmetic is fp32; bit operations and all-integer GpSimd math run
on exact integers."""

from __future__ import annotations

import numpy as np
from numba import njit

from nki.ir.ops import Opcode
from nki.sim import numerics as nm
from nki.sim.emit import emitter, imm
from nki.sim.emit.dma import dma_copy
from nki.sim.helpers import alu
from nki.sim.helpers.memory import (
    DIRECT_ROW_MIN,
    copy_row,
    float_row,
    float_rows,
    load_f32,
    load_i64,
    rows_same_or_apart,
    same_rows,
    shape_of,
    store_f32,
    store_i64,
)
from nki.sim.helpers.registry import helper
from nki.sim.layout import O_DTYPE, operand_base

OP0, OP1, OP2, OP3 = (operand_base(i) for i in range(4))


@njit(cache=True, nogil=True)
def _width(code):
    if code == 7 or code == 10 or code == 13:
        return 8
    if code == 8 or code == 11:
        return 16
    return 32


@njit(cache=True, nogil=True)
def _arith(op):
    """The operators alu.col_into / alu.row_into implement (add .. min)."""
    return op >= alu.ADD and op <= alu.MIN


@njit(cache=True, nogil=True)
def _direct_binary(H, S, PS, irow, L, op):
    """``dst = a op b`` straight in the arenas, row by row, when all three are fp32 or bf16
    rows of one shape and each input is the destination itself or apart from it; False
    (nothing written) else. fp32 rows are read and written in place; bf16 rows are decoded
    into fp32 rows, the operator runs in fp32 and a bf16 dst is rounded once per element, as
    the gathered path does, so the same bits. (bf16 [128, 1024] multiply: ~110 us gathered,
    two decoded copies, a result array and a rounding pass; fp32 in place ~30.)"""
    d32, dm, dh, do, ds, dr, dn = float_rows(H, S, PS, irow, OP0, L)
    a32, am, ah, ao, as_, ar, an = float_rows(H, S, PS, irow, OP1, L)
    b32, bm, bh, bo, bs, br, bn = float_rows(H, S, PS, irow, OP2, L)
    if dn < DIRECT_ROW_MIN or not _arith(op) or dr == 0 or ar != dr or br != dr or \
            an != dn or bn != dn or \
            not rows_same_or_apart(irow, OP1, a32, ao, as_, OP0, d32, do, ds, dr, dn) or \
            not rows_same_or_apart(irow, OP2, b32, bo, bs, OP0, d32, do, ds, dr, dn):
        return False
    a_here = d32 and a32 and same_rows(irow, OP0, do, ds, OP1, ao, as_)
    b_here = d32 and b32 and same_rows(irow, OP0, do, ds, OP2, bo, bs)
    # decode rows only for bf16 operands (fp32 rows are used where they lie)
    ta = np.empty(0 if a32 else dn, np.float32)
    tb = np.empty(0 if b32 else dn, np.float32)
    td = np.empty(0 if d32 else dn, np.float32)
    for r in range(dr):
        a = float_row(am, ah, a32, ao + r * as_, dn, ta)
        b = float_row(bm, bh, b32, bo + r * bs, dn, tb)
        d0 = do + r * ds
        d = dm[d0:d0 + dn] if d32 else td   # both rows are read before d is written
        if a_here:
            alu.row_into(op, d, b, False)
        elif b_here:
            alu.row_into(op, d, a, True)
        else:
            copy_row(d, a)
            alu.row_into(op, d, b, False)
        if not d32:
            nm.f32_to_bf16_into(td, dh[d0:d0 + dn])
    return True


@njit(cache=True, nogil=True)
def _direct_scalar(H, S, PS, irow, frow, L):
    """tensor_scalar straight in the arenas (fp32 or bf16 rows in and out, the data being the
    destination or apart from it, arithmetic operators); False (nothing written) else. fp32
    rows are computed in place in dst; bf16 rows are decoded into an fp32 row, computed there
    and rounded into dst once, as the gathered path does."""
    op0, rev0, has1, op1, rev1, t0, t1 = (irow[2], irow[3], irow[4], irow[5], irow[6],
                                          irow[7], irow[8])
    if not _arith(op0) or (has1 == 1 and not _arith(op1)):
        return False
    d32, dm, dh, do, ds, dr, dn = float_rows(H, S, PS, irow, OP0, L)
    x32, xm, xh, xo, xs, xr, xn = float_rows(H, S, PS, irow, OP1, L)
    if dn < DIRECT_ROW_MIN or dr == 0 or xr != dr or xn != dn or \
            not rows_same_or_apart(irow, OP1, x32, xo, xs, OP0, d32, do, ds, dr, dn):
        return False
    x_here = d32 and x32 and same_rows(irow, OP0, do, ds, OP1, xo, xs)
    # the [P, 1] operands are read before anything is written (they may lie in dst)
    c0 = _scalar_operand_f32(H, S, PS, irow, frow, OP2, 0, t0, L)
    c1 = _scalar_operand_f32(H, S, PS, irow, frow, OP3, 1, t1, L) if has1 == 1 else c0
    tmp = np.empty(dn, np.float32)
    for r in range(dr):
        x0, d0 = xo + r * xs, do + r * ds
        d = dm[d0:d0 + dn] if d32 else tmp
        if x32 and not x_here:
            copy_row(d, xm[x0:x0 + dn])
        elif not x32:
            nm.bf16_to_f32_into(xh[x0:x0 + dn], d)
        alu.col_into(op0, d, c0[r if c0.shape[0] > 1 else 0, 0], rev0 == 1)
        if has1 == 1:
            alu.col_into(op1, d, c1[r if c1.shape[0] > 1 else 0, 0], rev1 == 1)
        if not d32:
            nm.f32_to_bf16_into(tmp, dh[d0:d0 + dn])
    return True


@helper(row_wise=True)
@njit(cache=True, nogil=True)
def tensor_tensor(H, S, PS, irow, frow, L):
    """dst = data1 op data2 (ints: op, int_math)."""
    op = irow[2]
    if irow[3] == 0 and _direct_binary(H, S, PS, irow, L, op):
        return 0
    if irow[3] == 1:
        a = load_i64(H, S, PS, irow, OP1, L)
        b = load_i64(H, S, PS, irow, OP2, L)
        store_i64(H, S, PS, irow, OP0, L, alu.binary_i64(op, a, b, _width(irow[OP0 + O_DTYPE])))
    else:
        a = load_f32(H, S, PS, irow, OP1, L)
        b = load_f32(H, S, PS, irow, OP2, L)
        store_f32(H, S, PS, irow, OP0, L, alu.binary_f32(op, a, b))
    return 0


@njit(cache=True, nogil=True)
def _scalar_operand_f32(H, S, PS, irow, frow, base, imm_index, is_tile, L):
    if is_tile == 1:
        return load_f32(H, S, PS, irow, base, L)           # (P, 1): broadcasts over N
    return np.full((1, 1), np.float32(frow[imm_index]), np.float32)


@njit(cache=True, nogil=True)
def _scalar_operand_i64(H, S, PS, irow, frow, base, imm_index, is_tile, L):
    if is_tile == 1:
        return load_i64(H, S, PS, irow, base, L)
    return np.full((1, 1), np.int64(frow[imm_index]), np.int64)


@njit(cache=True, nogil=True)
def _apply_f32(op, x, s, reverse):
    return alu.binary_col_f32(op, x, s, reverse == 1)


@njit(cache=True, nogil=True)
def _apply_i64(op, x, s, reverse, width):
    out = np.empty_like(x)
    out[...] = alu.binary_i64(op, s, x, width) if reverse == 1 else \
        alu.binary_i64(op, x, s, width)
    return out


@njit(cache=True, nogil=True)
def _wrap_i32(x):
    """Two's-complement wrap of int64 values to int32's range."""
    return ((x + np.int64(2147483648)) & np.int64(4294967295)) - np.int64(2147483648)


@helper(row_wise=True)
@njit(cache=True, nogil=True)
def tensor_scalar(H, S, PS, irow, frow, L):
    """dst = (data op0 operand0) op1 operand1; operands are immediates or [P,1] tiles.

    ints: op0, reverse0, has_op1, op1, reverse1, operand0_is_tile, operand1_is_tile, int_math."""
    op0, rev0, has1, op1, rev1, t0, t1, im = (irow[2], irow[3], irow[4], irow[5], irow[6],
                                               irow[7], irow[8], irow[9])
    if im == 0 and _direct_scalar(H, S, PS, irow, frow, L):
        return 0
    if im == 1:
        w = _width(irow[OP0 + O_DTYPE])
        r = _apply_i64(op0, load_i64(H, S, PS, irow, OP1, L),
                       _scalar_operand_i64(H, S, PS, irow, frow, OP2, 0, t0, L), rev0, w)
        if has1 == 1:
            if irow[OP0 + O_DTYPE] == 9:    # int32: op1 sees op0's result wrapped to 32 bits
                r = _wrap_i32(r)
            r = _apply_i64(op1, r,
                           _scalar_operand_i64(H, S, PS, irow, frow, OP3, 1, t1, L), rev1, w)
        store_i64(H, S, PS, irow, OP0, L, r)
        return 0
    y = _apply_f32(op0, load_f32(H, S, PS, irow, OP1, L),
                   _scalar_operand_f32(H, S, PS, irow, frow, OP2, 0, t0, L), rev0)
    if has1 == 1:
        y = _apply_f32(op1, y, _scalar_operand_f32(H, S, PS, irow, frow, OP3, 1, t1, L), rev1)
    store_f32(H, S, PS, irow, OP0, L, y)
    return 0


@helper(row_wise=True)
@njit(cache=True, nogil=True)
def memset(H, S, PS, irow, frow, L):
    """dst[...] = value (ints: is_int, int value)."""
    P, N = shape_of(irow, OP0)
    if irow[2] == 1:
        store_i64(H, S, PS, irow, OP0, L, np.full((P, N), irow[3], np.int64))
    else:
        store_f32(H, S, PS, irow, OP0, L, np.full((P, N), np.float32(frow[0]), np.float32))
    return 0


@helper(row_wise=True)
@njit(cache=True, nogil=True)
def reciprocal(H, S, PS, irow, frow, L):
    """dst = 1 / data (VectorE, IEEE fp32 division)."""
    x = load_f32(H, S, PS, irow, OP1, L)
    store_f32(H, S, PS, irow, OP0, L, np.float32(1.0) / x)
    return 0


def reference_binary(op, a, b):
    """Oracle for tensor_tensor / tensor_scalar on float inputs (numpy, fp32)."""
    return alu.binary_f32.py_func(int(op), np.float32(a), np.float32(b))


@emitter(Opcode.TENSOR_TENSOR, tensor_tensor, reference_binary)
def encode_tensor_tensor(ins, w, ops):
    w.ints(int(ins.attr("op")), int(bool(ins.attr("int_math"))))
    w.operand(ops["dst"]).operand(ops["data1"]).operand(ops["data2"])


@emitter(Opcode.TENSOR_SCALAR, tensor_scalar, reference_binary)
def encode_tensor_scalar(ins, w, ops):
    op1 = ins.attr("op1")
    w.ints(int(ins.attr("op0")), int(ins.attr("reverse0")), int(op1 is not None),
           int(op1 or 0), int(ins.attr("reverse1")), int("operand0" in ops),
           int("operand1" in ops), int(bool(ins.attr("int_math"))))
    w.floats(imm(ins.attr("imm0")), imm(ins.attr("imm1")))
    w.operand(ops["dst"]).operand(ops["data"]).operand(ops.get("operand0"))
    w.operand(ops.get("operand1"))


@emitter(Opcode.TENSOR_COPY, dma_copy)   # same semantics: bit-exact, or through fp32
def encode_tensor_copy(ins, w, ops):
    w.ints(int(ops["dst"].code == ops["src"].code)).operand(ops["dst"]).operand(ops["src"])


@emitter(Opcode.MEMSET, memset)
def encode_memset(ins, w, ops):
    value = ins.attr("value")
    is_int = ins.attr("is_int")
    w.ints(int(bool(is_int)), int(value) if is_int else 0).floats(float(value))
    w.operand(ops["dst"])


@emitter(Opcode.RECIPROCAL, reciprocal)
def encode_reciprocal(ins, w, ops):
    w.operand(ops["dst"]).operand(ops["data"])


@helper(row_wise=True)
@njit(cache=True, nogil=True)
def fill_uninit(H, S, PS, irow, frow, L):
    """Give a fresh tile the contents AWS's simulator gives it: NaN for floats, 4 for ints."""
    P, N = shape_of(irow, OP0)
    if irow[2] == 1:
        store_i64(H, S, PS, irow, OP0, L, np.full((P, N), 4, np.int64))
    else:
        store_f32(H, S, PS, irow, OP0, L, np.full((P, N), np.nan, np.float32))
    return 0


@emitter(Opcode.FILL_UNINIT, fill_uninit)
def encode_fill_uninit(ins, w, ops):
    w.ints(int(ops["dst"].code in range(7, 14))).operand(ops["dst"])
