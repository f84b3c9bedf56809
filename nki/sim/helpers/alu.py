"""ALU operators on fp32 (and int64 for bit operations), as array expressions valid under Numba
and numpy alike. Operator codes are ``nki.ir.ops.Alu`` values, repeated here as literals so
Numba folds the branches."""

from __future__ import annotations

import numpy as np
from numba import njit

from nki.sim import transcend

BYPASS, ADD, SUB, MUL, DIV, MAX, MIN, POW, MOD, FMOD, ABSMAX, ABSMIN = range(12)
EQ, NE, GT, GE, LT, LE, LAND, LOR, LXOR = range(12, 21)
BAND, BOR, BXOR, SHL, SHR = range(21, 26)
ABS, NEG, RSQRT, RECIP, SQUARE, RELU, LNOT, INVERT, SQRT, SIGN, EXP, AVERAGE = range(26, 38)


@njit(cache=True, nogil=True)
def _f(mask):
    return mask.astype(np.float32)


@njit(cache=True, nogil=True, error_model="numpy")
def _same_shape(op, fa, fb, fo):
    """Fast path over flat arrays: explicit loops vectorise; Numba's array expressions here
    ran 4-8x slower (70 µs vs 13 µs for a 128x1024 add). False for other ops."""
    n = fo.size
    if op == ADD:
        for i in range(n):
            fo[i] = fa[i] + fb[i]
    elif op == SUB:
        for i in range(n):
            fo[i] = fa[i] - fb[i]
    elif op == MUL:
        for i in range(n):
            fo[i] = fa[i] * fb[i]
    elif op == DIV:
        for i in range(n):
            fo[i] = fa[i] / fb[i]
    elif op == MAX:
        for i in range(n):
            fo[i] = _max(fa[i], fb[i])
    elif op == MIN:
        for i in range(n):
            fo[i] = _min(fa[i], fb[i])
    else:
        return _same_shape_cmp(op, fa, fb, fo)
    return True


@njit(cache=True, nogil=True, error_model="numpy")
def _same_shape_cmp(op, fa, fb, fo):
    """Comparisons (numpy's: false with a NaN operand, except ``!=``) and logical operators
    (NaN is true; ``&``/``|``/``^`` on booleans, no short circuit, so the loops vectorise)."""
    n, z = fo.size, np.float32(0.0)
    if op == EQ:
        for i in range(n):
            fo[i] = np.float32(fa[i] == fb[i])
    elif op == NE:
        for i in range(n):
            fo[i] = np.float32(fa[i] != fb[i])
    elif op == GT:
        for i in range(n):
            fo[i] = np.float32(fa[i] > fb[i])
    elif op == GE:
        for i in range(n):
            fo[i] = np.float32(fa[i] >= fb[i])
    elif op == LT:
        for i in range(n):
            fo[i] = np.float32(fa[i] < fb[i])
    elif op == LE:
        for i in range(n):
            fo[i] = np.float32(fa[i] <= fb[i])
    elif op == LAND:
        for i in range(n):
            fo[i] = np.float32((fa[i] != z) & (fb[i] != z))
    elif op == LOR:
        for i in range(n):
            fo[i] = np.float32((fa[i] != z) | (fb[i] != z))
    elif op == LXOR:
        for i in range(n):
            fo[i] = np.float32((fa[i] != z) ^ (fb[i] != z))
    elif op == AVERAGE:
        for i in range(n):
            fo[i] = (fa[i] + fb[i]) * np.float32(0.5)
    else:
        return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _max(x, y):
    # np.maximum semantics: NaN wins
    return x if (x >= y or x != x) else y


@njit(cache=True, nogil=True, inline="always")
def _min(x, y):
    return x if (x <= y or x != x) else y


