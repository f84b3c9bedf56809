"""Reduce family: ``tensor_reduce``, ``tensor_partition_reduce``, ``tensor_scalar_reduce``,
``bn_stats``, ``bn_aggr``, ``tensor_tensor_scan``.

Reductions are in-order left folds in fp32 (``((x0 op x1) op x2) ...``), so both backends and
every array layout give the same bits; bit operations (and GpSimd's native int32 partition
reduce) fold exact int64 values. Row maxima and minima are the exception: order cannot change
their value, so they fold 64 lanes at a time (vectorised; ~4x faster), which only decides
which of equal candidates (+0 / -0) is returned — unspecified on hardware too.
``tensor_scalar_reduce`` keeps its running result in the
VectorE accumulators at the end of the PSUM arena, one fp32 register per partition of the
operand (lane ``p`` of an access is its ``p``-th partition), so chains of calls see it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from nki.ir.ops import Opcode
from nki.sim.emit import emitter, imm
from nki.sim.helpers import accumulators as accs
from nki.sim.helpers import alu
from nki.sim.helpers.memory import f32_rows, load_f32, load_i64, store_f32, store_i64
from nki.sim.helpers.registry import helper
from nki.sim.layout import O_COUNT, O_OFF, VECTOR_ACC_FROM_END, operand_base

OP0, OP1, OP2, OP3, OP4 = (operand_base(i) for i in range(5))
# reduce_cmd values (nki.ir.ops.ReduceCmd) as literals for Numba
IDLE, RESET, REDUCE, RESET_REDUCE, LOAD_REDUCE = 0, 1, 2, 3, 4


@njit(cache=True, nogil=True)
def _rows(x, p):
    """A contiguous load viewed as ``p`` partition rows (``shape_of`` cannot recognise a
    1-partition operand, so helpers that need rows are told ``p``)."""
    return x.reshape(p, x.size // p)


@njit(cache=True, nogil=True)
def fold_f32(op, r, rows):
    """``r = r op rows[0] op rows[1] ...`` in order; ``rows`` (K, M) contiguous, ``r`` (M,)."""
    for j in range(rows.shape[0]):
        r = alu.binary_f32(op, r, rows[j])
    return r


@njit(cache=True, nogil=True)
def fold_i64(op, r, rows):
    """Exact integer version of :func:`fold_f32`."""
    for j in range(rows.shape[0]):
        r = alu.binary_i64(op, r, rows[j], 32)
    return r


# lanes per row of extreme_rows' first pass: a multiple of every vector width
_EXTREME_LANES = 64


# _lane_extremes and _first_nan are inlined into extreme_rows: a row slice handed to a
# function that is not inlined costs an NRT incref and decref per row
@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _lane_extremes(is_max, row, acc):
    """``acc[k] = extreme(acc[k], row[j*W + k])`` over every whole chunk ``j`` of
    ``W = acc.size`` elements of a contiguous ``row``. Elementwise over ``k``, which LLVM
    vectorises; a running scalar extreme is a floating-point reduction, which it does not
    (without fast-math), and ran at one element per ~1.5 cycles."""
    W = acc.size
    if is_max:
        for j in range(row.size // W):
            for k in range(W):
                acc[k] = max(acc[k], row[j * W + k])
    else:
        for j in range(row.size // W):
            for k in range(W):
                acc[k] = min(acc[k], row[j * W + k])


@njit(cache=True, nogil=True, error_model="numpy")
def _fold_lanes(is_max, acc):
    """``max(max(acc[0], acc[1]), acc[2]) ...`` in lane order, each step keeping the left
    value unless the right one is strictly beyond (Numba's ``max``/``min``), for NaN-free
    lanes; ``acc`` is overwritten. That step returns the leftmost of the extreme values (which
    zero of a +0/-0 tie), and "leftmost" composes over adjacent pairs, so a tree of adjacent
    pairs returns the very element the left-to-right chain did, in 6 levels of independent
    steps instead of 63 dependent ones (~250 cycles a row of 64 lanes)."""
    w = acc.size
    while w > 1:
        h = w // 2
        for i in range(h):
            a, b = acc[2 * i], acc[2 * i + 1]
            acc[i] = (b if b > a else a) if is_max else (b if b < a else a)
        if w % 2 == 1:
            acc[h] = acc[w - 1]
        w = h + w % 2
    return acc[0]


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _first_nan(row) -> int:
    """Index of the first NaN in ``row``, or -1 (a vectorised scan first: NaNs are rare)."""
    nan = False
    for i in range(row.size):
        nan |= row[i] != row[i]
    if nan:
        for i in range(row.size):
            if row[i] != row[i]:
                return i
    return -1


@njit(cache=True, nogil=True, error_model="numpy")
def extreme_rows(op, flat, off, stride, R, N):
    """Row maxima (``op`` MAX) or minima of the ``R`` rows of ``N`` contiguous elements at
    ``flat[off + r*stride:]``, NaN winning (np.maximum semantics): per row, 64 lane extremes
    over whole chunks, then those lanes and the leftover elements; a row with a NaN returns
    its first NaN (19 µs for 128x1024, was 73 µs as one running compare-select). Order
    cannot change the value, only which of equal candidates (+0 / -0) is returned, which is
    unspecified on hardware too."""
    is_max = op == alu.MAX
    W = min(N, _EXTREME_LANES)
    acc = np.empty(W, np.float32)
    out = np.empty(R, np.float32)
    for r in range(R):
        row = flat[off + r * stride:off + r * stride + N]
        acc[:] = -np.inf if is_max else np.inf
        _lane_extremes(is_max, row, acc)
        m = _fold_lanes(is_max, acc)
        for i in range(N - N % W, N):
            m = max(m, row[i]) if is_max else min(m, row[i])
        nan_at = _first_nan(row)
        out[r] = row[nan_at] if nan_at >= 0 else m
    return out


@njit(cache=True, nogil=True)
def _columns(x):
    """(M, R) → contiguous (R, M): the fold runs over the reduced elements, vectorised over
    the M kept positions."""
    return np.ascontiguousarray(x.T)


@njit(cache=True, nogil=True)
def _data_groups(H, S, PS, irow, L, red):
    """The data operand as groups of ``red`` fp32 elements: (flat array, offset, group stride,
    groups, ``red``). The arena itself when the data is fp32 rows of exactly ``red`` elements
    (the usual ``axis=1`` reduce of a [P, F] tile), else a decoded copy. Every fold only
    reads it; skipping the copy saves ~12 µs of a 128x1024 reduce."""
    mem, off, stride, rows, n = f32_rows(H, S, PS, irow, OP1, L)
    if rows > 0 and n == red:
        return mem, off, stride, rows, n
    x = load_f32(H, S, PS, irow, OP1, L).ravel()
    return x, 0, red, x.size // red, red


@njit(cache=True, nogil=True)
def _groups_f32(H, S, PS, irow, L, red):
    """:func:`_data_groups` as a (groups, ``red``) view."""
    flat, off, stride, groups, n = _data_groups(H, S, PS, irow, L, red)
    return np.lib.stride_tricks.as_strided(flat[off:], shape=(groups, n), strides=(stride * 4, 4))


@helper(row_wise=True)
@njit(cache=True, nogil=True)
def tensor_reduce(H, S, PS, irow, frow, L):
    """dst = fold(op) of data over its last ``reduced`` elements per group.

    ints: op, negate, int_math, reduced."""
    op, neg, im, red = irow[2], irow[3], irow[4], irow[5]
    if im == 1:
        xi = load_i64(H, S, PS, irow, OP1, L)
        ci = _columns(xi.reshape(xi.size // red, red))
        store_i64(H, S, PS, irow, OP0, L, fold_i64(op, ci[0].copy(), ci[1:]))
        return 0
    if op == alu.MAX or op == alu.MIN:
        flat, off, stride, groups, n = _data_groups(H, S, PS, irow, L, red)
        y = extreme_rows(op, flat, off, stride, groups, n)
    elif op == alu.ADD or op == alu.SUB or op == alu.MUL:
        g = _groups_f32(H, S, PS, irow, L, red)
        y = alu.fold_rows_f32(op, g[:, 0], g[:, 1:])
    else:
        c = _columns(_groups_f32(H, S, PS, irow, L, red))
        y = fold_f32(op, c[0].copy(), c[1:])
    if op >= alu.LAND and op <= alu.LXOR:   # a single element is not yet 0/1
        y = (y != np.float32(0.0)).astype(np.float32)
    if neg == 1:
        y = -y      # a sign flip in both backends (x * -1 keeps a NaN's sign in numpy only)
    store_f32(H, S, PS, irow, OP0, L, y)
    return 0


@helper
@njit(cache=True, nogil=True)
def tensor_partition_reduce(H, S, PS, irow, frow, L):
    """dst[0, :] = fold(op) of data over partitions (average: sum / P).

    ints: op, int_math, partitions."""
    op, im, p = irow[2], irow[3], irow[4]
    if im == 1:
        xi = _rows(load_i64(H, S, PS, irow, OP1, L), p)
        store_i64(H, S, PS, irow, OP0, L, fold_i64(op, xi[0].copy(), xi[1:]))
        return 0
    x = _rows(load_f32(H, S, PS, irow, OP1, L), p)
    if op == alu.AVERAGE:
        y = fold_f32(alu.ADD, x[0].copy(), x[1:]) / np.float32(p)
    else:
        y = fold_f32(op, x[0].copy(), x[1:])
    store_f32(H, S, PS, irow, OP0, L, y)
    return 0


@njit(cache=True, nogil=True)
def _identity(op):
    if op == alu.MUL:
        return np.float32(1.0)
    if op == alu.MAX:
        return np.float32(-np.inf)
    if op == alu.MIN:
        return np.float32(np.inf)
    return np.float32(0.0)


@njit(cache=True, nogil=True)
def _per_partition_value(H, S, PS, irow, frow, base, imm_index, is_tile, p, L):
    """A [P,1] tile operand as a (P,) array, or an immediate broadcast to (P,)."""
    if is_tile == 1:
        return load_f32(H, S, PS, irow, base, L).ravel()[:p].copy()
    return np.full(p, np.float32(frow[imm_index]), np.float32)


@njit(cache=True, nogil=True)
def _lanes(irow):
    """(partitions, first register lane) of this call, which runs row-wise: a chunk of
    partitions ``p0 ..`` of the operands owns registers ``p0 ..`` (``set_chunk`` moved the
    dst's offset by ``p0`` partition strides from the encoded one). VectorE lanes count from
    the access's first partition (ScalarE's are physical partitions: nki/sim/uninit.py)."""
    if irow[10] == 1:       # one partition is never chunked
        return 1, 0
    p0 = 0
    if irow[12] != 0:
        p0 = (irow[OP0 + O_OFF] - irow[11]) // irow[12]
    return irow[OP0 + O_COUNT], p0


@njit(cache=True, nogil=True)
def _fold_registers(rop, regs, y):
    """``regs[p] op y[p, 0] op y[p, 1] ...`` in order: along rows for the arithmetic
    operators (cache-friendly, 8 chains at a time), else column by column."""
    if rop == alu.ADD or rop == alu.SUB or rop == alu.MUL or rop == alu.MAX or rop == alu.MIN:
        return alu.fold_rows_f32(rop, regs, y)
    return fold_f32(rop, regs.copy(), _columns(y))


@helper(row_wise=True)
@njit(cache=True, nogil=True)
def tensor_scalar_reduce(H, S, PS, irow, frow, L):
    """dst = data op0 operand0; VectorE registers updated by reduce_cmd with reduce_op.

    ints: op0, reverse0, operand0_is_tile, reduce_op, reduce_cmd, has_res, negate,
    init_is_tile, partitions, dst offset and partition stride (for chunks). floats: imm0,
    init."""
    op0, rev0, t0, rop, cmd = irow[2], irow[3], irow[4], irow[5], irow[6]
    has_res, neg, tinit = irow[7], irow[8], irow[9]
    p, p0 = _lanes(irow)
    x = _rows(load_f32(H, S, PS, irow, OP1, L), p)
    s = _per_partition_value(H, S, PS, irow, frow, OP2, 0, t0, p, L).reshape(p, 1)
    y = alu.binary_col_f32(op0, x, s, rev0 == 1)
    store_f32(H, S, PS, irow, OP0, L, y)
    regs = PS.view(np.float32)[-VECTOR_ACC_FROM_END:][p0:p0 + p]
    if cmd == REDUCE or (cmd == IDLE and has_res == 1):
        accs.check_lanes(PS, frow, accs.VECTOR, p0, p)
    if cmd != IDLE:
        accs.mark_written(PS, accs.VECTOR, p0, p)
    if cmd == RESET or cmd == RESET_REDUCE:
        regs[:] = _identity(rop)
    elif cmd == LOAD_REDUCE:
        regs[:] = _per_partition_value(H, S, PS, irow, frow, OP4, 1, tinit, p, L)
    if cmd == REDUCE or cmd == RESET_REDUCE or cmd == LOAD_REDUCE:
        regs[:] = _fold_registers(rop, regs, y)
    if has_res == 1:
        out = regs.copy()
        if neg == 1:
            out = -out
        store_f32(H, S, PS, irow, OP3, L, out)
    return 0


@njit(cache=True, nogil=True, error_model="numpy")
def _moments(x, out):
    """bn_stats' six values per row of ``x``: (count, mean, sum of squared deviations) of
    the even elements, then of the odd ones. Every sum is one in-order chain (so the bits
    are those of separate left folds); four rows go together, so eight independent chains
    hide the adds' latency (1.6x faster than one row at a time, whose two chains waited on
    each other's adds)."""
    p, n = x.shape
    i = 0
    while i + 4 <= p:
        _moments4(x[i], x[i + 1], x[i + 2], x[i + 3], out[i:i + 4])
        i += 4
    for r in range(i, p):   # the last rows: the same chains, one row at a time
        _moments4(x[r], x[r], x[r], x[r], out[r:r + 1])


@njit(cache=True, nogil=True, error_model="numpy")
def _moments4(r0, r1, r2, r3, out):
    """_moments of four rows into ``out`` (its first ``len(out)`` of them)."""
    n = r0.size
    ce, co = (n + 1) // 2, n // 2
    se, so = _pair_sums4(r0, r1, r2, r3, co)
    if ce > co:
        se = (se[0] + r0[n - 1], se[1] + r1[n - 1], se[2] + r2[n - 1], se[3] + r3[n - 1])
    fe, fo = np.float32(max(ce, 1)), np.float32(max(co, 1))
    me = (se[0] / fe, se[1] / fe, se[2] / fe, se[3] / fe)
    mo = (so[0] / fo, so[1] / fo, so[2] / fo, so[3] / fo)
    qe, qo = _pair_squares4(r0, r1, r2, r3, co, me, mo)
    rows = (r0, r1, r2, r3)
    for q in range(out.shape[0]):
        e = qe[q]
        if ce > co:
            d = rows[q][n - 1] - me[q]
            e += d * d
        out[q, 0], out[q, 1], out[q, 2] = np.float32(ce), me[q], e
        out[q, 3], out[q, 4], out[q, 5] = np.float32(co), mo[q], qo[q]


@njit(cache=True, nogil=True, error_model="numpy")
def _pair_sums4(r0, r1, r2, r3, co):
    """In-order sums of the even and of the odd elements of four rows (the first ``2 co``)."""
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = np.float32(0.0)
    for j in range(co):
        a0 += r0[2 * j]
        b0 += r0[2 * j + 1]
        a1 += r1[2 * j]
        b1 += r1[2 * j + 1]
        a2 += r2[2 * j]
        b2 += r2[2 * j + 1]
        a3 += r3[2 * j]
        b3 += r3[2 * j + 1]
    return (a0, a1, a2, a3), (b0, b1, b2, b3)


@njit(cache=True, nogil=True, error_model="numpy")
def _pair_squares4(r0, r1, r2, r3, co, me, mo):
    """In-order sums of squared deviations from ``me`` (even) and ``mo`` (odd elements)."""
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = np.float32(0.0)
    for j in range(co):
        d = r0[2 * j] - me[0]
        a0 += d * d
        d = r0[2 * j + 1] - mo[0]
        b0 += d * d
        d = r1[2 * j] - me[1]
        a1 += d * d
        d = r1[2 * j + 1] - mo[1]
        b1 += d * d
        d = r2[2 * j] - me[2]
        a2 += d * d
        d = r2[2 * j + 1] - mo[2]
        b2 += d * d
        d = r3[2 * j] - me[3]
        a3 += d * d
        d = r3[2 * j + 1] - mo[3]
        b3 += d * d
    return (a0, a1, a2, a3), (b0, b1, b2, b3)


@helper
@njit(cache=True, nogil=True)
def bn_stats(H, S, PS, irow, frow, L):
    """dst[p] = moments of data[p, 0::2], then of data[p, 1::2]. ints: partitions."""
    x = _rows(load_f32(H, S, PS, irow, OP1, L), irow[2])
    out = np.empty((x.shape[0], 6), np.float32)
    _moments(x, out)
    store_f32(H, S, PS, irow, OP0, L, out)
    return 0


@helper
@njit(cache=True, nogil=True)
def bn_aggr(H, S, PS, irow, frow, L):
    """dst[p] = (mean, variance) of k (count, mean, var*count) triples. ints: partitions."""
    p = irow[2]
    x = _rows(load_f32(H, S, PS, irow, OP1, L), p)
    k = x.shape[1] // 3
    t = x.reshape(p, k, 3)
    cnt, mu, m2 = _columns(t[:, :, 0]), _columns(t[:, :, 1]), _columns(t[:, :, 2])
    zero = np.zeros(p, np.float32)
    n = np.maximum(fold_f32(alu.ADD, zero, cnt), np.float32(1.0))   # n = 0 gives (0, 0)
    mean = fold_f32(alu.ADD, zero, cnt * mu) / n
    dev = mu - mean
    out = np.empty((p, 2), np.float32)
    out[:, 0] = mean
    out[:, 1] = fold_f32(alu.ADD, zero, m2 + cnt * dev * dev) / n
    store_f32(H, S, PS, irow, OP0, L, out)
    return 0


@helper
@njit(cache=True, nogil=True)
def tensor_tensor_scan(H, S, PS, irow, frow, L):
    """r[i] = op1(op0(data0[i], r[i-1]), data1[i]) per partition, r[-1] = initial.

    ints: op0, op1, reverse0, reverse1, partitions, initial_is_tile. floats: initial."""
    op0, op1, rev0, rev1, p, tinit = irow[2], irow[3], irow[4], irow[5], irow[6], irow[7]
    a = _columns(_rows(load_f32(H, S, PS, irow, OP1, L), p))
    b = _columns(_rows(load_f32(H, S, PS, irow, OP2, L), p))
    r = _per_partition_value(H, S, PS, irow, frow, OP3, 0, tinit, p, L)
    out = np.empty_like(a)
    for i in range(a.shape[0]):
        t = alu.binary_f32(op0, r, a[i]) if rev0 == 1 else alu.binary_f32(op0, a[i], r)
        r = alu.binary_f32(op1, b[i], t) if rev1 == 1 else alu.binary_f32(op1, t, b[i])
        out[i] = r
    store_f32(H, S, PS, irow, OP0, L, _columns(out))
    return 0


# ----- references: independent numpy oracles (float64 where the op is not exact) ------------

def reference_tensor_reduce(op, data, naxes, negate=False):
    """Oracle: reduce the last ``naxes`` dims of ``data`` (host array) with ALU ``op``.

    Arithmetic ops fold in fp32 in element order (``np.add.reduce`` would sum pairwise);
    integer bit operations use numpy's exact reductions."""
    op = int(op)
    x = np.asarray(data)
    lead = x.shape[:x.ndim - naxes]
    if op in (21, 22, 23):
        ufunc = {21: np.bitwise_and, 22: np.bitwise_or, 23: np.bitwise_xor}[op]
        return ufunc.reduce(x.reshape(lead + (-1,)), axis=-1)
    flat = x.astype(np.float32).reshape(lead + (-1,))
    if op in (18, 19, 20):
        nz = flat != 0
        red = {18: np.all, 19: np.any}.get(op)
        res = red(nz, axis=-1) if red else (np.sum(nz, axis=-1) % 2 == 1)
        return res.astype(np.float32)
    ufunc = {1: np.add, 2: np.subtract, 3: np.multiply, 5: np.maximum, 6: np.minimum}[op]
    acc = flat[..., 0].copy()
    for j in range(1, flat.shape[-1]):
        acc = ufunc(acc, flat[..., j]).astype(np.float32)
    return -acc if negate else acc


def reference_bn_stats(data):
    """Oracle (float64): [count, mean, var*count] of even then odd elements per row."""
    x = np.asarray(data, np.float64).reshape(len(data), -1)
    cols = []
    for part in (x[:, 0::2], x[:, 1::2]):
        c = part.shape[1]
        m = part.mean(axis=1) if c else np.zeros(len(x))
        cols += [np.full(len(x), c), m, ((part - m[:, None]) ** 2).sum(axis=1)]
    return np.stack(cols, axis=1)


def reference_bn_aggr(stats):
    """Oracle (float64): (mean, var) from concatenated (count, mean, var*count) triples."""
    t = np.asarray(stats, np.float64).reshape(len(stats), -1, 3)
    n = t[:, :, 0].sum(axis=1)
    mean = (t[:, :, 0] * t[:, :, 1]).sum(axis=1) / n
    m2 = (t[:, :, 2] + t[:, :, 0] * (t[:, :, 1] - mean[:, None]) ** 2).sum(axis=1)
    return np.stack([mean, m2 / n], axis=1)


def reference_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False):
    """Oracle (fp32, element by element) for tensor_tensor_scan on [P, N] host arrays."""
    fns = {1: np.add, 2: np.subtract, 3: np.multiply, 5: np.maximum, 6: np.minimum}
    f0, f1 = fns[int(op0)], fns[int(op1)]
    a = np.asarray(data0, np.float32).reshape(len(data0), -1)
    b = np.asarray(data1, np.float32).reshape(len(data1), -1)
    r = np.broadcast_to(np.asarray(initial, np.float32).reshape(-1), (len(a),)).copy()
    out = np.empty_like(a)
    for i in range(a.shape[1]):
        t = f0(r, a[:, i]) if reverse0 else f0(a[:, i], r)
        r = (f1(b[:, i], t) if reverse1 else f1(t, b[:, i])).astype(np.float32)
        out[:, i] = r
    return out


