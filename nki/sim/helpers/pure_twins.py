"""numpy twins of the ``@njit`` sub-functions that loop per element (see ``pure.py``).

Each gives the bits its compiled original gives; only copies and index arithmetic are
vectorised here, never arithmetic whose rounding could differ.
"""

from __future__ import annotations

import numpy as np

from nki.sim import numerics
from nki.sim.helpers import alu, memory
from nki.sim.helpers.pure import interpreted, pure_value, vectorised

# The arithmetic column operators, as numpy ufuncs: IEEE fp32 operations, as in the loops
_COLUMN_UFUNCS = {alu.ADD: np.add, alu.SUB: np.subtract, alu.MUL: np.multiply,
                  alu.DIV: np.divide}


@vectorised("nki.sim.helpers.memory", "copy_row")
def copy_row(dst, src):
    """``memory.copy_row``; a forward element loop over overlapping rows stays a loop."""
    if np.shares_memory(dst, src) and not (dst.ctypes.data == src.ctypes.data
                                           and dst.strides == src.strides):
        return interpreted(memory.copy_row)(dst, src)
    dst[:] = src
    return None


@vectorised("nki.sim.helpers.alu", "col_into")
def col_into(op, d, c, c_first):
    """``alu.col_into``: the four arithmetic operators as one ufunc call (MAX/MIN and their
    NaN rules keep the interpreted loop)."""
    ufunc = _COLUMN_UFUNCS.get(op)
    if ufunc is None:
        return interpreted(alu.col_into)(op, d, c, c_first)
    with np.errstate(all="ignore"):
        d[...] = ufunc(c, d) if c_first else ufunc(d, c)
    return True


@vectorised("nki.sim.emit.select", "_stt_row")
def _stt_row(op0, op1, d, x, c, u):
    """``select._stt_row``: two fp32 ufunc steps in its order (``c`` is an fp32 scalar)."""
    with np.errstate(all="ignore"):
        d[:] = _COLUMN_UFUNCS[op1](_COLUMN_UFUNCS[op0](x, c), u)
    return None


@vectorised("nki.sim.emit.activation", "_square_into")
def _square_into(z, out):
    """``activation._square_into``: one fp32 product per element."""
    with np.errstate(all="ignore"):
        out[:] = z * z
    return None


@vectorised("nki.sim.emit.activation", "_affine_row")
def _affine_row(src, dst, use_scale, s, use_bias, b):
    """``activation._affine_row``: the same fp32 product, then the same fp32 sum (``s`` and
    ``b`` are fp32 scalars, so numpy keeps fp32 and rounds each step)."""
    with np.errstate(all="ignore"):
        z = src * s if use_scale == 1 else src
        dst[:] = z + b if use_bias == 1 else z
    return None


_CHAINS = {alu.ADD: np.add, alu.SUB: np.subtract, alu.MUL: np.multiply}


def _fold_step(op, acc, col):
    """``alu._scalar`` on whole columns (``_max``/``_min``: the first operand if it is NaN)."""
    if op == alu.ADD:
        return acc + col
    if op == alu.SUB:
        return acc - col
    if op == alu.MUL:
        return acc * col
    if op == alu.MAX:
        return np.where((acc >= col) | (acc != acc), acc, col)
    return np.where((acc <= col) | (acc != acc), acc, col)


@vectorised("nki.sim.helpers.alu", "fold_rows_f32")
def fold_rows_f32(op, start, y):
    """``alu.fold_rows_f32``: every row's chain in the same column order, all rows per step."""
    acc = start.astype(np.float32)
    chain = _CHAINS.get(op)
    if chain is not None:      # sequential ufunc accumulation: the same chain per row
        padded = np.empty((y.shape[0], y.shape[1] + 1), np.float32)
        padded[:, 0], padded[:, 1:] = acc, y
        with np.errstate(all="ignore"):
            return chain.accumulate(padded, axis=1, dtype=np.float32)[:, -1].copy()
    with np.errstate(all="ignore"):
        for j in range(y.shape[1]):
            acc = _fold_step(op, acc, y[:, j]).astype(np.float32, copy=False)
    return acc


