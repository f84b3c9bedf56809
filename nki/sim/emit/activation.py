"""Scalar-engine activation family: ``activation`` and ``activation_reduce`` (one opcode).

``dst = op(data * scale + bias)`` in fp32; transcendental functions come from
``nki.sim.transcend`` (vectorised, identical bits compiled and interpreted). The optional
free-dim sum updates the Scalar engine's 128 fp32 reduce registers, which live after the PSUM
partitions (``layout.SCALAR_ACC_FROM_END``) and persist across the instructions of a run.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from nki.ir.ops import Act, Opcode, ReduceCmd
from nki.sim import numerics as nm
from nki.sim import transcend as tr
from nki.sim.emit import emitter, imm
from nki.sim.helpers import accumulators as accs
from nki.sim.helpers import alu
from nki.sim.helpers.memory import (
    copy_row,
    element_offset,
    float_rows,
    load_f32,
    rows_same_or_apart,
    shape_of,
    store_f32,
)
from nki.sim.helpers.registry import helper
from nki.sim.layout import SCALAR_ACC_FROM_END, operand_base

DST, DATA, BIAS, SCALE, RES = (operand_base(i) for i in range(5))

# Act codes, repeated as literals so Numba folds the branches (checked against the enum below)
(COPY, EXP, LOG, SIN, COS, TAN, ARCTAN, TANH, SIGMOID, RELU, GELU, GELU_DX, GELU_TANH,
 GELU_SIG, GELU_SIG_DX, SILU, SILU_DX, ERF, ERF_DX, SOFTPLUS, MISH, SQUARE, SQRT, RSQRT,
 RECIPROCAL, SIGN, ABS, NEGATIVE, FLOOR, CEIL, TRUNC) = range(31)
assert [a.value for a in Act][:31] == list(range(31)) and Act.trunc.value == TRUNC
IDLE, RESET, REDUCE, RESET_REDUCE = int(ReduceCmd.idle), int(ReduceCmd.reset), \
    int(ReduceCmd.reduce), int(ReduceCmd.reset_reduce)


@njit(cache=True, nogil=True)
def _elementary(code, z):
    """The functions that are exact (or correctly rounded) in plain fp32 arithmetic.

    Written so numpy and Numba agree on signed zeros and NaN (their ``np.sign`` and
    ``np.maximum`` differ on -0): relu and sign propagate NaN, relu(-0) = sign(+-0) = +0."""
    if code == RELU:
        return np.where(z > np.float32(0.0), z, np.where(z == z, np.zeros_like(z), z))
    if code == SIGN:
        s = (z > np.float32(0.0)).astype(np.float32) - (z < np.float32(0.0)).astype(np.float32)
        return np.where(z == z, s, z)
    if code == SQUARE:
        return z * z
    if code == SQRT:
        return np.sqrt(z)
    if code == ABS:
        return np.abs(z)
    if code == NEGATIVE:
        return -z
    if code == FLOOR:
        return np.floor(z)
    if code == CEIL:
        return np.ceil(z)
    if code == TRUNC:
        return np.trunc(z)
    return z.copy()  # copy (identity)


@njit(cache=True, nogil=True)
def apply_act_into(code, z, out):
    """``out[:] = op(z)`` for an ``Act`` code, ``z`` and ``out`` 1-D float32 arrays of one
    size (``out`` may be ``z`` itself)."""
    if code == EXP:
        tr.exp(z, out)
    elif code == LOG:
        tr.log(z, out)
    elif code == SIN:
        tr.sin(z, out)
    elif code == COS:
        tr.cos(z, out)
    elif code == TAN:
        tr.tan(z, out)
    elif code == ARCTAN:
        tr.arctan(z, out)
    elif code == TANH:
        tr.tanh(z, out)
    elif code == SIGMOID:
        tr.sigmoid(z, out)
    elif code == GELU:
        tr.gelu(z, out)
    elif code == GELU_DX:
        tr.gelu_dx(z, out)
    elif code == GELU_TANH:
        tr.gelu_apprx_tanh(z, out)
    elif code == GELU_SIG:
        tr.gelu_apprx_sigmoid(z, out)
    elif code == GELU_SIG_DX:
        tr.gelu_apprx_sigmoid_dx(z, out)
    elif code == SILU:
        tr.silu(z, out)
    elif code == SILU_DX:
        tr.silu_dx(z, out)
    elif code == ERF:
        tr.erf(z, out)
    elif code == ERF_DX:
        tr.erf_dx(z, out)
    elif code == SOFTPLUS:
        tr.softplus(z, out)
    elif code == MISH:
        tr.mish(z, out)
    elif code == RSQRT:
        tr.rsqrt(z, out)
    elif code == RECIPROCAL:
        tr.reciprocal(z, out)
    elif code == SQUARE:
        _square_into(z, out)
    elif code == COPY:
        copy_row(out, z)
    else:
        out[:] = _elementary(code, z)


@njit(cache=True, nogil=True, inline="always")
def _square_into(z, out):
    """``out = z * z`` in one loop (rmsnorm's sum of squares): ``_elementary``'s array
    expression made a new array per row and a second pass to copy it (a 128x1024 square
    cost as much as an exp)."""
    for i in range(out.size):
        out[i] = z[i] * z[i]


@njit(cache=True, nogil=True)
def apply_act(code, z):
    """``op(z)`` for an ``Act`` code on a float32 array; returns a new float32 array."""
    out = np.empty(z.size, np.float32)
    apply_act_into(code, z.ravel(), out)
    return out.reshape(z.shape)


@njit(cache=True, nogil=True)
def _row_sums(start, y, first):
    """Per row: ``start + y[:, first] + y[:, first+1] + ...``, one fp32 addition per element
    in free-dim order (the engine streams along the free dim)."""
    return alu.fold_rows_f32(alu.ADD, start, y[:, first:])


@njit(cache=True, nogil=True)
def _lanes(PS, irow, L, P, row):
    """This instruction's ScalarE register lanes (a view): lane ``i`` is physical partition
    ``i``, and the data operand's first partition is its element offset divided by the
    partition stride ``row``."""
    lane0 = element_offset(irow, DATA, L) // row
    return PS.view(np.float32)[-SCALAR_ACC_FROM_END:][lane0:lane0 + P]


@njit(cache=True, nogil=True)
def _update_registers(PS, irow, frow, L, y, cmd, P, row, has_res, sums):
    """Apply ``reduce_cmd`` to this instruction's lanes; returns them (P,) after the update.

    ``sums``: the lanes' new values for ``reduce`` / ``reset_reduce`` when the caller folded
    them already (P of them), else empty and they are folded here from ``y``. ``reduce`` and
    an ``idle`` read-out use the registers as they are, so never-written lanes are logged
    first."""
    lane0 = element_offset(irow, DATA, L) // row
    regs = _lanes(PS, irow, L, P, row)
    if cmd == REDUCE or (cmd == IDLE and has_res == 1):
        accs.check_lanes(PS, frow, accs.SCALAR, lane0, P)
    if cmd != IDLE:
        accs.mark_written(PS, accs.SCALAR, lane0, P)
    if cmd == RESET:
        regs[:] = np.float32(0.0)
    elif (cmd == REDUCE or cmd == RESET_REDUCE) and sums.size == P:
        regs[:] = sums
    elif cmd == REDUCE:
        regs[:] = _row_sums(regs, y, 0)
    elif cmd == RESET_REDUCE:
        regs[:] = _row_sums(y[:, 0], y, 1)
    return regs.copy()


@njit(cache=True, nogil=True)
def _column(H, S, PS, irow, frow, L, base, imm, is_tile, P):
    """A scale/bias operand as a (P, 1) tile, or its immediate as (1, 1)."""
    if is_tile == 1:
        return load_f32(H, S, PS, irow, base, L).reshape(P, 1)
    return np.full((1, 1), np.float32(frow[imm]), np.float32)


@njit(cache=True, nogil=True, inline="always")
def _affine_row(src, dst, use_scale, s, use_bias, b):
    """``dst = src * s + b`` (each step only when used) in one pass over two distinct rows:
    the engine's two fp32 roundings in its order (no fastmath, so no FMA contraction), where
    a copy and two in-place passes made three."""
    if use_scale == 1 and use_bias == 1:
        for i in range(dst.size):
            dst[i] = src[i] * s + b
    elif use_scale == 1:
        for i in range(dst.size):
            dst[i] = src[i] * s
    else:
        for i in range(dst.size):
            dst[i] = src[i] + b


@njit(cache=True, nogil=True)
def _fold_group(dm, do, ds, g0, g1, n, fold, start, sums):
    """Row sums of dst rows ``g0 .. g1`` (just written, still in L1) into ``sums[g0:g1]``:
    from ``start`` (``fold`` 1, ``reduce``) or from each row's first element (``fold`` 2,
    ``reset_reduce``); the very additions, in the very order, of folding the whole tile
    afterwards (:func:`_row_sums`), on the arena's unit-stride rows."""
    o = do + g0 * ds
    acc = sums[g0:g1]
    if fold == 1:
        acc[:] = start[g0:g1]
        alu.fold_flat_rows_f32(alu.ADD, acc, dm, o, ds, 0, n)
    else:
        for r in range(g1 - g0):
            acc[r] = dm[o + r * ds]
        alu.fold_flat_rows_f32(alu.ADD, acc, dm, o, ds, 1, n)


