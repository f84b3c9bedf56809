"""tensor_tensor / tensor_scalar / tensor_copy / memset / dma_copy against numpy, both backends."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import run_both

import nki
import nki.isa as nisa
import nki.language as nl

BF16 = ml_dtypes.bfloat16


def _binary_kernel(op):
    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        P = a.shape[0]
        for t in nl.affine_range((P + 127) // 128):
            p0, p1 = t * 128, min(P, t * 128 + 128)
            x = nl.ndarray((p1 - p0, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
            y = nl.ndarray((p1 - p0, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a[p0:p1, :])
            nisa.dma_copy(dst=y, src=b[p0:p1, :])
            nisa.tensor_tensor(dst=x, data1=x, data2=y, op=op)
            nisa.dma_copy(dst=out[p0:p1, :], src=x)
        return out
    return kernel


@pytest.mark.parametrize("op,ref", [(nl.add, np.add), (nl.subtract, np.subtract),
                                    (nl.multiply, np.multiply), (nl.maximum, np.maximum)])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_tensor_tensor_matches_numpy(backend, rng, op, ref, dtype):
    a = rng.standard_normal((200, 48)).astype(dtype)   # 200: one full and one partial tile
    b = rng.standard_normal((200, 48)).astype(dtype)
    y = nki.jit(_binary_kernel(op), backend=backend)(a, b)
    expect = ref(a.astype(np.float32), b.astype(np.float32)).astype(dtype)
    assert y.dtype == expect.dtype
    np.testing.assert_array_equal(y.view(np.uint8), expect.view(np.uint8))


@pytest.mark.parametrize("op,ref", [(nl.bitwise_and, np.bitwise_and),
                                    (nl.bitwise_xor, np.bitwise_xor), (nl.add, np.add)])
def test_tensor_tensor_int32_exact(backend, rng, op, ref):
    a = rng.integers(-2**30, 2**30, (64, 32)).astype(np.int32)
    b = rng.integers(-2**30, 2**30, (64, 32)).astype(np.int32)
    y = nki.jit(_binary_kernel(op), backend=backend)(a, b)
    np.testing.assert_array_equal(y, ref(a, b).astype(np.int32))


# ----- comparison, logical and absolute-value ALU operators (the fast paths of helpers/alu) ---
# numpy's semantics: comparisons with NaN are false (not_equal true), NaN is logically true,
# results are 1.0 / 0.0; abs_max/abs_min propagate NaN.
CMP = [(nl.equal, np.equal), (nl.not_equal, np.not_equal), (nl.greater, np.greater),
       (nl.greater_equal, np.greater_equal), (nl.less, np.less),
       (nl.less_equal, np.less_equal),
       (nl.logical_and, lambda a, b: (a != 0) & (b != 0)),
       (nl.logical_or, lambda a, b: (a != 0) | (b != 0)),
       (nl.logical_xor, lambda a, b: (a != 0) ^ (b != 0)),
       (nl.abs_max, lambda a, b: np.maximum(np.abs(a), np.abs(b))),
       (nl.abs_min, lambda a, b: np.minimum(np.abs(a), np.abs(b))),
       (nl.average, lambda a, b: (a + b) * np.float32(0.5))]
CMP_IDS = [op.__name__ for op, _ in CMP]


def _specials(rng, shape):
    """Values with ties, NaN, +-0 and +-inf mixed in (a 128x1024 tile runs in row chunks)."""
    x = rng.integers(-2, 3, shape).astype(np.float32)
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, flat.size // 8, replace=False)
    flat[picks] = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5], np.float32),
                             picks.size)
    return x


def _expect(ref, a, b):
    with np.errstate(invalid="ignore"):
        return np.asarray(ref(a, b)).astype(np.float32)


def _same_bits(y, expect):
    np.testing.assert_array_equal(np.ascontiguousarray(y).view(np.uint32),
                                  np.ascontiguousarray(expect).view(np.uint32))


@pytest.mark.parametrize("op,ref", CMP, ids=CMP_IDS)
def test_tensor_tensor_comparisons(backend, rng, op, ref):
    a, b = _specials(rng, (128, 1024)), _specials(rng, (128, 1024))
    b[:, ::3] = a[:, ::3]   # ties
    y = nki.jit(_binary_kernel(op), backend=backend)(a, b)
    _same_bits(y, _expect(ref, a, b))


def _scalar_kernel(op, reverse, tile_operand):
    def kernel(a, s):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        col = nl.ndarray(s.shape, dtype=s.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=col, src=s)
        y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=x, op0=op, operand0=col if tile_operand else 0.5,
                           reverse0=reverse)
        nisa.dma_copy(dst=out, src=y)
        return out
    return kernel


@pytest.mark.parametrize("op,ref", CMP[:9], ids=CMP_IDS[:9])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("tile_operand", [True, False])
def test_tensor_scalar_comparisons(backend, rng, op, ref, reverse, tile_operand):
    a = _specials(rng, (128, 1024))
    s = _specials(rng, (128, 1))
    a[:, :4] = s    # ties with the column
    y = nki.jit(_scalar_kernel(op, reverse, tile_operand), backend=backend)(a, s)
    col = s if tile_operand else np.float32(0.5)
    _same_bits(y, _expect(ref, col, a) if reverse else _expect(ref, a, col))


def _stt_kernel(op0, op1, reverse0):
    def kernel(a, s, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        tiles = []
        for src in (a, s, b):
            t = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=src)
            tiles.append(t)
        y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=y, data=tiles[0], op0=op0, operand0=tiles[1],
                                  op1=op1, operand1=tiles[2], reverse0=reverse0)
        nisa.dma_copy(dst=out, src=y)
        return out
    return kernel


@pytest.mark.parametrize("op0,ref0", [CMP[0], CMP[2], CMP[5], CMP[7],
                                      (nl.divide, np.divide), (nl.subtract, np.subtract)],
                         ids=["equal", "greater", "less_equal", "logical_or", "divide",
                              "subtract"])
@pytest.mark.parametrize("op1,ref1", [(nl.multiply, np.multiply), CMP[1]],
                         ids=["multiply", "not_equal"])
@pytest.mark.parametrize("reverse0", [False, True])
def test_scalar_tensor_tensor_comparisons(backend, rng, op0, ref0, op1, ref1, reverse0):
    a, b = _specials(rng, (128, 1024)), _specials(rng, (128, 1024))
    s = _specials(rng, (128, 1))
    y = nki.jit(_stt_kernel(op0, op1, reverse0), backend=backend)(a, s, b)
    with np.errstate(all="ignore"):
        t = _expect(ref0, s, a) if reverse0 else _expect(ref0, a, s)
    _same_bits(y, _expect(ref1, t, b))


# ----- fp32 row operands computed straight in the arenas (helpers' in-place fast paths) ------
# Where the destination is an input, apart from the inputs, or overlaps one by a shift (which
# must fall back to the gathered path), non-commutative operators and reversed operands.
def _aliasing_kernel(where, op):
    def kernel(a, b):
        P, W = a.shape
        out = nl.ndarray((P, W), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((P, 4 * W), dtype=a.dtype, buffer=nl.sbuf)   # [a | b]
        nisa.dma_copy(dst=t[:, 0:W], src=a)
        nisa.dma_copy(dst=t[:, W:2 * W], src=b)
        x, y = t[:, 0:W], t[:, W:2 * W]
        if where == "dst_is_data1":
            dst = x
        elif where == "dst_is_data2":
            dst = y
        elif where == "apart":
            dst = nl.ndarray((P, W), dtype=a.dtype, buffer=nl.sbuf)
        else:   # shifted: overlaps data2 by all but one column
            dst = t[:, W - 1:2 * W - 1]
        nisa.tensor_tensor(dst=dst, data1=x, data2=y, op=op)
        nisa.dma_copy(dst=out, src=dst)
        return out
    return kernel


@pytest.mark.parametrize("where", ["dst_is_data1", "dst_is_data2", "apart", "shifted"])
@pytest.mark.parametrize("op,ref", [(nl.subtract, np.subtract), (nl.divide, np.divide),
                                    (nl.maximum, np.maximum)])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_tensor_tensor_in_arena_aliasing(backend, rng, where, op, ref, dtype):
    # 300 columns: the helper runs 54 partitions at a time (a ragged last chunk of 12)
    a = rng.standard_normal((120, 300)).astype(dtype)
    b = rng.standard_normal((120, 300)).astype(dtype)
    a[3, 5], b[4, 6] = np.nan, np.nan
    y = nki.jit(_aliasing_kernel(where, op), backend=backend)(a, b)
    with np.errstate(all="ignore"):
        # shifted too: both inputs are read before the write lands
        expect = ref(a.astype(np.float32), b.astype(np.float32)).astype(dtype)
    np.testing.assert_array_equal(y.view(np.uint8), expect.view(np.uint8))


def _mixed_kernel(dst_dtype, in_place):
    """tensor_tensor of an fp32 tile and a bf16 tile into a tile of ``dst_dtype`` (the fp32
    input itself when ``in_place``)."""
    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=dst_dtype, buffer=nl.shared_hbm)
        x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        nisa.dma_copy(dst=y, src=b)
        dst = x if in_place else nl.ndarray(a.shape, dtype=dst_dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=dst, data1=y, data2=x, op=nl.subtract)
        nisa.dma_copy(dst=out, src=dst)
        return out
    return kernel


@pytest.mark.parametrize("dst_dtype,in_place", [(np.float32, True), (np.float32, False),
                                                (BF16, False)])
def test_tensor_tensor_mixed_fp32_bf16_rows(backend, rng, dst_dtype, in_place):
    a = rng.standard_normal((128, 640)).astype(np.float32)
    b = rng.standard_normal((128, 640)).astype(BF16)
    b[1, 2] = np.inf
    y = nki.jit(_mixed_kernel(dst_dtype, in_place), backend=backend)(a, b)
    expect = (b.astype(np.float32) - a).astype(dst_dtype)   # fp32 arithmetic, one rounding
    np.testing.assert_array_equal(y.view(np.uint8), expect.view(np.uint8))


def _scalar_chain_kernel(in_place, reverse):
    """tensor_scalar with a [P, 1] column then an immediate, then scalar_tensor_tensor reading
    the result as data and the original tile as operand1."""
    def kernel(a, c):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        keep = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        col = nl.ndarray((a.shape[0], 1), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        nisa.dma_copy(dst=keep, src=a)
        nisa.dma_copy(dst=col, src=c)
        dst = x if in_place else nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=dst, data=x, op0=nl.subtract, operand0=col, reverse0=reverse,
                           op1=nl.divide, operand1=3.0, reverse1=reverse)
        res = dst if in_place else nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=res, data=dst, op0=nl.maximum, operand0=col,
                                  op1=nl.subtract, operand1=keep, reverse1=reverse)
        nisa.dma_copy(dst=out, src=res)
        return out
    return kernel


@pytest.mark.parametrize("in_place", [True, False])
@pytest.mark.parametrize("reverse", [False, True])
def test_scalar_chains_in_arena(backend, rng, in_place, reverse):
    a = rng.standard_normal((120, 300)).astype(np.float32)
    c = rng.standard_normal((120, 1)).astype(np.float32)
    a[7, 9] = np.nan
    y = nki.jit(_scalar_chain_kernel(in_place, reverse), backend=backend)(a, c)
    with np.errstate(all="ignore"):
        t = (c - a) if reverse else (a - c)
        t = (np.float32(3.0) / t) if reverse else (t / np.float32(3.0))
        t = np.maximum(t, c)
        expect = (a - t) if reverse else (t - a)
    np.testing.assert_array_equal(y, expect.astype(np.float32))


# ----- bf16 rows: decoded a row at a time, computed in fp32, rounded once into dst ----------
def _bf16_rows_kernel(where, out_dtype):
    def kernel(a, c):
        P, W = a.shape
        out = nl.ndarray((P, W), dtype=out_dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((P, 4 * W), dtype=a.dtype, buffer=nl.sbuf)
        col = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[:, 0:W], src=a)
        nisa.dma_copy(dst=col, src=c)
        x = t[:, 0:W]
        if where == "mixed_overlap":    # fp32 rows over the bf16 data's bytes and beyond
            dst = t.view(nl.float32)[:, 0:W]
        else:
            dst = {"in_place": x, "apart": nl.ndarray((P, W), dtype=out_dtype, buffer=nl.sbuf),
                   "shifted": t[:, 1:W + 1]}[where]
        nisa.tensor_scalar(dst=dst, data=x, op0=nl.subtract, operand0=col, reverse0=True,
                           op1=nl.multiply, operand1=3.0)
        nisa.dma_copy(dst=out, src=dst)
        return out
    return kernel


@pytest.mark.parametrize("where,out_dtype", [("in_place", BF16), ("apart", BF16),
                                             ("apart", np.float32), ("shifted", BF16),
                                             ("mixed_overlap", np.float32)])
def test_tensor_scalar_bf16_rows(rng, where, out_dtype):
    # 300 columns: the helper runs 54 partitions at a time (a ragged last chunk of 12)
    a = rng.standard_normal((120, 300)).astype(BF16)
    c = rng.standard_normal((120, 1)).astype(np.float32)
    a[7, 9] = np.nan
    y = run_both(_bf16_rows_kernel(where, out_dtype), a, c)
    with np.errstate(all="ignore"):
        expect = ((c - a.astype(np.float32)) * np.float32(3.0)).astype(np.float32)
    np.testing.assert_array_equal(y.astype(np.float32), expect.astype(out_dtype).astype(np.float32))


def _bf16_stt_kernel(where, out_dtype, u_dtype, reverse0):
    """scalar_tensor_tensor ``(x - col) * u`` (or ``(col - x) * u``) with bf16 data ``x``,
    operand1 ``u`` of ``u_dtype`` and the destination placed ``where``."""
    def kernel(a, b, c):
        P, W = a.shape
        out = nl.ndarray((P, W), dtype=out_dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((P, 4 * W), dtype=a.dtype, buffer=nl.sbuf)   # [x | u (bf16) | ...]
        col = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[:, 0:W], src=a)
        nisa.dma_copy(dst=col, src=c)
        x = t[:, 0:W]
        if u_dtype == a.dtype:
            u = t[:, W:2 * W]
        else:
            u = nl.ndarray((P, W), dtype=u_dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=u, src=b)
        dst = {"data": x, "operand1": u, "shifted": t[:, W - 1:2 * W - 1],
               "apart": nl.ndarray((P, W), dtype=out_dtype, buffer=nl.sbuf)}[where]
        nisa.scalar_tensor_tensor(dst=dst, data=x, op0=nl.subtract, operand0=col,
                                  reverse0=reverse0, op1=nl.multiply, operand1=u)
        nisa.dma_copy(dst=out, src=dst)
        return out
    return kernel


@pytest.mark.parametrize("where,out_dtype,u_dtype", [
    ("data", BF16, BF16), ("operand1", BF16, BF16), ("apart", BF16, BF16),
    ("apart", np.float32, BF16), ("shifted", BF16, BF16), ("apart", BF16, np.float32),
    ("apart", np.float32, np.float32), ("operand1", np.float32, np.float32)])
@pytest.mark.parametrize("reverse0", [False, True])
def test_scalar_tensor_tensor_bf16_rows(rng, where, out_dtype, u_dtype, reverse0):
    """bf16 rows decoded a row at a time, fp32 arithmetic, one rounding into the dst: in
    place over either input, apart, overlapping by a shift (the gathered path), mixed with
    fp32 rows; the same bits in both backends."""
    a = rng.standard_normal((120, 300)).astype(BF16)
    b = rng.standard_normal((120, 300)).astype(u_dtype)
    c = rng.standard_normal((120, 1)).astype(np.float32)
    a[7, 9], b[8, 10] = np.nan, np.inf
    y = run_both(_bf16_stt_kernel(where, out_dtype, u_dtype, reverse0), a, b, c)
    x, u = a.astype(np.float32), b.astype(np.float32)
    with np.errstate(all="ignore"):
        expect = ((c - x) if reverse0 else (x - c)) * u
    np.testing.assert_array_equal(y.view(np.uint8), expect.astype(out_dtype).view(np.uint8))


_ARITH = [(nl.add, np.add), (nl.subtract, np.subtract), (nl.multiply, np.multiply)]


@pytest.mark.parametrize("op0,ref0", _ARITH, ids=["add", "subtract", "multiply"])
@pytest.mark.parametrize("op1,ref1", _ARITH, ids=["add", "subtract", "multiply"])
@pytest.mark.parametrize("reverse0", [False, True])
def test_scalar_tensor_tensor_arithmetic_bits(backend, rng, op0, ref0, op1, ref1, reverse0):
    """Every arithmetic operator pair (the one-pass rows when not reversed) gives numpy's
    two fp32 steps exactly, NaN/inf/+-0/subnormal operands included."""
    a, b = _specials(rng, (128, 1024)), _specials(rng, (128, 1024))
    s = _specials(rng, (128, 1))
    y = nki.jit(_stt_kernel(op0, op1, reverse0), backend=backend)(a, s, b)
    with np.errstate(all="ignore"):
        t = ref0(s, a) if reverse0 else ref0(a, s)
        _same_bits(y, ref1(t, b).astype(np.float32))


def _short_rows_kernel(a, b):
    """Columns ``1:1+n`` of [P, 40] tiles (rows of ``n`` elements every 40: the gather and
    scatter of short rows), through a gathered tensor_tensor and a tensor_copy into a
    narrower tile of another dtype."""
    P, n = a.shape[0], a.shape[1] - 1
    out = nl.ndarray((P, n), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((P, 40), dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray((P, 40), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x[:, 0:n + 1], src=a)
    nisa.dma_copy(dst=y[:, 0:n + 1], src=b)
    nisa.tensor_tensor(dst=x[:, 1:n + 1], data1=x[:, 1:n + 1], data2=y[:, 1:n + 1],
                       op=nl.subtract)
    z = nl.ndarray((P, n), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=z, src=x[:, 1:n + 1])
    nisa.dma_copy(dst=out, src=z)
    return out


@pytest.mark.parametrize("n", [1, 3, 15, 16])
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int8, np.int32])
def test_short_rows_gather_and_scatter(backend, rng, n, dtype):
    """Rows shorter than ``memory.SHORT_ROW`` are copied element by element (no per-row
    views), longer ones by row views: both give numpy's values."""
    a = (rng.standard_normal((128, n + 1)) * 20).astype(dtype)
    b = (rng.standard_normal((128, n + 1)) * 20).astype(dtype)
    y = nki.jit(_short_rows_kernel, backend=backend)(a, b)
    wide = np.int64 if np.issubdtype(dtype, np.integer) else np.float32
    d = a[:, 1:].astype(wide) - b[:, 1:].astype(wide)
    if np.issubdtype(dtype, np.integer):    # int operands compute in fp32 and saturate
        info = np.iinfo(dtype)
        d = np.clip(d, info.min, info.max)
    expect = d.astype(dtype).astype(np.float32)
    np.testing.assert_array_equal(y, expect)