@vectorised("nki.sim.helpers.alu", "fold_flat_rows_f32")
def fold_flat_rows_f32(op, acc, flat, off, pitch, first, n):
    """``alu.fold_flat_rows_f32``: the rows as a strided view, folded as above."""
    rows = np.lib.stride_tricks.as_strided(flat[off + first:], shape=(acc.size, n - first),
                                           strides=(pitch * flat.itemsize, flat.itemsize))
    acc[:] = fold_rows_f32(op, acc, rows)
    return acc


@vectorised("nki.sim.emit.reduce", "_lane_extremes")
def _lane_extremes(is_max, row, acc):
    """``reduce._lane_extremes``: Python's ``max``/``min`` (the new value only if it is
    strictly beyond, as Numba's builtins too) per lane, one chunk at a time."""
    W = acc.size
    chunks = row[:row.size // W * W].reshape(-1, W)
    for chunk in chunks:
        better = chunk > acc if is_max else chunk < acc
        acc[better] = chunk[better]


@vectorised("nki.sim.emit.reduce", "_first_nan")
def _first_nan(row) -> int:
    """``reduce._first_nan``."""
    nan = np.isnan(row)
    return int(np.argmax(nan)) if nan.any() else -1


@vectorised("nki.sim.helpers.alu", "row_into")
def row_into(op, d, x, x_first):
    """``alu.row_into``: :func:`col_into` with a row for the scalar."""
    ufunc = _COLUMN_UFUNCS.get(op)
    if ufunc is None or np.shares_memory(d, x):
        return interpreted(alu.row_into)(op, d, x, x_first)
    with np.errstate(all="ignore"):
        d[...] = ufunc(x, d) if x_first else ufunc(d, x)
    return True


def _in_order_sums(rows):
    """Per row of a 2-D fp32 array, ``0 + r[0] + r[1] + ...`` in order (``accumulate`` is
    sequential; ``np.sum`` would sum pairwise and round differently)."""
    padded = np.zeros((rows.shape[0], rows.shape[1] + 1), np.float32)
    padded[:, 1:] = rows
    return np.add.accumulate(padded, axis=1, dtype=np.float32)[:, -1]


@vectorised("nki.sim.emit.reduce", "_pair_sums4")
def _pair_sums4(r0, r1, r2, r3, co):
    """``reduce._pair_sums4``: the eight in-order chains at once."""
    rows = np.stack([r[:2 * co] for r in (r0, r1, r2, r3)]).astype(np.float32, copy=False)
    even, odd = _in_order_sums(rows[:, 0::2]), _in_order_sums(rows[:, 1::2])
    return tuple(even), tuple(odd)


@vectorised("nki.sim.emit.reduce", "_pair_squares4")
def _pair_squares4(r0, r1, r2, r3, co, me, mo):
    """``reduce._pair_squares4``: squared deviations elementwise, then in-order sums."""
    rows = np.stack([r[:2 * co] for r in (r0, r1, r2, r3)]).astype(np.float32, copy=False)
    with np.errstate(all="ignore"):
        de = rows[:, 0::2] - np.asarray(me, np.float32)[:, None]
        do = rows[:, 1::2] - np.asarray(mo, np.float32)[:, None]
        return tuple(_in_order_sums(de * de)), tuple(_in_order_sums(do * do))


def _view(flat, start, counts, steps):
    """A strided view of a 1-D array: element ``start + sum(i_k * steps_k)``."""
    size = flat.itemsize
    return np.lib.stride_tricks.as_strided(flat[start:], shape=counts,
                                           strides=[s * size for s in steps])


@vectorised("nki.sim.helpers.memory", "_tile_copy")
def _tile_copy(src, so, sa, sb, dst, oo, da, db, na, nb):
    """``memory._tile_copy`` as one strided assignment (element loops where they overlap)."""
    if na == 0 or nb == 0:
        return None
    if np.shares_memory(src, dst) or min(sa, sb, da, db) < 0:
        return interpreted(memory._tile_copy)(src, so, sa, sb, dst, oo, da, db, na, nb)
    _view(dst, oo, (na, nb), (da, db))[...] = _view(src, so, (na, nb), (sa, sb))
    return None


@vectorised("nki.sim.helpers.memory", "gather")
def gather(typed, off, irow, base, P, N):
    """``memory.gather``: rows of contiguous elements copied at once (other layouts as the
    interpreted original does them)."""
    rows, stride, n = pure_value(memory._rows_layout)(irow, base)
    if rows <= 0 or stride < 0:
        return interpreted(memory.gather)(typed, off, irow, base, P, N)
    return _view(typed, off, (rows, n), (stride, 1)).copy().reshape(P, N)


@vectorised("nki.sim.helpers.memory", "scatter")
def scatter(typed, off, irow, base, values):
    """``memory.scatter``: rows of contiguous elements written at once when the rows do not
    overlap each other or ``values`` (otherwise the loop's write order matters, and the
    interpreted original runs)."""
    rows, stride, n = pure_value(memory._rows_layout)(irow, base)
    if rows <= 0 or (rows > 1 and stride < n) or np.shares_memory(typed, values):
        return interpreted(memory.scatter)(typed, off, irow, base, values)
    _view(typed, off, (rows, n), (stride, 1))[...] = values.ravel()[:rows * n].reshape(rows, n)
    return None


@vectorised("nki.sim.numerics", "bf16_to_f32_into")
def bf16_to_f32_into(u16, out):
    """``numerics.bf16_to_f32_into``: every pattern shifted into the high half at once."""
    wide = u16.astype(np.int64) << 16
    out.view(np.uint32)[:u16.size] = wide.astype(np.uint32)


@vectorised("nki.sim.numerics", "f32_to_bf16_into")
def f32_to_bf16_into(f32, out):
    """``numerics.f32_to_bf16_into``: the same uint32 steps (wrapping as the loop's do) on
    the whole row, the quiet NaN selected where the input is NaN."""
    bits = f32.view(np.uint32)
    hi = bits >> np.uint32(16)
    rne = (bits + np.uint32(0x7FFF) + (hi & np.uint32(1))) >> np.uint32(16)
    quiet = (hi & np.uint32(0x8000)) | np.uint32(0x7FC0)
    out[:bits.size] = np.where(f32 != f32, quiet, rne).astype(np.uint16)


def _rne_shift(v, sh):
    """``numerics._rne_shift`` on int64 arrays (``sh`` an array or a number, 1 to 62)."""
    q = v >> sh
    rem = v - (q << sh)
    half = np.int64(1) << (sh - 1)
    return q + ((rem > half) | ((rem == half) & ((q & 1) == 1)))


def _encode_magnitude(a, mbits, bias):
    """``numerics._encode_magnitude`` on int64 arrays: both roundings, one selected (the
    subnormal shift clipped to 1..41 where it is not used)."""
    e = a >> 23
    min_normal_e = 128 - bias
    normal = _rne_shift(a - ((127 - bias) << 23), 23 - mbits)
    sub = e == 0
    mant = np.where(sub, a & 0x7FFFFF, (a & 0x7FFFFF) | 0x800000)
    sh = 23 - mbits + min_normal_e - np.where(sub, 1, e)
    small = np.where(sh > 40, 0, _rne_shift(mant, np.clip(sh, 1, 41)))
    return np.where(e >= min_normal_e, normal, small)


def _f32_words(f32):
    """The float32 bits of ``f32`` (raveled, as the loops read them) as int64, its sign moved
    to bit 15 and the magnitude bits."""
    b = np.ravel(f32).view(np.uint32).astype(np.int64)
    return b, (b >> 16) & 0x8000, b & 0x7FFFFFFF


@vectorised("nki.sim.numerics", "f32_to_f16")
def f32_to_f16(f32):
    """``numerics.f32_to_f16``: the NaN rule and the rounding computed on the whole array."""
    _, sign, a = _f32_words(f32)
    payload = (a >> 13) & 0x3FF
    nan = 0x7C00 | np.where(payload == 0, 1, payload)
    mag = np.minimum(_encode_magnitude(a, 10, 15), 0x7C00)
    return (sign | np.where(a > 0x7F800000, nan, mag)).astype(np.uint16).reshape(f32.shape)


@vectorised("nki.sim.numerics", "f16_to_f32")
def f16_to_f32(u16):
    """``numerics.f16_to_f32``: the four cases computed on the whole array, one selected."""
    h = np.ravel(u16).astype(np.int64)
    sign = (h & 0x8000) << 16
    e, m = (h >> 10) & 0x1F, h & 0x3FF
    sub = (m.astype(np.float32) * numerics._TWO_M24).view(np.uint32).astype(np.int64)
    r = np.where(m == 0, 0, sub)
    r = np.where(e != 0, ((e + 112) << 23) | (m << 13), r)
    r = np.where(e == 0x1F, 0x7F800000 | (m << 13), r)
    return (sign | r).astype(np.uint32).view(np.float32).reshape(u16.shape)


# f32_to_fp8's formats: type code -> (mantissa bits, bias, largest code, NaN code)
_FP8 = {numerics._E4M3: (3, 7, 0x78, 0x7C), numerics._E5M2: (2, 15, 0x7C, 0x7E),
        numerics._E4M3FN: (3, 7, 0x7F, 0x7F)}


def _e8m0_encode(b):
    """``numerics._e8m0_encode`` on int64 arrays."""
    e = b >> 23
    r = np.where(e == 0, np.where(b > 0x400000, 1, 0), np.minimum(e + ((b >> 22) & 1), 0xFF))
    return np.where((b == 0) | (b >= 0x7F800000), 0xFF, r)


@vectorised("nki.sim.numerics", "f32_to_fp8")
def f32_to_fp8(f32, fmt):
    """``numerics.f32_to_fp8``: the rounding and the NaN code selected on the whole array."""
    b, sign, a = _f32_words(f32)
    if fmt == numerics._E8M0:
        return _e8m0_encode(b).astype(np.uint8).reshape(f32.shape)
    if fmt not in _FP8:
        raise ValueError("f32_to_fp8: not an fp8 type code")
    mbits, bias, top, nan = _FP8[fmt]
    mag = np.minimum(_encode_magnitude(a, mbits, bias), top)
    out = (sign >> 8) | np.where(a > 0x7F800000, nan, mag)
    return out.astype(np.uint8).reshape(f32.shape)


@vectorised("nki.sim.numerics", "fp8_to_f32")
def fp8_to_f32(u8, fmt):
    """``numerics.fp8_to_f32``: one table lookup for the whole array."""
    if fmt not in _FP8 and fmt != numerics._E8M0:
        raise ValueError("fp8_to_f32: not an fp8 type code")
    return numerics.FP8_DECODE[fmt][np.ravel(u8)].reshape(u8.shape)


@vectorised("nki.sim.numerics", "f32_to_tf32")
def f32_to_tf32(f32):
    """``numerics.f32_to_tf32``: the rounding and the NaN rule selected on the whole array."""
    b, _, a = _f32_words(f32)
    r = np.where(a > 0x7F800000, (b & 0xFFFFE000) | 0x400000, _rne_shift(b, 13) << 13)
    return r.astype(np.uint32).view(np.float32).reshape(f32.shape)


@vectorised("nki.sim.numerics", "f32_to_int")
def f32_to_int(f32, lo, hi):
    """``numerics.f32_to_int``: rounded in float64, saturated, NaN to 0, then narrowed (every
    value left is an integer below 2**53, so the cast is exact)."""
    with np.errstate(invalid="ignore"):      # a signalling NaN widened; the loop ignores it
        r = np.rint(np.ravel(f32).astype(np.float64))
    r = np.where(r != r, 0.0, np.clip(r, np.float64(lo), np.float64(hi)))
    return r.astype(np.int64).reshape(f32.shape)