@njit(cache=True, nogil=True)
def _act_row(act, x32, xm, xh, x0, d32, dm, dh, d0, n, use_scale, s, use_bias, b, zbuf, obuf):
    """One row of :func:`_activation_in_rows`: data row at ``x0`` (fp32 ``xm`` or bf16
    ``xh``) scaled, biased, mapped and written to the dst row at ``d0`` (rounded to bf16
    through ``obuf`` when the dst is bf16); ``zbuf`` holds the affine step's result."""
    z = zbuf
    if x32 and (use_scale == 1 or use_bias == 1):
        _affine_row(xm[x0:x0 + n], zbuf, use_scale, s, use_bias, b)
    elif x32:
        z = xm[x0:x0 + n]
    else:
        nm.bf16_to_f32_into(xh[x0:x0 + n], zbuf)
        if use_scale == 1:
            alu.col_into(alu.MUL, zbuf, s, False)
        if use_bias == 1:
            alu.col_into(alu.ADD, zbuf, b, False)
    if d32 and act == SQUARE:   # rmsnorm's: inlined, so its dst row slice is no NRT call
        _square_into(z, dm[d0:d0 + n])
    elif d32:
        apply_act_into(act, z, dm[d0:d0 + n])
    else:
        apply_act_into(act, z, obuf)
        nm.f32_to_bf16_into(obuf, dh[d0:d0 + n])