@njit(cache=True, nogil=True, error_model="numpy")
def _column(op, a, col, reverse, out):
    """``a op col`` (or ``col op a``) where ``col`` is (P, 1) and ``a`` is (P, N), one explicit
    loop per row (Numba's broadcasting array expressions are 4x slower); False for the
    operators it does not cover."""
    P, N = a.shape
    if reverse and op >= GT and op <= LE:   # c > a is a < c: swap the comparison instead
        op = (LT, LE, GT, GE)[op - GT]
        reverse = False
    if not (op >= ADD and op <= MIN or op >= EQ and op <= LXOR):
        return False
    for p in range(P):
        c = col[p, 0] if col.shape[0] == P else col[0, 0]
        if op >= EQ:
            _column_cmp(op, a[p], c, out[p], N)
        else:
            _column_arith(op, a[p], c, reverse, out[p], N)
    return True


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _column_arith(op, a, c, reverse, o, n):
    if op == ADD:
        for i in range(n):
            o[i] = a[i] + c
    elif op == SUB and reverse:
        for i in range(n):
            o[i] = c - a[i]
    elif op == SUB:
        for i in range(n):
            o[i] = a[i] - c
    elif op == MUL:
        for i in range(n):
            o[i] = a[i] * c
    elif op == DIV and reverse:
        for i in range(n):
            o[i] = c / a[i]
    elif op == DIV:
        for i in range(n):
            o[i] = a[i] / c
    elif op == MAX:
        for i in range(n):
            o[i] = _max(a[i], c)
    else:
        for i in range(n):
            o[i] = _min(a[i], c)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _column_cmp(op, a, c, o, n):
    """Comparisons and logical operators against a scalar (symmetric ones need no reverse)."""
    z = np.float32(0.0)
    if op == EQ:
        for i in range(n):
            o[i] = np.float32(a[i] == c)
    elif op == NE:
        for i in range(n):
            o[i] = np.float32(a[i] != c)
    elif op == GT:
        for i in range(n):
            o[i] = np.float32(a[i] > c)
    elif op == GE:
        for i in range(n):
            o[i] = np.float32(a[i] >= c)
    elif op == LT:
        for i in range(n):
            o[i] = np.float32(a[i] < c)
    elif op == LE:
        for i in range(n):
            o[i] = np.float32(a[i] <= c)
    else:   # logical: reduce the scalar to a boolean once
        cz = c != z
        for i in range(n):
            o[i] = np.float32(_logic(op, a[i] != z, cz))


@njit(cache=True, nogil=True, inline="always")
def _logic(op, x, y):
    if op == LAND:
        return x & y
    if op == LOR:
        return x | y
    return x ^ y


@njit(cache=True, nogil=True, error_model="numpy")
def binary_col_f32(op, x, col, reverse):
    """``x op col`` (``col op x`` when ``reverse``) with a (P,1)/(1,1) column operand."""
    out = np.empty(x.shape, np.float32)
    if x.ndim == 2 and _column(op, x, col, reverse, out):
        return out
    out[...] = binary_f32(op, col, x) if reverse else binary_f32(op, x, col)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def binary_col_into_f32(op, x, col):
    """``x = x op col`` in place, for a 2-D ``x`` the caller owns (a fresh load): no new
    array and one pass over memory less than :func:`binary_col_f32`."""
    P = x.shape[0]
    for p in range(P):
        if not col_into(op, x[p], col[p, 0] if col.shape[0] == P else col[0, 0], False):
            break
    else:
        return
    x[...] = binary_f32(op, x, col)


# In-place loops over one row: reading and writing one array, LLVM vectorises them. Passing
# the same memory as a separate input and output instead (``_column(op, a, c, r, a)``) makes
# its runtime alias check fail and the loop runs scalar, 5x slower.
@njit(cache=True, nogil=True, error_model="numpy")
def col_into(op, d, c, c_first):
    """``d = d op c`` (``c op d`` when ``c_first``) for a scalar ``c``, in place, for the
    arithmetic operators; False (``d`` untouched) for the others."""
    n = d.size
    if op == ADD:
        for i in range(n):
            d[i] = c + d[i] if c_first else d[i] + c
    elif op == SUB:
        for i in range(n):
            d[i] = c - d[i] if c_first else d[i] - c
    elif op == MUL:
        for i in range(n):
            d[i] = c * d[i] if c_first else d[i] * c
    elif op == DIV:
        for i in range(n):
            d[i] = c / d[i] if c_first else d[i] / c
    elif op == MAX:
        for i in range(n):
            d[i] = _max(c, d[i]) if c_first else _max(d[i], c)
    elif op == MIN:
        for i in range(n):
            d[i] = _min(c, d[i]) if c_first else _min(d[i], c)
    else:
        return False
    return True


