"""Reading and writing operands in the simulated memories, for every helper.

Each helper receives the three arenas (HBM, SBUF, PSUM; flat uint8), its instruction's int
and float rows, and the loop-variable vector ``L``. ``load_f32`` gathers an operand into a
contiguous ``(P, N)`` float32 array (decoding bf16/fp8/fp16/ints), ``store_f32`` rounds and
scatters one back. Engines compute in fp32, so almost every helper is
load → arithmetic on (P, N) float32 → store.

Everything here is valid both under Numba and as plain Python on numpy arrays, so the python
backend runs the very same arithmetic.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from nki.sim import numerics as nm
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
)

# elements per row-wise chunk: 16 Ki fp32 = 64 KiB per temporary, cache-resident
CHUNK_ELEMS = 16384

# dtype codes (nki.ir.types); repeated as literals so numba sees compile-time constants
F32, BF16, F16, TF32, E4M3, E5M2, E4M3FN = 0, 1, 2, 3, 4, 5, 6
I8, I16, I32, U8, U16, U32, BOOL, E8M0 = 7, 8, 9, 10, 11, 12, 13, 14


@njit(cache=True, nogil=True)
def is_int_code(code):
    return code >= I8 and code <= BOOL


@njit(cache=True, nogil=True)
def arena(H, S, PS, space):
    """The flat byte arena of a space."""
    if space == 0:
        return H
    if space == 1:
        return S
    return PS


@njit(cache=True, nogil=True)
def element_offset(irow, base, L):
    """Constant + loop-dependent part of an operand's element offset."""
    off = irow[base + O_OFF]
    for k in range(NSLOTS):
        c = irow[base + O_COEF + k]
        if c != 0:
            off += c * L[k]
    return off


@njit(cache=True, nogil=True)
def shape_of(irow, base):
    """(partitions, elements per partition) of an operand."""
    c = irow[base + O_COUNT:base + O_COUNT + 5]
    n = c[0] * c[1] * c[2] * c[3] * c[4]
    p = irow[base + O_PARTS]
    return p, n // p


@njit(cache=True, nogil=True)
def _rows_layout(irow, base):
    """(rows, row stride, row length) when the operand is rows of contiguous elements (the
    common case: a partition range × a contiguous free range), else (0, 0, 0)."""
    c = irow[base + O_COUNT:base + O_COUNT + 5]
    s = irow[base + O_STRIDE:base + O_STRIDE + 5]
    n = 1
    for k in range(4, 0, -1):
        if c[k] != 1:
            if s[k] != n:
                return 0, 0, 0
            n *= c[k]
    return c[0], s[0], n