_FOLD_ROWS = 8   # rows written before their sums are folded: 8 x 4 KiB rows stay in L1
# Rows shorter than this go through the whole-tile path: one transcendental call over P x n
# elements, not P calls of n (~130 ns of set-up each). Measured on a Zen 5, [128, n] fp32 exp:
# n = 1 17 -> 2.4 us, 64 17 -> 7.4, 256 even, 512 and 1024 7-15% faster by rows.
_ROW_MIN = 512


@njit(cache=True, nogil=True)
def _activation_in_rows(H, S, PS, irow, L, act, P, use_scale, scale, use_bias, bias, need_y,
                        fold, start):
    """``dst = op(data * scale + bias)`` row by row, from the data rows straight into the dst
    rows (fp32 or bf16, decoded and rounded a row at a time), when the rows are the same or
    share no element. Returns (done, the dst rows as a (P, n) fp32 view for the register
    sums, or an empty array, the register sums when ``fold`` asked for them, else empty);
    bf16 dst rows are refused when ``need_y`` (the sums are of the fp32 results). One read
    and one write per element, where decoding a copy, scaling it, mapping it into a new
    array and storing that made four passes (a quarter of a 1M-element gelu); the sums are
    folded every ``_FOLD_ROWS`` rows while those rows are in L1 (a 128x1024 exp with sums:
    117 µs, was 152 µs folding the tile afterwards). Same arithmetic, in the same order, so
    the same bits."""
    none = np.empty((0, 0), np.float32)
    sums = np.empty(P if fold != 0 else 0, np.float32)
    x32, xm, xh, xo, xs, xr, n = float_rows(H, S, PS, irow, DATA, L)
    d32, dm, dh, do, ds, dr, dn = float_rows(H, S, PS, irow, DST, L)
    if n < _ROW_MIN or dr != P or xr != P or dn != n or (need_y and not d32) or \
            not rows_same_or_apart(irow, DATA, x32, xo, xs, DST, d32, do, ds, P, n):
        return False, none, sums[:0]
    zbuf, obuf = np.empty(n, np.float32), np.empty(n, np.float32)
    exp_rows = x32 and d32 and act == EXP     # softmax's and cross-entropy's exp(x - max)
    g0 = 0
    for r in range(P):
        x0, d0 = xo + r * xs, do + r * ds
        s = scale[r, 0] if scale.shape[0] == P else scale[0, 0]
        b = bias[r, 0] if bias.shape[0] == P else bias[0, 0]
        if exp_rows:
            tr.exp_affine(xm[x0:x0 + n], dm[d0:d0 + n], use_scale, s, use_bias, b)
        else:
            _act_row(act, x32, xm, xh, x0, d32, dm, dh, d0, n, use_scale, s, use_bias, b,
                     zbuf, obuf)
        if fold != 0 and (r + 1 - g0 == _FOLD_ROWS or r == P - 1):
            _fold_group(dm, do, ds, g0, r + 1, n, fold, start, sums)
            g0 = r + 1
    if not d32:
        return True, none, sums
    return True, np.lib.stride_tricks.as_strided(dm[do:], shape=(P, n), strides=(ds * 4, 4)), sums