@njit(cache=True, nogil=True, error_model="numpy")
def row_into(op, d, x, x_first):
    """``d = d op x`` (``x op d`` when ``x_first``) elementwise for a row ``x`` of ``d``'s
    size, in place, for the arithmetic operators; False (``d`` untouched) for the others."""
    n = d.size
    if op == ADD:
        for i in range(n):
            d[i] = x[i] + d[i] if x_first else d[i] + x[i]
    elif op == SUB:
        for i in range(n):
            d[i] = x[i] - d[i] if x_first else d[i] - x[i]
    elif op == MUL:
        for i in range(n):
            d[i] = x[i] * d[i] if x_first else d[i] * x[i]
    elif op == DIV:
        for i in range(n):
            d[i] = x[i] / d[i] if x_first else d[i] / x[i]
    elif op == MAX:
        for i in range(n):
            d[i] = _max(x[i], d[i]) if x_first else _max(d[i], x[i])
    elif op == MIN:
        for i in range(n):
            d[i] = _min(x[i], d[i]) if x_first else _min(d[i], x[i])
    else:
        return False
    return True


def in_place_op(op: int) -> bool:
    """Whether :func:`col_into` and :func:`row_into` implement ``op``."""
    return op in (ADD, SUB, MUL, DIV, MAX, MIN)


@njit(cache=True, nogil=True, error_model="numpy")
def binary_f32(op, a, b):
    """``a op b`` elementwise in fp32; ``a`` and ``b`` broadcast like numpy."""
    if a.shape == b.shape:
        out = np.empty(a.shape, np.float32)
        if _same_shape(op, np.ascontiguousarray(a).ravel(), np.ascontiguousarray(b).ravel(),
                       out.ravel()):
            return out
    # broadcast once, then every operator below is a flat loop: Numba generates a
    # broadcasting loop nest per operator otherwise (4x the machine code of this module)
    shape = np.broadcast_shapes(a.shape, b.shape)
    return _binary_flat(op, _flat(a, shape), _flat(b, shape)).reshape(shape)


@njit(cache=True, nogil=True)
def _flat(a, shape):
    """``a`` broadcast to ``shape``, as a flat contiguous array (no copy if it already is)."""
    if a.shape == shape:
        return np.ascontiguousarray(a).ravel()
    return np.ascontiguousarray(np.broadcast_to(a, shape)).ravel()


@njit(cache=True, nogil=True, error_model="numpy")
def _binary_flat(op, a, b):
    """``a op b`` on two flat fp32 arrays of one size (the general case of binary_f32)."""
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


@njit(cache=True, nogil=True, error_model="numpy")
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
    if op == RELU:   # explicit select: max(-0.0, 0.0) differs between numpy and Numba
        out = np.empty_like(a)
        fa, fo = a.ravel(), out.ravel()
        for i in range(fa.size):
            fo[i] = fa[i] if fa[i] > np.float32(0.0) else np.float32(0.0)
        return out
    if op == LNOT:
        return _f(a == 0)
    if op == SQRT:
        return np.sqrt(a)
    if op == SIGN:   # sign(±0) = +0 on both backends
        out = np.empty_like(a)
        fa, fo = a.ravel(), out.ravel()
        for i in range(fa.size):
            x = fa[i]
            fo[i] = np.float32(1.0) if x > 0 else (np.float32(-1.0) if x < 0 else
                                                   (x if x != x else np.float32(0.0)))
        return out
    if op == EXP:
        return transcend.exp(np.ascontiguousarray(a))
    return a.copy()


@njit(cache=True, nogil=True)
def binary_i64(op, a, b, width):
    """Integer/bitwise ``a op b`` on int64 values of a ``width``-bit type; ``a`` and ``b``
    broadcast like numpy (once, up front, as in binary_f32)."""
    shape = np.broadcast_shapes(a.shape, b.shape)
    return _binary_i64_flat(op, _flat(a, shape), _flat(b, shape), width).reshape(shape)


@njit(cache=True, nogil=True)
def _binary_i64_flat(op, a, b, width):
    """binary_i64 on two flat int64 arrays of one size."""
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


@njit(cache=True, nogil=True, inline="always")
def _scalar(op, a, b):
    if op == ADD:
        return a + b
    if op == SUB:
        return a - b
    if op == MUL:
        return a * b
    if op == MAX:
        return _max(a, b)
    return _min(a, b)