# ----- encoders -------------------------------------------------------------------------------

@emitter(Opcode.TENSOR_REDUCE, tensor_reduce, reference_tensor_reduce)
def encode_tensor_reduce(ins, w, ops):
    w.ints(int(ins.attr("op")), int(ins.attr("negate")), int(ins.attr("int_math")),
           int(ins.attr("reduced")))
    w.operand(ops["dst"]).operand(ops["data"])


@emitter(Opcode.TENSOR_PARTITION_REDUCE, tensor_partition_reduce)
def encode_tensor_partition_reduce(ins, w, ops):
    w.ints(int(ins.attr("op")), int(ins.attr("int_math")), int(ins.attr("parts")))
    w.operand(ops["dst"]).operand(ops["data"])


@emitter(Opcode.TENSOR_SCALAR_REDUCE, tensor_scalar_reduce)
def encode_tensor_scalar_reduce(ins, w, ops):
    w.ints(int(ins.attr("op0")), int(ins.attr("reverse0")), int("operand0" in ops),
           int(ins.attr("reduce_op")), int(ins.attr("reduce_cmd")), int("reduce_res" in ops),
           int(ins.attr("negate")), int("reduce_init" in ops), int(ins.attr("parts")),
           ops["dst"].offset.const, ops["dst"].dims[0][0])
    w.floats(imm(ins.attr("imm0")), imm(ins.attr("init")))
    w.operand(ops["dst"]).operand(ops["data"]).operand(ops.get("operand0"))
    w.operand(ops.get("reduce_res")).operand(ops.get("reduce_init")).site()


@emitter(Opcode.BN_STATS, bn_stats, reference_bn_stats)
def encode_bn_stats(ins, w, ops):
    w.ints(int(ins.attr("parts"))).operand(ops["dst"]).operand(ops["data"])


@emitter(Opcode.BN_AGGR, bn_aggr, reference_bn_aggr)
def encode_bn_aggr(ins, w, ops):
    w.ints(int(ins.attr("parts"))).operand(ops["dst"]).operand(ops["data"])


@emitter(Opcode.TENSOR_TENSOR_SCAN, tensor_tensor_scan, reference_scan)
def encode_tensor_tensor_scan(ins, w, ops):
    w.ints(int(ins.attr("op0")), int(ins.attr("op1")), int(ins.attr("reverse0")),
           int(ins.attr("reverse1")), int(ins.attr("parts")), int("initial" in ops))
    w.floats(imm(ins.attr("initial")))
    w.operand(ops["dst"]).operand(ops["data0"]).operand(ops["data1"])
    w.operand(ops.get("initial"))