# chunks of 8 x 16 Ki elements (a whole [128, 1024] tile at once): the row path's set-up
# (operand checks, scale/bias columns, row buffers, register lanes and their logs) ran once
# per 16 rows (cross-entropy's 128x1024 exp with sums: 77.7 -> 70.5 us per tile on a Zen 5);
# its only temporaries are rows, and the gathered path's tiles of up to 512 KiB sit in L2
@helper(row_wise=True, chunk_scale=8)
@njit(cache=True, nogil=True)
def activation(H, S, PS, irow, frow, L):
    """dst = op(data * scale + bias); optional row sums into the ScalarE registers.

    ints: act, reduce_cmd, scale_is_tile, bias_is_tile, use_scale, use_bias, has_reduce_res,
    partitions, data partition stride. floats: scale, bias immediates."""
    act, cmd, t_scale, t_bias, use_scale, use_bias, has_res, row = (
        irow[2], irow[3], irow[4], irow[5], irow[6], irow[7], irow[8], irow[10])
    P, _ = shape_of(irow, DATA)   # from the operand: row-wise chunks narrow it
    one = np.ones((1, 1), np.float32)   # stands in for an operand the call does not use
    scale = _column(H, S, PS, irow, frow, L, SCALE, 0, t_scale, P) if use_scale == 1 else one
    bias = _column(H, S, PS, irow, frow, L, BIAS, 1, t_bias, P) if use_bias == 1 else one
    need_y = cmd == RESET or cmd == REDUCE or cmd == RESET_REDUCE or has_res == 1
    # the row path folds the sums as it goes: from the registers as they are (reduce) or
    # from each row's first element (reset_reduce)
    fold = 1 if cmd == REDUCE else (2 if cmd == RESET_REDUCE else 0)
    start = _lanes(PS, irow, L, P, row).copy() if fold == 1 else np.empty(0, np.float32)
    done, y, sums = _activation_in_rows(H, S, PS, irow, L, act, P, use_scale, scale,
                                        use_bias, bias, need_y, fold, start)
    if not done:
        z = load_f32(H, S, PS, irow, DATA, L).reshape(P, -1)   # a fresh array: updated in place
        # column ops as explicit loops (Numba's broadcasting array expressions are 4-8x slower)
        if use_scale == 1:
            alu.binary_col_into_f32(alu.MUL, z, scale)
        if use_bias == 1:
            alu.binary_col_into_f32(alu.ADD, z, bias)
        y = apply_act(act, z)
        store_f32(H, S, PS, irow, DST, L, y)
    if need_y:
        regs = _update_registers(PS, irow, frow, L, y, cmd, P, row, has_res, sums)
        if has_res == 1:
            store_f32(H, S, PS, irow, RES, L, regs.reshape(P, 1))
    return 0


