"""Select family: ``iota``, ``affine_select``, ``range_select``, ``select_reduce``,
``tensor_copy_predicated`` (also behind ``nl.where``), ``scalar_tensor_tensor``,
``nc_stream_shuffle``, ``max8``, ``nc_find_index8``, ``nc_match_replace8`` (``dropout`` draws
from the RNG stream: ``nki/sim/emit/rng.py``).

Selections whose inputs share ``dst``'s dtype move raw bit patterns, so they are exact for
every dtype (NaN payloads, int32 beyond 2^24); the others compute in fp32. ``range_select`` and
``select_reduce`` max-reduce into the VectorE accumulators at the end of the PSUM arena; lane
``p`` is partition ``p`` of the instruction's operands (relative to their first partition).

The partition count of every operand is passed as an int attribute: ``shape_of`` cannot tell
the partition dim of a one-partition tile from its free dims.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from nki.ir.ops import Opcode
from nki.sim import numerics as nm
from nki.sim.emit import emitter, imm
from nki.sim.helpers import accumulators as acc_state
from nki.sim.helpers import alu
from nki.sim.helpers.memory import (
    DIRECT_ROW_MIN,
    copy_row,
    float_row,
    float_rows,
    int_range,
    is_int_code,
    load_bits,
    load_f32,
    rows_same_or_apart,
    same_rows,
    store_bits,
    store_f32,
    store_i64,
)
from nki.sim.helpers.registry import helper
from nki.sim.layout import (
    O_COUNT,
    O_DTYPE,
    O_PARTS,
    O_SPACE,
    VECTOR_ACC_FROM_END,
    operand_base,
)

OP0, OP1, OP2, OP3, OP4 = (operand_base(i) for i in range(5))
NONE = -1  # "no operand: use the immediate"

# nisa.reduce_cmd values (nki.ir.ops.ReduceCmd), literal so Numba folds them
IDLE, RESET, REDUCE, RESET_REDUCE = 0, 1, 2, 3

M32 = 0xFFFFFFFF


# ----- raw bits and fp32 operands ----------------------------------------------------------
@njit(cache=True, nogil=True)
def _count(irow, base):
    c = irow[base + O_COUNT:base + O_COUNT + 5]
    return c[0] * c[1] * c[2] * c[3] * c[4]


@njit(cache=True, nogil=True)
def _bits(H, S, PS, irow, base, L, P):
    """An operand's raw bit patterns as a (P, elements/P) int64 array (unsigned)."""
    return load_bits(H, S, PS, irow, base, L, P, _count(irow, base) // P)


@njit(cache=True, nogil=True)
def _f32(H, S, PS, irow, base, L, P):
    """An operand decoded to fp32, as (P, elements/P)."""
    x = load_f32(H, S, PS, irow, base, L)
    return x.reshape(P, x.size // P)


@njit(cache=True, nogil=True)
def _absent(irow, base):
    return base < 0 or irow[base + O_SPACE] < 0


@njit(cache=True, nogil=True)
def _side_f32(H, S, PS, irow, L, base, imm, P, N):
    """A select input as (P, N) fp32: an operand (a [P, 1] one broadcast) or an immediate."""
    if _absent(irow, base):
        return np.full((P, N), np.float32(imm), np.float32)
    x = _f32(H, S, PS, irow, base, L, P)
    if x.shape[1] == N:
        return x
    return x * np.ones((P, N), np.float32)   # x * 1 is exact, -0.0 and NaN included


@njit(cache=True, nogil=True)
def _side_bits(H, S, PS, irow, L, base, P, N):
    """A select input's raw bits as (P, N) (zeros for an immediate; see _select_exact)."""
    if _absent(irow, base):
        return np.zeros((P, N), np.int64)
    x = _bits(H, S, PS, irow, base, L, P)
    if x.shape[1] == N:
        return x
    return x + np.zeros((P, N), np.int64)


@njit(cache=True, nogil=True)
def _fill(H, S, PS, irow, L, base, imm, P, N):
    """Write an immediate to every element: integral values exactly into int operands
    (saturating), otherwise rounded to fp32 then to the operand's dtype."""
    code = irow[base + O_DTYPE]
    if is_int_code(code) and np.floor(imm) == imm and abs(imm) < 2.0 ** 62:
        lo, hi = int_range(code)
        v = min(max(np.int64(imm), lo), hi)
        store_i64(H, S, PS, irow, base, L, np.full((P, N), v, np.int64))
    else:
        store_f32(H, S, PS, irow, base, L, np.full((P, N), np.float32(imm), np.float32))


@njit(cache=True, nogil=True)
def _select_exact(H, S, PS, irow, L, mask, tb, fb, t_imm, f_imm, P, N):
    """dst (operand 0) = where(mask, T, F) on raw bits. Operands are read first (dst may alias
    any of them); immediates are then encoded by writing them through dst and reading back."""
    a = _side_bits(H, S, PS, irow, L, tb, P, N)
    b = _side_bits(H, S, PS, irow, L, fb, P, N)
    if _absent(irow, tb):
        _fill(H, S, PS, irow, L, OP0, t_imm, P, N)
        a = _bits(H, S, PS, irow, OP0, L, P)
    if _absent(irow, fb):
        _fill(H, S, PS, irow, L, OP0, f_imm, P, N)
        b = _bits(H, S, PS, irow, OP0, L, P)
    store_bits(H, S, PS, irow, OP0, L, np.where(mask, a, b))


@njit(cache=True, nogil=True)
def _select_f32(H, S, PS, irow, L, mask, tb, fb, t_imm, f_imm, P, N):
    """dst (operand 0) = where(mask, T, F) in fp32; returns the fp32 result."""
    y = np.where(mask, _side_f32(H, S, PS, irow, L, tb, t_imm, P, N),
                 _side_f32(H, S, PS, irow, L, fb, f_imm, P, N))
    store_f32(H, S, PS, irow, OP0, L, y)
    return y


@njit(cache=True, nogil=True)
def _predicate(H, S, PS, irow, L, base, P, reverse):
    m = _f32(H, S, PS, irow, base, L, P) != np.float32(0.0)
    if reverse == 1:
        return np.logical_not(m)
    return m


# ----- VectorE accumulators ----------------------------------------------------------------
@njit(cache=True, nogil=True)
def _vector_acc(PS):
    f = PS.view(np.float32)
    start = f.size - VECTOR_ACC_FROM_END
    return f[start:start + 128]


@njit(cache=True, nogil=True)
def _rowmax(y):
    """Max of each row (pairwise halving: log2(N) array operations)."""
    r = y.copy()
    n = r.shape[1]
    while n > 1:
        h = n // 2
        r[:, :h] = np.maximum(r[:, :h], r[:, n - h:n])
        n -= h
    return r[:, 0].copy()


@njit(cache=True, nogil=True)
def _reduce_max(H, S, PS, irow, frow, L, y, cmd, res, idle_clobbers):
    """Max-reduce y's rows into the accumulators per reduce_cmd; read out into operand res.
    With ``idle`` the accumulators are untouched and res gets this call's row maxima; where
    AWS documents that ``idle`` may still modify them (``idle_clobbers``: select_reduce),
    their lanes count as never written afterwards. Lane i is the access's partition i."""
    P = y.shape[0]
    lane0 = 0
    if cmd == IDLE:
        if idle_clobbers:
            acc_state.mark_undefined(PS, acc_state.VECTOR, lane0, P)
        if _absent(irow, res):
            return
    row = _rowmax(y)
    accs = _vector_acc(PS)[lane0:lane0 + P]
    if cmd == REDUCE:
        acc_state.check_lanes(PS, frow, acc_state.VECTOR, lane0, P)
    if cmd != IDLE:
        acc_state.mark_written(PS, acc_state.VECTOR, lane0, P)
    if cmd == RESET or cmd == RESET_REDUCE:
        accs[:] = np.float32(-np.inf)
    if cmd == REDUCE or cmd == RESET_REDUCE:
        accs[:] = np.maximum(accs, row)
    if not _absent(irow, res):
        out = row if cmd == IDLE else accs.copy()
        store_f32(H, S, PS, irow, res, L, out)


# ----- affine patterns ---------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _affine(irow, P):
    """(P, N) int32 values offset + p*cm + Σ step_k*idx_k (ints 3..12: offset, cm, 4 steps,
    4 counts, outermost first), wrapped like int32 arithmetic."""
    n = irow[9] * irow[10] * irow[11] * irow[12]
    j = np.arange(n)
    v = np.zeros(n, np.int64)
    inner = n
    for k in range(4):
        num = irow[9 + k]
        inner = inner // num
        v = v + irow[5 + k] * ((j // inner) % num)
    out = np.arange(P).reshape(P, 1) * irow[4] + irow[3] + v.reshape(1, n)
    return ((out + 2147483648) & M32) - 2147483648


@helper
@njit(cache=True, nogil=True)
def iota(H, S, PS, irow, frow, L):
    """dst = affine pattern (int32), cast to dst (ints saturate).
    ints: P, offset, channel_multiplier, steps[4], counts[4]."""
    v = _affine(irow, irow[2])
    code = irow[OP0 + O_DTYPE]
    if is_int_code(code):
        lo, hi = int_range(code)
        v = np.minimum(np.maximum(v, lo), hi)
    store_i64(H, S, PS, irow, OP0, L, v)
    return 0


@helper
@njit(cache=True, nogil=True)
def affine_select(H, S, PS, irow, frow, L):
    """dst = on_true where cmp(affine, 0) else on_false_value.
    ints: P, offset, cm, steps[4], counts[4], cmp_op, exact; floats: on_false_value."""
    P = irow[2]
    v = _affine(irow, P)
    mask = alu.binary_f32(irow[13], v.astype(np.float32), np.zeros((1, 1), np.float32)) != 0
    if irow[14] == 1:
        _select_exact(H, S, PS, irow, L, mask, OP1, NONE, 0.0, frow[0], P, v.shape[1])
    else:
        _select_f32(H, S, PS, irow, L, mask, OP1, NONE, 0.0, frow[0], P, v.shape[1])
    return 0


@helper
@njit(cache=True, nogil=True)
def range_select(H, S, PS, irow, frow, L):
    """dst = on_true where cmp0(i+start, bound0) & cmp1(i+start, bound1) else fill; max-reduce.
    ints: P, N, cmp0, cmp1, range_start, reduce_cmd; floats: fill.
    operands: dst, on_true, bound0, bound1, reduce_res."""
    P, N = irow[2], irow[3]
    idx = (np.arange(N) + irow[6]).astype(np.float32).reshape(1, N)
    m0 = alu.binary_f32(irow[4], idx, _f32(H, S, PS, irow, OP2, L, P)) != 0
    m1 = alu.binary_f32(irow[5], idx, _f32(H, S, PS, irow, OP3, L, P)) != 0
    y = _select_f32(H, S, PS, irow, L, m0 & m1, OP1, NONE, 0.0, frow[0], P, N)
    _reduce_max(H, S, PS, irow, frow, L, y, irow[7], OP4, False)
    return 0


@helper
@njit(cache=True, nogil=True)
def select_reduce(H, S, PS, irow, frow, L):
    """dst = where(pred, on_true, on_false) in fp32; max-reduce.
    ints: P, N, reverse_pred, reduce_cmd; floats: on_false value.
    operands: dst, predicate, on_true, on_false, reduce_res."""
    P, N = irow[2], irow[3]
    mask = _predicate(H, S, PS, irow, L, OP1, P, irow[4])
    y = _select_f32(H, S, PS, irow, L, mask, OP2, OP3, 0.0, frow[0], P, N)
    _reduce_max(H, S, PS, irow, frow, L, y, irow[5], OP4, True)
    return 0


@helper
@njit(cache=True, nogil=True)
def tensor_copy_predicated(H, S, PS, irow, frow, L):
    """dst = where(pred, src, on_false) (copy_predicated: on_false is dst itself).
    ints: P, N, reverse_pred, exact; floats: src value, on_false value.
    operands: dst, src, predicate, on_false."""
    P, N = irow[2], irow[3]
    mask = _predicate(H, S, PS, irow, L, OP2, P, irow[4])
    if irow[5] == 1:
        _select_exact(H, S, PS, irow, L, mask, OP1, OP3, frow[0], frow[1], P, N)
    else:
        _select_f32(H, S, PS, irow, L, mask, OP1, OP3, frow[0], frow[1], P, N)
    return 0


@njit(cache=True, nogil=True)
def _direct_stt(H, S, PS, irow, frow, L, P):
    """scalar_tensor_tensor straight in the arenas: fp32 or bf16 rows of one shape, operand0
    a [P, 1] column or an immediate, arithmetic operators; the data the destination or apart
    from it; operand1 apart from an fp32 destination (it is read after that is written).
    bf16 rows are decoded into fp32 rows and a bf16 destination is computed in an fp32 row
    and rounded once per element, as the gathered path does: the same bits (bf16 [128,
    1024] (x * c) * u: ~300 us gathered). False (nothing written) otherwise."""
    op0, op1 = irow[3], irow[4]
    if not (alu.ADD <= op0 <= alu.MIN and alu.ADD <= op1 <= alu.MIN):
        return False
    d32, dm, dh, do, ds, dr, dn = float_rows(H, S, PS, irow, OP0, L)
    x32, xm, xh, xo, xs, xr, xn = float_rows(H, S, PS, irow, OP1, L)
    u32, um, uh, uo, us, ur, un = float_rows(H, S, PS, irow, OP3, L)
    if dn < DIRECT_ROW_MIN or dr == 0 or xr != dr or ur != dr or xn != dn or un != dn or \
            not rows_same_or_apart(irow, OP1, x32, xo, xs, OP0, d32, do, ds, dr, dn) or \
            not rows_same_or_apart(irow, OP3, u32, uo, us, OP0, d32, do, ds, dr, dn):
        return False
    x_here = d32 and x32 and same_rows(irow, OP0, do, ds, OP1, xo, xs)
    if d32 and u32 and same_rows(irow, OP0, do, ds, OP3, uo, us):
        return False          # an fp32 dst is written in place before operand1 is read
    if _absent(irow, OP2):
        c = np.full((1, 1), np.float32(frow[0]), np.float32)
    else:
        c = _f32(H, S, PS, irow, OP2, L, P)   # read before anything is written
        if c.shape[1] != 1:
            return False
    _stt_rows(irow, (dm, dh, do, ds, d32), (xm, xh, xo, xs, x32), (um, uh, uo, us, u32),
              c, dr, dn, x_here)
    return True


@njit(cache=True, nogil=True)
def _stt_rows(irow, dst, data, other, c, rows, n, x_here):
    """The row loop of :func:`_direct_stt`; ``dst``/``data``/``other`` are (fp32 arena,
    bf16 arena, element offset, row stride, is fp32) of its three row operands."""
    op0, op1, rev0, rev1 = irow[3], irow[4], irow[5], irow[6]
    dm, dh, do, ds, d32 = dst
    xm, xh, xo, xs, x32 = data
    um, uh, uo, us, u32 = other
    one_pass = not x_here and rev0 == 0 and rev1 == 0 and op0 <= alu.MUL and op1 <= alu.MUL
    tx = np.empty(0 if x32 else n, np.float32)
    tu = np.empty(0 if u32 else n, np.float32)
    td = np.empty(0 if d32 else n, np.float32)
    for r in range(rows):
        x = float_row(xm, xh, x32, xo + r * xs, n, tx)
        u = float_row(um, uh, u32, uo + r * us, n, tu)
        d0 = do + r * ds
        d = dm[d0:d0 + n] if d32 else td    # a bf16 dst row is written after both reads
        cr = c[r if c.shape[0] > 1 else 0, 0]
        if one_pass:
            _stt_row(op0, op1, d, x, cr, u)
        else:
            if not x_here:
                copy_row(d, x)
            alu.col_into(op0, d, cr, rev0 == 1)
            alu.row_into(op1, d, u, rev1 == 1)
        if not d32:
            nm.f32_to_bf16_into(td, dh[d0:d0 + n])


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _stt_row(op0, op1, d, x, c, u):
    """``d = (x op0 c) op1 u`` in one pass over three distinct rows, for ``op0`` and ``op1``
    among add, subtract, multiply (not reversed): the two fp32 roundings of the copy and two
    in-place passes it replaces (no fastmath, so no FMA). One loop per operator pair: a loop
    that branches on the operators inside does not vectorise (5x slower than the 3 passes);
    this one is 30% faster than them (16 rows x 1024: 4.8 -> 3.4 us)."""
    n = d.size
    if op0 == alu.ADD and op1 == alu.ADD:
        for i in range(n):
            d[i] = (x[i] + c) + u[i]
    elif op0 == alu.ADD and op1 == alu.SUB:
        for i in range(n):
            d[i] = (x[i] + c) - u[i]
    elif op0 == alu.ADD:
        for i in range(n):
            d[i] = (x[i] + c) * u[i]
    elif op0 == alu.SUB and op1 == alu.ADD:
        for i in range(n):
            d[i] = (x[i] - c) + u[i]
    elif op0 == alu.SUB and op1 == alu.SUB:
        for i in range(n):
            d[i] = (x[i] - c) - u[i]
    elif op0 == alu.SUB:
        for i in range(n):
            d[i] = (x[i] - c) * u[i]
    elif op1 == alu.ADD:
        for i in range(n):
            d[i] = (x[i] * c) + u[i]
    elif op1 == alu.SUB:
        for i in range(n):
            d[i] = (x[i] * c) - u[i]
    else:
        for i in range(n):
            d[i] = (x[i] * c) * u[i]


@helper(row_wise=True)
@njit(cache=True, nogil=True)
def scalar_tensor_tensor(H, S, PS, irow, frow, L):
    """dst = (data op0 operand0) op1 operand1 in fp32.
    ints: P, op0, op1, reverse0, reverse1; floats: operand0 value.
    operands: dst, data, operand0, operand1."""
    P = irow[OP0 + O_PARTS]   # not irow[2]: row-wise chunks narrow the operands
    if _direct_stt(H, S, PS, irow, frow, L, P):
        return 0
    x = _f32(H, S, PS, irow, OP1, L, P)
    if _absent(irow, OP2):
        s = np.full((1, 1), np.float32(frow[0]), np.float32)
    else:
        s = _f32(H, S, PS, irow, OP2, L, P)
    if s.shape[1] == 1:     # the usual [P, 1] operand: the column fast path
        t = alu.binary_col_f32(irow[3], x, s, irow[5] == 1)
    else:
        t = alu.binary_f32(irow[3], s, x) if irow[5] == 1 else alu.binary_f32(irow[3], x, s)
    u = _f32(H, S, PS, irow, OP3, L, P)
    r = alu.binary_f32(irow[4], u, t) if irow[6] == 1 else alu.binary_f32(irow[4], t, u)
    store_f32(H, S, PS, irow, OP0, L, r)
    return 0


# ----- shuffle and top-8 -------------------------------------------------------------------
@helper
@njit(cache=True, nogil=True)
def nc_stream_shuffle(H, S, PS, irow, frow, L):
    """dst[q*32+i] = src[q*32+mask[i]] (255 keeps dst), raw bits.
    ints: dst partitions, src partitions, mask packed 4 entries per int (8 ints)."""
    Pd, Ps = irow[2], irow[3]
    src = _bits(H, S, PS, irow, OP1, L, Ps)
    out = _bits(H, S, PS, irow, OP0, L, Pd)
    for d in range(Pd):
        i = d % 32
        m = (irow[4 + i // 4] >> (8 * (i % 4))) & 255
        if m != 255:
            out[d, :] = src[(d // 32) * 32 + m, :]
    store_bits(H, S, PS, irow, OP0, L, out)
    return 0


@njit(cache=True, nogil=True)
def _order_key(b):
    """fp32 bit patterns (sign-extended int64) ↔ keys whose integer order is fp32's order
    (-0 below +0; NaNs beyond ±inf by sign). The map is its own inverse."""
    return b ^ ((b >> 31) & 0x7FFFFFFF)


@helper
@njit(cache=True, nogil=True)
def max8(H, S, PS, irow, frow, L):
    """dst[p] = the 8 largest fp32 values of src[p], descending. ints: P."""
    P = irow[2]
    x = np.ascontiguousarray(_f32(H, S, PS, irow, OP1, L, P))
    key = _order_key(x.view(np.int32).astype(np.int64))
    n = key.shape[1]
    top = np.empty((P, 8), np.int64)
    for p in range(P):
        top[p, :] = np.sort(key[p])[n - 8:][::-1]
    store_f32(H, S, PS, irow, OP0, L, _order_key(top).astype(np.int32).view(np.float32))
    return 0


@njit(cache=True, nogil=True)
def _find8(data, vals, reverse):
    """(P, 8) index of the first not-yet-matched occurrence of each value (-1: none). The
    values are taken in order 0..7, or 7..0 with ``reverse`` (nc_match_replace8 on hardware:
    of repeated values, the last slot gets the first occurrence)."""
    P, N = data.shape
    out = np.full((P, 8), -1, np.int64)
    for p in range(P):
        used = np.zeros(N, np.bool_)
        for j in range(8):
            k = 7 - j if reverse else j
            hits = np.flatnonzero((data[p] == vals[p, k]) & np.logical_not(used))
            if hits.size > 0:
                out[p, k] = hits[0]
                used[hits[0]] = True
    return out


@helper
@njit(cache=True, nogil=True)
def nc_find_index8(H, S, PS, irow, frow, L):
    """dst = indices of vals in data (all ones if absent). ints: P."""
    P = irow[2]
    idx = _find8(_f32(H, S, PS, irow, OP1, L, P), _f32(H, S, PS, irow, OP2, L, P), False)
    store_i64(H, S, PS, irow, OP0, L, idx)   # -1 wraps to all ones
    return 0


@helper
@njit(cache=True, nogil=True)
def nc_match_replace8(H, S, PS, irow, frow, L):
    """dst = data with matched vals replaced by imm; dst_idx = their indices (vals taken
    7..0, AWS's documented tie-break). ints: P; floats: imm. operands: dst, data, vals,
    dst_idx."""
    P = irow[2]
    x = _f32(H, S, PS, irow, OP1, L, P)
    idx = _find8(x, _f32(H, S, PS, irow, OP2, L, P), True)
    y = x.copy()
    for p in range(P):
        for k in range(8):
            if idx[p, k] >= 0:
                y[p, idx[p, k]] = np.float32(frow[0])
    store_f32(H, S, PS, irow, OP0, L, y)
    if not _absent(irow, OP3):
        store_i64(H, S, PS, irow, OP3, L, idx)
    return 0


# ----- references (plain numpy, independent of the helpers) --------------------------------
def reference_affine(partitions, pattern, offset=0, channel_multiplier=0):
    """int64 (P, N) values of an iota / affine_select pattern (int32 wrap-around)."""
    steps = np.array([s for s, _ in pattern], np.int64)
    grid = np.indices([n for _, n in pattern]).reshape(len(pattern), -1)
    v = offset + steps @ grid
    v = v[None, :] + channel_multiplier * np.arange(partitions, dtype=np.int64)[:, None]
    return (v + 2**31) % 2**32 - 2**31


def reference_select(mask, on_true, on_false):
    """np.where in fp32 (on_false a number or a [P, 1] column)."""
    return np.where(mask, np.asarray(on_true, np.float32), np.asarray(on_false, np.float32))


def reference_range_select(on_true, cmp0, cmp1, bound0, bound1, range_start=0):
    """(selected fp32 tile, row max) with fp32-min fill."""
    x = np.asarray(on_true, np.float32)
    idx = (range_start + np.arange(x.shape[1])).astype(np.float32)[None, :]
    mask = cmp0(idx, np.asarray(bound0, np.float32)) & cmp1(idx, np.asarray(bound1, np.float32))
    y = np.where(mask, x, np.finfo(np.float32).min)
    return y, y.max(axis=1, keepdims=True)


def reference_stt(data, op0, operand0, op1, operand1, reverse0=False, reverse1=False):
    """(data op0 operand0) op1 operand1 with numpy ufuncs in fp32."""
    x, s, u = (np.asarray(a, np.float32) for a in (data, operand0, operand1))
    t = op0(s, x) if reverse0 else op0(x, s)
    return (op1(u, t) if reverse1 else op1(t, u)).astype(np.float32)


def reference_shuffle(dst, src, mask):
    """Per 32-partition quadrant, dst[i] = src[mask[i]] (255 keeps dst)."""
    out = np.array(dst, copy=True)
    for d in range(out.shape[0]):
        if mask[d % 32] != 255:
            out[d] = src[(d // 32) * 32 + mask[d % 32]]
    return out


def reference_max8(x):
    return -np.sort(-np.asarray(x, np.float32).reshape(len(x), -1), axis=1)[:, :8]


def reference_find_index8(data, vals, reverse=False):
    """Successive first occurrences; -1 when not found. ``reverse`` matches the values from
    the last slot to the first (nc_match_replace8's order)."""
    data = np.asarray(data, np.float32).reshape(len(data), -1)
    vals = np.asarray(vals, np.float32).reshape(len(vals), -1)
    out = np.full(vals.shape, -1, np.int64)
    order = range(vals.shape[1] - 1, -1, -1) if reverse else range(vals.shape[1])
    for p in range(len(data)):
        taken: set[int] = set()
        for k in order:
            j = next((j for j, e in enumerate(data[p]) if e == vals[p, k] and j not in taken),
                     -1)
            out[p, k] = j
            taken.add(j)
    return out


def reference_match_replace8(data, vals, imm):
    """(replaced fp32 data, indices), the values matched from the last slot to the first."""
    y = np.asarray(data, np.float32).reshape(len(data), -1).copy()
    idx = reference_find_index8(data, vals, reverse=True)
    for p, k in zip(*np.nonzero(idx >= 0)):
        y[p, idx[p, k]] = np.float32(imm)
    return y, idx


# ----- encoders ----------------------------------------------------------------------------
def _pn(ins, role: str) -> tuple[int, int]:
    """(partitions, elements per partition) of a placed on-chip operand."""
    dims = ins.operand(role).dims
    n = 1
    for _, c in dims[1:]:
        n *= c
    return dims[0][1], n


def _pattern_ints(ins) -> list[int]:
    pat = ins.attr("pattern")
    return ([ins.attr("offset"), ins.attr("channel_multiplier")] + [s for s, _ in pat]
            + [n for _, n in pat])


@emitter(Opcode.IOTA, iota, reference_affine)
def encode_iota(ins, w, ops):
    w.ints(_pn(ins, "dst")[0], *_pattern_ints(ins)).operand(ops["dst"])


@emitter(Opcode.AFFINE_SELECT, affine_select, reference_select)
def encode_affine_select(ins, w, ops):
    exact = int(ops["dst"].code == ops["on_true"].code)
    w.ints(_pn(ins, "dst")[0], *_pattern_ints(ins), int(ins.attr("cmp_op")), exact)
    w.floats(ins.attr("on_false_value"))
    w.operand(ops["dst"]).operand(ops["on_true"])


@emitter(Opcode.RANGE_SELECT, range_select, reference_range_select)
def encode_range_select(ins, w, ops):
    w.ints(*_pn(ins, "dst"), int(ins.attr("comp_op0")), int(ins.attr("comp_op1")),
           ins.attr("range_start"), int(ins.attr("reduce_cmd")))
    w.floats(ins.attr("on_false_value"))
    for role in ("dst", "on_true", "bound0", "bound1", "reduce_res"):
        w.operand(ops.get(role))
    w.site()


@emitter(Opcode.SELECT_REDUCE, select_reduce, reference_select)
def encode_select_reduce(ins, w, ops):
    w.ints(*_pn(ins, "dst"), int(ins.attr("reverse_pred")), int(ins.attr("reduce_cmd")))
    w.floats(imm(ins.attr("on_false_value")))
    for role in ("dst", "predicate", "on_true", "on_false", "reduce_res"):
        w.operand(ops.get(role))
    w.site()


@emitter(Opcode.TENSOR_COPY_PREDICATED, tensor_copy_predicated, reference_select)
def encode_tensor_copy_predicated(ins, w, ops):
    code = ops["dst"].code
    exact = all(ops[r].code == code for r in ("src", "on_false") if r in ops)
    w.ints(*_pn(ins, "dst"), int(ins.attr("reverse_pred")), int(exact))
    w.floats(imm(ins.attr("src_value")), imm(ins.attr("on_false_value")))
    for role in ("dst", "src", "predicate", "on_false"):
        w.operand(ops.get(role))


@emitter(Opcode.SCALAR_TENSOR_TENSOR, scalar_tensor_tensor, reference_stt)
def encode_scalar_tensor_tensor(ins, w, ops):
    w.ints(_pn(ins, "dst")[0], int(ins.attr("op0")), int(ins.attr("op1")),
           int(ins.attr("reverse0")), int(ins.attr("reverse1")))
    w.floats(imm(ins.attr("operand0_value")))
    for role in ("dst", "data", "operand0", "operand1"):
        w.operand(ops.get(role))


@emitter(Opcode.NC_STREAM_SHUFFLE, nc_stream_shuffle, reference_shuffle)
def encode_nc_stream_shuffle(ins, w, ops):
    mask = ins.attr("shuffle_mask")
    words = [sum(mask[4 * k + b] << (8 * b) for b in range(4)) for k in range(8)]
    w.ints(_pn(ins, "dst")[0], _pn(ins, "src")[0], *words)
    w.operand(ops["dst"]).operand(ops["src"])


@emitter(Opcode.MAX8, max8, reference_max8)
def encode_max8(ins, w, ops):
    w.ints(_pn(ins, "dst")[0]).operand(ops["dst"]).operand(ops["src"])


@emitter(Opcode.NC_FIND_INDEX8, nc_find_index8, reference_find_index8)
def encode_nc_find_index8(ins, w, ops):
    w.ints(_pn(ins, "dst")[0]).operand(ops["dst"]).operand(ops["data"]).operand(ops["vals"])


@emitter(Opcode.NC_MATCH_REPLACE8, nc_match_replace8, reference_match_replace8)
def encode_nc_match_replace8(ins, w, ops):
    w.ints(_pn(ins, "dst")[0]).floats(ins.attr("imm"))
    for role in ("dst", "data", "vals", "dst_idx"):
        w.operand(ops.get(role))