@njit(cache=True, nogil=True)
def chunk_rows(irow):
    """(P, rows per chunk) for running a row-wise helper a few partitions at a time, so its
    fp32 temporaries stay in cache; (P, 0) when some operand does not split by partitions.

    Every present operand must have dim 0 of the same count P (the partition dim)."""
    first = -1
    for k in range(MAX_OPERANDS):
        b = OPS + k * OPW
        if irow[b + O_SPACE] < 0 or irow[b + O_PARTS] == 0:
            continue
        p = irow[b + O_COUNT]
        if first < 0:
            first = p
        elif p != first:
            return first, 0
    if first <= 0:
        return 0, 0
    c = irow[OPS + O_COUNT:OPS + O_COUNT + 5]
    per_row = c[1] * c[2] * c[3] * c[4]
    rows = max(1, CHUNK_ELEMS // max(per_row, 1))
    return first, (rows if rows < first else 0)


@njit(cache=True, nogil=True)
def set_chunk(irow, sub, p0, rows):
    """``sub`` = ``irow`` restricted to partitions ``p0 .. p0+rows`` of every operand."""
    sub[:] = irow
    for k in range(MAX_OPERANDS):
        b = OPS + k * OPW
        if irow[b + O_SPACE] < 0 or irow[b + O_PARTS] == 0:
            continue
        sub[b + O_OFF] = irow[b + O_OFF] + p0 * irow[b + O_STRIDE]
        sub[b + O_COUNT] = rows
        sub[b + O_PARTS] = rows


@njit(cache=True, nogil=True)
def gather(typed, off, irow, base, P, N):
    """Contiguous (P, N) copy of an operand in its storage dtype."""
    rows, stride, n = _rows_layout(irow, base)
    if rows > 0 and n < SHORT_ROW:
        out = np.empty(rows * n, typed.dtype)
        _short_rows(typed, off, stride, out, rows, n, True)
        return out.reshape(P, N)
    if rows > 0:
        # per-row views indexed by range(): Numba then knows indices are non-negative and
        # vectorises the copy (14 µs for 512 KiB, vs 37-47 µs for slice assignment or the
        # 5-D strided view, which check for negative-index wraparound)
        out = np.empty((rows, n), typed.dtype)
        for r in range(rows):
            src = typed[off + r * stride:off + r * stride + n]
            dst = out[r]
            for i in range(n):
                dst[i] = src[i]
        return out.reshape(P, N)
    out = np.empty(P * N, typed.dtype)
    if _copy_runs(typed, off, irow, base, out, True):
        return out.reshape(P, N)
    if _gather_transposed(typed, off, irow, base, out):
        return out.reshape(P, N)
    _copy_elements(typed, off, irow, base, out, True)
    return out.reshape(P, N)


# Rows shorter than this are copied element by element, without per-row views: two views per
# row cost more than the copy itself ([128, 1] fp32 columns, cross-entropy's: ~25 ns each)
SHORT_ROW = 16


@njit(cache=True, nogil=True)
def _short_rows(typed, off, stride, flat, rows, n, reading):
    """Copy ``rows`` rows of ``n`` elements every ``stride`` from ``off`` to or from ``flat``
    (their contiguous form), indexing the arena directly."""
    for r in range(rows):
        o, f = off + r * stride, r * n
        for i in range(n):
            if reading:
                flat[f + i] = typed[o + i]
            else:
                typed[o + i] = flat[f + i]


@njit(cache=True, nogil=True)
def _copy_elements(typed, off, irow, base, flat, reading):
    """Element-by-element copy between any strided operand and ``flat`` (its contiguous
    form), the fallback of gather and scatter: five explicit loops compile to a fraction of
    the code of Numba's generic strided-array assignment."""
    c = irow[base + O_COUNT:base + O_COUNT + 5]
    s = irow[base + O_STRIDE:base + O_STRIDE + 5]
    pos = 0
    for i0 in range(c[0]):
        for i1 in range(c[1]):
            for i2 in range(c[2]):
                for i3 in range(c[3]):
                    o = off + i0 * s[0] + i1 * s[1] + i2 * s[2] + i3 * s[3]
                    for i4 in range(c[4]):
                        if reading:
                            flat[pos] = typed[o + i4 * s[4]]
                        else:
                            typed[o + i4 * s[4]] = flat[pos]
                        pos += 1


@njit(cache=True, nogil=True)
def _runs_layout(irow, base):
    """(run length, first dim of the run): the innermost dims merged while contiguous.

    A strided view whose inner dims are contiguous (``[128, KT, F]`` read out of a row-major
    HBM matrix, say) is a sequence of runs of that many elements; the dims before the run
    are walked one run at a time."""
    c = irow[base + O_COUNT:base + O_COUNT + 5]
    s = irow[base + O_STRIDE:base + O_STRIDE + 5]
    n, j = 1, 5
    for k in range(4, -1, -1):
        if c[k] != 1:
            if s[k] != n:
                break
            n *= c[k]
        j = k
    return n, j


@njit(cache=True, nogil=True)
def _copy_runs(typed, off, irow, base, flat, reading):
    """Copy an operand run by run between the arena and ``flat`` (its contiguous form):
    into ``flat`` when ``reading``, else out of it. False (nothing done) unless the operand
    has contiguous inner runs of at least 8 elements: element-wise strided copies are 3-5x
    slower than the vectorised run copies."""
    n, j = _runs_layout(irow, base)
    if n < 8 or j == 0:
        return False
    c = irow[base + O_COUNT:base + O_COUNT + 5]
    s = irow[base + O_STRIDE:base + O_STRIDE + 5]
    c1 = c[1] if j > 1 else 1
    c2 = c[2] if j > 2 else 1
    c3 = c[3] if j > 3 else 1
    pos = 0
    for i0 in range(c[0]):
        for i1 in range(c1):
            for i2 in range(c2):
                for i3 in range(c3):
                    o = off + i0 * s[0] + i1 * s[1] + i2 * s[2] + i3 * s[3]
                    mem = typed[o:o + n]
                    lin = flat[pos:pos + n]
                    if reading:
                        for i in range(n):
                            lin[i] = mem[i]
                    else:
                        for i in range(n):
                            mem[i] = lin[i]
                    pos += n
    return True


@njit(cache=True, nogil=True)
def _transpose_dims(c, s):
    """(a, b) for a transposing read: ``a`` the dim of smallest stride, ``b`` the innermost
    dim (count > 1 both), ``a != b``; else (-1, -1)."""
    a, b = -1, -1
    for k in range(5):
        if c[k] > 1:
            b = k
            if a < 0 or abs(s[k]) < abs(s[a]):
                a = k
    if a == b or abs(s[a]) >= abs(s[b]):
        return -1, -1
    return a, b


@njit(cache=True, nogil=True)
def _gather_transposed(typed, off, irow, base, out):
    """Blocked gather of a read whose innermost dim is not its smallest stride (the
    transposes: ``out[.., i, .., j] = src[i*1 + j*row]``): small tiles, so the source lines
    a tile reads stay in cache while the tile is written (an element-by-element strided copy
    misses on every read). False if not such a read."""
    c = irow[base + O_COUNT:base + O_COUNT + 5]
    s = irow[base + O_STRIDE:base + O_STRIDE + 5]
    a, b = _transpose_dims(c, s)
    if a < 0:
        return False
    os = np.ones(5, np.int64)   # strides of the contiguous output
    for k in range(3, -1, -1):
        os[k] = os[k + 1] * c[k + 1]
    rest = out.size // (c[a] * c[b])
    for t in range(rest):
        so, oo, r = off, 0, t
        for k in range(4, -1, -1):     # decompose t over the other dims
            if k != a and k != b:
                i = r % c[k]
                r //= c[k]
                so += i * s[k]
                oo += i * os[k]
        _tile_copy(typed, so, s[a], s[b], out, oo, os[a], os[b], c[a], c[b])
    return True


@njit(cache=True, nogil=True)
def _tile_copy(src, so, sa, sb, dst, oo, da, db, na, nb):
    """``dst[oo + i*da + j*db] = src[so + i*sa + j*sb]`` for i < na, j < nb, writing along j
    (the output's innermost dim) in bands of 128 j: a band reads 128 source lines, which stay
    in L1 while every i walks along them. Writing along i instead, every store landed 4 KiB
    apart, in one L1 set, and the copy ran 3x slower; 16x16 tiles ran 2x slower than bands
    (loop overhead; measured on 128x128 fp32 transposes)."""
    for j0 in range(0, nb, 128):
        j1 = min(j0 + 128, nb)
        for i in range(na):
            si, di = so + i * sa, oo + i * da
            if db == 1:     # the usual case, spelled out so the stores vectorise (1.5x)
                d = dst[di + j0:di + j1]
                for j in range(j1 - j0):
                    d[j] = src[si + (j0 + j) * sb]
            else:
                for j in range(j0, j1):
                    dst[di + j * db] = src[si + j * sb]


@njit(cache=True, nogil=True)
def scatter(typed, off, irow, base, values):
    """Write a contiguous array (any shape with the operand's element count) to an operand."""
    rows, stride, n = _rows_layout(irow, base)
    if rows > 0 and n < SHORT_ROW:
        _short_rows(typed, off, stride, values.ravel(), rows, n, False)
        return
    if rows > 0:
        flat = values.ravel()
        for r in range(rows):
            dst = typed[off + r * stride:off + r * stride + n]
            src = flat[r * n:(r + 1) * n]
            for i in range(n):
                dst[i] = src[i]
        return
    flat = values.ravel()
    if not _copy_runs(typed, off, irow, base, flat, False):
        _copy_elements(typed, off, irow, base, flat, False)


@njit(cache=True, nogil=True)
def _load_float(mem, code, off, irow, base, P, N):
    """Gather a float operand (any float code) as fp32."""
    if code == BF16:
        return nm.bf16_to_f32(gather(mem.view(np.uint16), off, irow, base, P, N).ravel()
                              ).reshape(P, N)
    if code == F16:
        return nm.f16_to_f32(gather(mem.view(np.uint16), off, irow, base, P, N).ravel()
                             ).reshape(P, N)
    if code == E4M3 or code == E5M2 or code == E4M3FN or code == E8M0:
        return nm.fp8_to_f32(gather(mem, off, irow, base, P, N).ravel(), code).reshape(P, N)
    return gather(mem.view(np.uint32), off, irow, base, P, N).view(np.float32)


@njit(cache=True, nogil=True)
def _load_int(mem, code, off, irow, base, P, N):
    """Gather an integer operand exactly as int64 (gathered as unsigned words of its width,
    then reinterpreted: gather and scatter exist once per width, not once per dtype)."""
    if code == I8:
        return gather(mem, off, irow, base, P, N).view(np.int8).astype(np.int64)
    if code == I16:
        return gather(mem.view(np.uint16), off, irow, base, P, N).view(np.int16).astype(np.int64)
    if code == I32:
        return gather(mem.view(np.uint32), off, irow, base, P, N).view(np.int32).astype(np.int64)
    if code == U16:
        return gather(mem.view(np.uint16), off, irow, base, P, N).astype(np.int64)
    if code == U32:
        return gather(mem.view(np.uint32), off, irow, base, P, N).astype(np.int64)
    return gather(mem, off, irow, base, P, N).astype(np.int64)


@njit(cache=True, nogil=True)
def load_f32(H, S, PS, irow, base, L):
    """Gather operand ``base`` and decode it to a (P, N) float32 array."""
    mem = arena(H, S, PS, irow[base + O_SPACE])
    code = irow[base + O_DTYPE]
    off = element_offset(irow, base, L)
    P, N = shape_of(irow, base)
    if is_int_code(code):
        return _load_int(mem, code, off, irow, base, P, N).astype(np.float32)
    return _load_float(mem, code, off, irow, base, P, N)


@njit(cache=True, nogil=True)
def load_i64(H, S, PS, irow, base, L):
    """Gather an operand as int64 (ints exactly; floats truncated toward zero)."""
    mem = arena(H, S, PS, irow[base + O_SPACE])
    code = irow[base + O_DTYPE]
    off = element_offset(irow, base, L)
    P, N = shape_of(irow, base)
    if is_int_code(code):
        return _load_int(mem, code, off, irow, base, P, N)
    return _load_float(mem, code, off, irow, base, P, N).astype(np.int64)


@njit(cache=True, nogil=True)
def int_range(code):
    """(lo, hi) of an integer dtype code."""
    if code == I8:
        return -128, 127
    if code == I16:
        return -32768, 32767
    if code == I32:
        return -2147483648, 2147483647
    if code == U8 or code == BOOL:
        return 0, 255
    if code == U16:
        return 0, 65535
    return 0, 4294967295


@njit(cache=True, nogil=True)
def _store_float(mem, code, off, irow, base, flat):
    """Round fp32 values to a float operand's format and scatter them."""
    if code == TF32:
        scatter(mem.view(np.uint32), off, irow, base, nm.f32_to_tf32(flat).view(np.uint32))
    elif code == BF16:
        scatter(mem.view(np.uint16), off, irow, base, nm.f32_to_bf16(flat))
    elif code == F16:
        scatter(mem.view(np.uint16), off, irow, base, nm.f32_to_f16(flat))
    elif code == E4M3 or code == E5M2 or code == E4M3FN or code == E8M0:
        scatter(mem, off, irow, base, nm.f32_to_fp8(flat, code))
    else:
        scatter(mem.view(np.uint32), off, irow, base, flat.view(np.uint32))


@njit(cache=True, nogil=True)
def _store_int(mem, code, off, irow, base, flat):
    """Scatter int64 values to an integer operand, wrapping to its width."""
    # astype to the unsigned type of the width wraps exactly as the signed one would
    if code == I16 or code == U16:
        scatter(mem.view(np.uint16), off, irow, base, flat.astype(np.uint16))
    elif code == I32 or code == U32:
        scatter(mem.view(np.uint32), off, irow, base, flat.astype(np.uint32))
    else:
        scatter(mem, off, irow, base, flat.astype(np.uint8))


@njit(cache=True, nogil=True)
def store_f32(H, S, PS, irow, base, L, values):
    """Round fp32 ``values`` to the operand's dtype (RNE; ints saturate) and scatter."""
    mem = arena(H, S, PS, irow[base + O_SPACE])
    code = irow[base + O_DTYPE]
    off = element_offset(irow, base, L)
    flat = np.ascontiguousarray(values).ravel()
    if is_int_code(code):
        lo, hi = int_range(code)
        _store_int(mem, code, off, irow, base, nm.f32_to_int(flat, lo, hi))
    else:
        _store_float(mem, code, off, irow, base, flat)


@njit(cache=True, nogil=True)
def store_i64(H, S, PS, irow, base, L, values):
    """Scatter int64 ``values``: integer operands wrap to their width (bit operations),
    float operands receive the values rounded to fp32 then to their format."""
    mem = arena(H, S, PS, irow[base + O_SPACE])
    code = irow[base + O_DTYPE]
    off = element_offset(irow, base, L)
    flat = np.ascontiguousarray(values).ravel()
    if is_int_code(code):
        _store_int(mem, code, off, irow, base, flat)
    else:
        _store_float(mem, code, off, irow, base, flat.astype(np.float32))


@njit(cache=True, nogil=True)
def copy_raw(H, S, PS, irow, dst, src, L):
    """Bit-exact copy between operands of the same dtype width (DMA, same-dtype copies)."""
    dmem = arena(H, S, PS, irow[dst + O_SPACE])
    smem = arena(H, S, PS, irow[src + O_SPACE])
    doff = element_offset(irow, dst, L)
    soff = element_offset(irow, src, L)
    code = irow[src + O_DTYPE]
    P, N = shape_of(irow, src)
    width = _width(code)
    if _copy_rows(dmem, doff, irow, dst, smem, soff, src, width):
        return
    if (width == 4 and not _may_overlap(irow, dst, doff, src, soff)
            and _transpose_into(dmem.view(np.uint32), doff, irow, dst, smem.view(np.uint32),
                                soff, src)):
        return
    if width == 4:
        scatter(dmem.view(np.uint32), doff, irow, dst,
                gather(smem.view(np.uint32), soff, irow, src, P, N))
    elif width == 2:
        scatter(dmem.view(np.uint16), doff, irow, dst,
                gather(smem.view(np.uint16), soff, irow, src, P, N))
    else:
        scatter(dmem, doff, irow, dst, gather(smem, soff, irow, src, P, N))


# ----- fp32 row operands, used in place ----------------------------------------------------
# The usual tile operand is fp32 rows: a partition range x a contiguous free range. Helpers
# may compute on such operands straight in the arenas (no gathered copies: one pass over
# memory, 2.4x faster for a 128x1024 tensor_tensor); these say when that is safe.
@njit(cache=True, nogil=True)
def _typed_rows(mem, irow, base, L, code):
    """(``mem``, element offset, row stride, rows, row length) when operand ``base`` has
    dtype ``code`` and is laid out as rows of contiguous elements; rows = 0 otherwise."""
    if irow[base + O_DTYPE] != code:
        return mem, 0, 0, 0, 0
    rows, stride, n = _rows_layout(irow, base)
    return mem, element_offset(irow, base, L), stride, rows, n


@njit(cache=True, nogil=True)
def f32_rows(H, S, PS, irow, base, L):
    """(arena as fp32, element offset, row stride, rows, row length) of an fp32 operand laid
    out as rows of contiguous elements; rows = 0 for any other operand."""
    return _typed_rows(arena(H, S, PS, irow[base + O_SPACE]).view(np.float32), irow, base, L,
                       F32)


@njit(cache=True, nogil=True)
def bf16_rows(H, S, PS, irow, base, L):
    """:func:`f32_rows` for a bf16 operand: the arena as uint16 bit patterns."""
    return _typed_rows(arena(H, S, PS, irow[base + O_SPACE]).view(np.uint16), irow, base, L,
                       BF16)


@njit(cache=True, nogil=True)
def float_rows(H, S, PS, irow, base, L):
    """(is fp32, fp32 arena, bf16 arena, element offset, row stride, rows, row length) of an
    fp32 or bf16 operand laid out as rows of contiguous elements; rows = 0 otherwise."""
    fm, fo, fs, fr, fn = f32_rows(H, S, PS, irow, base, L)
    hm, ho, hs, hr, hn = bf16_rows(H, S, PS, irow, base, L)
    if fr > 0:
        return True, fm, hm, fo, fs, fr, fn
    return False, fm, hm, ho, hs, hr, hn


# Rows shorter than this go to an instruction's gathered path, not its row-by-row direct one:
# per row a few calls cost more than the whole-tile gather. [128, n] fp32 tensor_tensor
# (AMD EPYC AVX2, per instruction): n = 1 16.0 -> 9.3 us, 8 16.7 -> 10.5, 32 18.1 -> 13.0,
# 128 even, 512 41 (direct) vs 74 (gathered).
DIRECT_ROW_MIN = 128


@njit(cache=True, nogil=True, inline="always")
def float_row(m32, mh, is32, off, n, tmp):
    """Row ``n`` elements at ``off`` of a :func:`float_rows` operand as fp32: the fp32
    arena's own row, else the bf16 row decoded into ``tmp`` (then the row returned)."""
    if is32:
        return m32[off:off + n]
    nm.bf16_to_f32_into(mh[off:off + n], tmp)
    return tmp


@njit(cache=True, nogil=True)
def rows_same_or_apart(irow, x, x32, xo, xs, y, y32, yo, ys, rows, n):
    """Whether row operands ``x`` and ``y`` (:func:`float_rows`) may be computed row by row:
    the very same rows, or rows that share no element. Element offsets compare only within
    one dtype, so rows of different widths in one arena are refused."""
    if irow[x + O_SPACE] != irow[y + O_SPACE]:
        return True
    if x32 != y32:
        wx, wy = (4 if x32 else 2), (4 if y32 else 2)
        return not _strided_rows_meet(xo * wx, xs * wx, n * wx, yo * wy, ys * wy, n * wy, rows)
    return same_rows(irow, x, xo, xs, y, yo, ys) or \
        not rows_meet(irow, x, xo, xs, y, yo, ys, rows, n)


@njit(cache=True, nogil=True)
def _strided_rows_meet(xo, xp, xl, yo, yp, yl, rows):
    """Whether ``rows`` rows of ``xl`` units every ``xp`` from ``xo`` share a unit with ``rows``
    rows of ``yl`` units every ``yp`` from ``yo`` (elements of one dtype, or bytes when the
    dtypes differ). Tiles of one arena interleave (every partition holds a row of each), so
    their spans always intersect; with one pitch ``p``, row ``r`` of x and row ``q`` of y meet
    iff ``-xl < xo - yo + (r - q) p < yl``, which at most a few ``r - q`` satisfy, and those
    are tried. Other pitches answer yes."""
    if xp != yp or xp < xl or xp < yl or xp <= 0:
        return True
    k_lo = (yo - xo - xl) // xp
    for k in range(k_lo, k_lo + 4):
        gap = xo - yo + k * xp
        if -rows < k < rows and -xl < gap < yl:
            return True
    return False


@njit(cache=True, nogil=True)
def same_rows(irow, x, xo, xs, y, yo, ys):
    """Whether row operands ``x`` and ``y`` (offsets ``xo``/``yo``, strides ``xs``/``ys``)
    are the very same elements, as in an in-place instruction."""
    return irow[x + O_SPACE] == irow[y + O_SPACE] and xo == yo and xs == ys


@njit(cache=True, nogil=True)
def rows_meet(irow, x, xo, xs, y, yo, ys, rows, n):
    """Whether two operands of ``rows`` rows of ``n`` elements share an element (rows with
    different strides, or longer than their stride, are judged by their spans)."""
    if irow[x + O_SPACE] != irow[y + O_SPACE]:
        return False
    if xs != ys or xs < n:
        return _may_overlap(irow, x, xo, y, yo)
    return _strided_rows_meet(xo, xs, n, yo, ys, n, rows)


@njit(cache=True, nogil=True, inline="always")
def copy_row(dst, src):
    """``dst[:] = src`` for two 1-D rows of one size (a loop Numba vectorises)."""
    for i in range(dst.size):
        dst[i] = src[i]


@njit(cache=True, nogil=True)
def _copy_rows(dmem, doff, irow, dst, smem, soff, src, width):
    """Row-to-row copy when both operands are rows of one shape that share no element: one
    pass, where gather + scatter went through a temporary (2x the memory traffic). False
    (nothing done) otherwise."""
    rows, ds, n = _rows_layout(irow, dst)
    srows, ss, sn = _rows_layout(irow, src)
    if rows == 0 or srows != rows or sn != n or \
            rows_meet(irow, dst, doff, ds, src, soff, ss, rows, n):
        return False
    if width == 4:
        _rows_copy(dmem.view(np.uint32), doff, ds, smem.view(np.uint32), soff, ss, rows, n)
    elif width == 2:
        _rows_copy(dmem.view(np.uint16), doff, ds, smem.view(np.uint16), soff, ss, rows, n)
    else:
        _rows_copy(dmem, doff, ds, smem, soff, ss, rows, n)
    return True


@njit(cache=True, nogil=True)
def _rows_copy(d, doff, ds, s, soff, ss, rows, n):
    for r in range(rows):
        copy_row(d[doff + r * ds:doff + r * ds + n], s[soff + r * ss:soff + r * ss + n])


@njit(cache=True, nogil=True)
def _span(irow, base, off):
    """(lowest, highest) element index an operand touches."""
    lo, hi = off, off
    for k in range(5):
        step = (irow[base + O_COUNT + k] - 1) * irow[base + O_STRIDE + k]
        if step < 0:
            lo += step
        else:
            hi += step
    return lo, hi


@njit(cache=True, nogil=True)
def _may_overlap(irow, dst, doff, src, soff):
    """Whether two operands may share elements (same memory, intersecting spans): a copy
    between them must then go through a temporary."""
    if irow[dst + O_SPACE] != irow[src + O_SPACE]:
        return False
    dlo, dhi = _span(irow, dst, doff)
    slo, shi = _span(irow, src, soff)
    return dlo <= shi and slo <= dhi


@njit(cache=True, nogil=True)
def _transpose_into(dtyped, doff, irow, dst, styped, soff, src):
    """A 2-D transposing copy (``nc_transpose``, ``dma_transpose``) straight into a
    destination of contiguous rows, without the contiguous temporary: ``dst[i, j] =
    src[i * sa + j * sb]``. False (nothing done) for any other shape of copy."""
    rows, stride, n = _rows_layout(irow, dst)
    if rows <= 0:
        return False
    c = irow[src + O_COUNT:src + O_COUNT + 5]
    s = irow[src + O_STRIDE:src + O_STRIDE + 5]
    a, b = _transpose_dims(c, s)
    if a != 0 or c[a] != rows or c[b] != n or c[a] * c[b] != rows * n:
        return False
    for k in range(1, 5):
        if k != b and c[k] != 1:
            return False
    _tile_copy(styped, soff, s[a], s[b], dtyped, doff, stride, 1, rows, n)
    return True


@njit(cache=True, nogil=True)
def load_bits(H, S, PS, irow, base, L, P, N):
    """An operand's raw element bits as a (P, N) int64 array (unsigned): bit-exact moves and
    selects that must not round through fp32."""
    mem = arena(H, S, PS, irow[base + O_SPACE])
    off = element_offset(irow, base, L)
    width = _width(irow[base + O_DTYPE])
    if width == 4:
        return gather(mem.view(np.uint32), off, irow, base, P, N).astype(np.int64)
    if width == 2:
        return gather(mem.view(np.uint16), off, irow, base, P, N).astype(np.int64)
    return gather(mem, off, irow, base, P, N).astype(np.int64)


@njit(cache=True, nogil=True)
def store_bits(H, S, PS, irow, base, L, bits):
    """Write raw bit patterns (int64, any shape with the operand's element count)."""
    mem = arena(H, S, PS, irow[base + O_SPACE])
    off = element_offset(irow, base, L)
    width = _width(irow[base + O_DTYPE])
    if width == 4:
        scatter(mem.view(np.uint32), off, irow, base, bits.astype(np.uint32))
    elif width == 2:
        scatter(mem.view(np.uint16), off, irow, base, bits.astype(np.uint16))
    else:
        scatter(mem, off, irow, base, bits.astype(np.uint8))


@njit(cache=True, nogil=True)
def _width(code):
    if code == F32 or code == TF32 or code == I32 or code == U32 or code >= 15 and code <= 16:
        return 4
    if code == BF16 or code == F16 or code == I16 or code == U16 or code == 17:
        return 2
    return 1