def _gelu_tanh64(x):
    from scipy.special import expit

    return x * expit(2.0 * np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3))


def _ref_functions() -> dict:
    """float64 definitions of every activation function (numpy/scipy)."""
    from scipy.special import erf, expit, ndtr

    def gelu_dx(x):
        return ndtr(x) + x * np.exp(-x * x / 2.0) / np.sqrt(2.0 * np.pi)

    def sig_dx(x, a):
        return expit(a * x) * (1.0 + a * x * expit(-a * x))

    return {
        Act.copy: lambda x: x, Act.exp: np.exp, Act.log: np.log, Act.sin: np.sin,
        Act.cos: np.cos, Act.tan: np.tan, Act.arctan: np.arctan, Act.tanh: np.tanh,
        Act.sigmoid: expit, Act.relu: lambda x: np.where(x > 0, x, np.where(x == x, 0.0, x)),
        Act.gelu: lambda x: x * ndtr(x), Act.gelu_dx: gelu_dx,
        Act.gelu_apprx_tanh: _gelu_tanh64,
        Act.gelu_apprx_sigmoid: lambda x: x * expit(1.702 * x),
        Act.gelu_apprx_sigmoid_dx: lambda x: sig_dx(x, 1.702),
        Act.silu: lambda x: x * expit(x), Act.silu_dx: lambda x: sig_dx(x, 1.0),
        Act.erf: erf, Act.erf_dx: lambda x: 2.0 / np.sqrt(np.pi) * np.exp(-x * x),
        Act.softplus: lambda x: np.logaddexp(0.0, x),
        Act.mish: lambda x: x * np.tanh(np.logaddexp(0.0, x)), Act.square: np.square,
        Act.sqrt: np.sqrt, Act.rsqrt: lambda x: 1.0 / np.sqrt(x),
        Act.reciprocal: lambda x: 1.0 / x, Act.sign: np.sign, Act.abs: np.abs,
        Act.negative: np.negative, Act.floor: np.floor, Act.ceil: np.ceil, Act.trunc: np.trunc,
    }


def reference_activation(op, data, scale=1.0, bias=None) -> np.ndarray:
    """Oracle (float64): ``op(fp32(fp32(data * scale) + bias))``.

    The pre-activation ``data * scale + bias`` is rounded to fp32 as the engine does (two
    roundings, no FMA), then ``op`` is evaluated in float64 with numpy/scipy. ``scale`` and
    ``bias`` are numbers or [P, 1] arrays; ``op`` an ``Act`` (or its value)."""
    z = np.asarray(data).astype(np.float32) * np.asarray(scale, np.float32)
    if bias is not None:
        z = z + np.asarray(bias).astype(np.float32)
    with np.errstate(all="ignore"):
        return _ref_functions()[Act(int(op))](z.astype(np.float32).astype(np.float64))


@emitter(Opcode.ACTIVATION, activation, reference_activation)
def encode_activation(ins, w, ops):
    data = ins.operand("data")
    row, parts = data.dims[0]
    scale, bias = ins.attr("scale"), ins.attr("bias")
    t_scale, t_bias = "scale" in ops, "bias" in ops
    w.ints(int(ins.attr("op")), int(ins.attr("reduce_cmd")), int(t_scale), int(t_bias),
           int(t_scale or float(scale) != 1.0), int(t_bias or bias is not None),
           int("reduce_res" in ops), parts, row)
    w.floats(imm(scale) if not t_scale else 0.0, imm(bias))
    w.operand(ops["dst"]).operand(ops["data"]).operand(ops.get("bias"))
    w.operand(ops.get("scale")).operand(ops.get("reduce_res")).site()
