"""ALU operators on fp32 (and int64 for bit operations), as array expressions valid under Numba
and numpy alike. Operator codes are ``nki.ir.ops.Alu`` values, repeated here as literals so
Numba folds the branches."""

from __future__ import annotations

import numpy as np
from numba import njit

BYPASS, ADD, SUB, MUL, DIV, MAX, MIN, POW, MOD, FMOD, ABSMAX, ABSMIN = range(12)
EQ, NE, GT, GE, LT, LE, LAND, LOR, LXOR = range(12, 21)
BAND, BOR, BXOR, SHL, SHR = range(21, 26)
ABS, NEG, RSQRT, RECIP, SQUARE, RELU, LNOT, INVERT, SQRT, SIGN, EXP, AVERAGE = range(26, 38)


@njit(cache=True, nogil=True)
def _f(mask):
    return mask.astype(np.float32)


@njit(cache=True, nogil=True)
def binary_f32(op, a, b):
    """``a op b`` elementwise in fp32; ``a`` and ``b`` broadcast like numpy."""
    if op == ADD:
        return a + b
    if op == SUB:
        return a - b
    if op == MUL:
        return a * b
    if op == DIV:
        return a / b
    if op == MAX:
        return np.maximum(a, b)
    if op == MIN:
        return np.minimum(a, b)
    if op == POW:
        return np.power(a, b)
    if op == MOD:
        return a - np.floor(a / b) * b
    if op == FMOD:
        return np.fmod(a, b)
    if op == ABSMAX:
        return np.maximum(np.abs(a), np.abs(b))
    if op == ABSMIN:
        return np.minimum(np.abs(a), np.abs(b))
    if op == EQ:
        return _f(a == b)
    if op == NE:
        return _f(a != b)
    if op == GT:
        return _f(a > b)
    if op == GE:
        return _f(a >= b)
    if op == LT:
        return _f(a < b)
    if op == LE:
        return _f(a <= b)
    if op == LAND:
        return _f((a != 0) & (b != 0))
    if op == LOR:
        return _f((a != 0) | (b != 0))
    if op == LXOR:
        return _f((a != 0) ^ (b != 0))
    if op == AVERAGE:
        return (a + b) * np.float32(0.5)
    return unary_f32(op, a)  # bypass and unary operators ignore the operand


@njit(cache=True, nogil=True)
def unary_f32(op, a):
    """Unary ALU operators (the operand of a unary op is ignored)."""
    if op == ABS:
        return np.abs(a)
    if op == NEG:
        return -a
    if op == RSQRT:
        return np.float32(1.0) / np.sqrt(a)
    if op == RECIP:
        return np.float32(1.0) / a
    if op == SQUARE:
        return a * a
    if op == RELU:
        return np.maximum(a, np.float32(0.0))
    if op == LNOT:
        return _f(a == 0)
    if op == SQRT:
        return np.sqrt(a)
    if op == SIGN:
        return np.sign(a)
    return a.copy()


@njit(cache=True, nogil=True)
def binary_i64(op, a, b, width):
    """Integer/bitwise ``a op b`` on int64 values of a ``width``-bit type."""
    if op == BAND:
        return a & b
    if op == BOR:
        return a | b
    if op == BXOR:
        return a ^ b
    if op == SHL:
        return a << (b & (width - 1))
    if op == SHR:  # logical shift right (NKI has no arithmetic shift)
        mask = (np.int64(1) << width) - 1
        return (a & mask) >> (b & (width - 1))
    if op == INVERT:
        return ~a
    if op == ADD:
        return a + b
    if op == SUB:
        return a - b
    if op == MUL:
        return a * b
    if op == MAX:
        return np.maximum(a, b)
    if op == MIN:
        return np.minimum(a, b)
    return a.copy()