@njit(cache=True, nogil=True, error_model="numpy")
def fold_rows_f32(op, start, y):
    """Per row ``p``: ``start[p] op y[p, 0] op y[p, 1] ...`` in order (fp32), for add, subtract,
    multiply, maximum, minimum. Eight rows advance together: each row's chain stays in order
    (bit-exact, both backends), but the chains overlap in the pipeline (measured 18 µs vs
    71 µs one row at a time, and 330 µs with a vector op per column)."""
    P, N = y.shape
    acc = start.astype(np.float32)
    p = 0
    while p + 8 <= P:
        s0, s1, s2, s3 = acc[p], acc[p + 1], acc[p + 2], acc[p + 3]
        s4, s5, s6, s7 = acc[p + 4], acc[p + 5], acc[p + 6], acc[p + 7]
        for j in range(N):
            s0 = _scalar(op, s0, y[p, j])
            s1 = _scalar(op, s1, y[p + 1, j])
            s2 = _scalar(op, s2, y[p + 2, j])
            s3 = _scalar(op, s3, y[p + 3, j])
            s4 = _scalar(op, s4, y[p + 4, j])
            s5 = _scalar(op, s5, y[p + 5, j])
            s6 = _scalar(op, s6, y[p + 6, j])
            s7 = _scalar(op, s7, y[p + 7, j])
        acc[p], acc[p + 1], acc[p + 2], acc[p + 3] = s0, s1, s2, s3
        acc[p + 4], acc[p + 5], acc[p + 6], acc[p + 7] = s4, s5, s6, s7
        p += 8
    for q in range(p, P):
        s = acc[q]
        for j in range(N):
            s = _scalar(op, s, y[q, j])
        acc[q] = s
    return acc


@njit(cache=True, nogil=True, error_model="numpy")
def fold_flat_rows_f32(op, acc, flat, off, pitch, first, n):
    """:func:`fold_rows_f32` of rows that are contiguous runs of a flat fp32 array: per row
    ``r`` of ``acc``, ``acc[r] op flat[o + first] op ... op flat[o + n - 1]`` in order, with
    ``o = off + r * pitch``; ``acc`` is updated and returned. The same chains in the same
    order, so the same bits; but on unit-stride rows each chain's loads are base + index,
    where the strided 2-D view's eight row addresses were one pointer stepped row to row:
    eight dependent integer adds per column bounded the loop at one fp32 add per cycle
    (measured in activation's machine code: 29 us of a 128x1024 sum, 17 us standalone)."""
    p = 0
    while p + 8 <= acc.size:
        o = off + p * pitch
        r0, r1 = flat[o:o + n], flat[o + pitch:o + pitch + n]
        r2, r3 = flat[o + 2 * pitch:o + 2 * pitch + n], flat[o + 3 * pitch:o + 3 * pitch + n]
        r4, r5 = flat[o + 4 * pitch:o + 4 * pitch + n], flat[o + 5 * pitch:o + 5 * pitch + n]
        r6, r7 = flat[o + 6 * pitch:o + 6 * pitch + n], flat[o + 7 * pitch:o + 7 * pitch + n]
        s0, s1, s2, s3 = acc[p], acc[p + 1], acc[p + 2], acc[p + 3]
        s4, s5, s6, s7 = acc[p + 4], acc[p + 5], acc[p + 6], acc[p + 7]
        for j in range(first, n):
            s0 = _scalar(op, s0, r0[j])
            s1 = _scalar(op, s1, r1[j])
            s2 = _scalar(op, s2, r2[j])
            s3 = _scalar(op, s3, r3[j])
            s4 = _scalar(op, s4, r4[j])
            s5 = _scalar(op, s5, r5[j])
            s6 = _scalar(op, s6, r6[j])
            s7 = _scalar(op, s7, r7[j])
        acc[p], acc[p + 1], acc[p + 2], acc[p + 3] = s0, s1, s2, s3
        acc[p + 4], acc[p + 5], acc[p + 6], acc[p + 7] = s4, s5, s6, s7
        p += 8
    for q in range(p, acc.size):
        row = flat[off + q * pitch:off + q * pitch + n]
        s = acc[q]
        for j in range(first, n):
            s = _scalar(op, s, row[j])
        acc[q] = s
    return acc


def foldable(op: int) -> bool:
    """Whether :func:`fold_rows_f32` implements ``op``."""
    return op in (ADD, SUB, MUL, MAX, MIN)
