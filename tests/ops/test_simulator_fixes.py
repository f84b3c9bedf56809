"""The hardware semantics behind the fixes in AWS's NKI 0.4-0.6 simulator release notes
(spec §10), one test each, against numpy references written here, both backends.

Where AWS's simulator had a bug it now fixes, the test pins what the hardware does; where a
pattern is wrong on hardware, the test pins our warning or error. Covered elsewhere too:
sliced MX scale buffers (tests/ops/test_mx.py), register offsets under oob_mode.skip
(tests/ops/test_control.py)."""

from __future__ import annotations

import inspect
import re
import warnings

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiUnsupportedError, NkiValidationError

BF16 = ml_dtypes.bfloat16
E4M3, E5M2 = ml_dtypes.float8_e4m3, ml_dtypes.float8_e5m2
F32_MIN = float(np.finfo(np.float32).min)


def _jit(kernel, **options):
    """nki.jit without the program cache: these kernels are closures over parameters."""
    return nki.jit(kernel, cache=False, **options)


def _sbuf(x, dtype=None):
    t = nl.ndarray(x.shape, dtype=dtype or x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _out(t):
    if t.buffer is nl.psum:
        s = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=t)
        t = s
    o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o, src=t)
    return o


def _exact(y, expect):
    y, expect = np.ascontiguousarray(y), np.ascontiguousarray(expect)
    assert y.dtype == expect.dtype and y.shape == expect.shape
    np.testing.assert_array_equal(y.view(np.uint8), expect.view(np.uint8))


def _line(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(lines) if text in s)


# ----- fp32 -> integer: round half to even, saturate (0.6.0) -------------------------------
INTS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32]


def _cast_inputs() -> np.ndarray:
    ties = np.arange(-6, 7) + 0.5
    edges = [127.5, 128.5, -128.5, -129.5, 255.5, 256.5, 32767.5, -32768.5, 65535.5,
             2147483520.0, 2147483648.0, -2147483648.0, -2147483904.0, 4294967040.0,
             4294967296.0, 1e10, -1e10, np.inf, -np.inf, 0.49999997, -0.49999997]
    rnd = np.random.default_rng(5).uniform(-70000, 70000, 64 - len(ties) - len(edges))
    return np.concatenate([ties, edges, rnd]).astype(np.float32).reshape(2, 32)


def _cast_reference(x: np.ndarray, dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(np.rint(x.astype(np.float64)), info.min, info.max).astype(dtype)


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
def test_fp32_to_int_rounds_half_even_and_saturates_on_every_writer(backend, dtype):
    def kernel(x):
        s = _sbuf(x)
        outs = []
        for eng in (nisa.engine.vector, nisa.engine.gpsimd, nisa.engine.scalar):
            d = nl.ndarray(x.shape, dtype=dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=d, src=s, engine=eng)
            outs.append(_out(d))
        d = nl.ndarray(x.shape, dtype=dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=d, data=s, op0=nl.multiply, operand0=1.0)
        outs.append(_out(d))
        d = nl.ndarray(x.shape, dtype=dtype, buffer=nl.sbuf)
        nisa.activation(dst=d, op=nl.copy, data=s)
        outs.append(_out(d))
        h = nl.ndarray(x.shape, dtype=dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=h, src=s)                 # the DMA's cast
        return tuple(outs) + (h,)

    x = _cast_inputs()
    for y in _jit(kernel, backend=backend)(x):
        _exact(y, _cast_reference(x, dtype))


# ----- nc_match_replace8 / nc_find_index8 tie-breaks (0.6.0) -------------------------------
def _pair_slots(data_row, vals_row, descending: bool) -> np.ndarray:
    """Slots of equal values share that value's occurrences in data: ascending slots get
    ascending positions (nc_find_index8), or descending positions (nc_match_replace8, which
    walks vals 7..0); slots beyond the occurrences get all ones (-1)."""
    out = np.full(len(vals_row), -1, np.int64)
    for v in np.unique(vals_row):
        slots = np.flatnonzero(vals_row == v)
        where = np.flatnonzero(data_row == v)
        if descending:
            slots = slots[::-1]
        n = min(len(slots), len(where))
        out[slots[:n]] = where[:n]
    return out


def test_pairing_reference_reproduces_aws_documented_example():
    data = np.array([1, 2, 3, 4] + [8] * 7, np.float32)
    vals = np.array([3] + [8] * 7, np.float32)
    assert list(_pair_slots(data, vals, True)) == [2, 10, 9, 8, 7, 6, 5, 4]
    assert list(_pair_slots(data, vals, False)) == [2, 4, 5, 6, 7, 8, 9, 10]


def _top8_inputs(rng, P=16, N=24):
    data = rng.integers(0, 6, (P, N)).astype(np.float32)       # many repeats
    data[0, :3] = 9.0
    vals = rng.integers(0, 8, (P, 8)).astype(np.float32)        # repeats, some absent (6, 7)
    vals[0] = [9, 9, 9, 9, 5, 9, 7, 5]                          # more 9s asked than present
    return data, vals


@pytest.mark.parametrize("idx_dtype", [np.uint16, np.uint32], ids=["u16", "u32"])
def test_match_replace8_walks_vals_in_reverse(backend, rng, idx_dtype):
    def kernel(a, v):
        x, vv = _sbuf(a), _sbuf(v)
        y = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        m_idx = nl.ndarray(v.shape, dtype=idx_dtype, buffer=nl.sbuf)
        f_idx = nl.ndarray(v.shape, dtype=idx_dtype, buffer=nl.sbuf)
        nisa.nc_match_replace8(dst=y, data=x, vals=vv, imm=-100.0, dst_idx=m_idx)
        nisa.nc_find_index8(dst=f_idx, data=x, vals=vv)
        return _out(y), _out(m_idx), _out(f_idx)

    data, vals = _top8_inputs(rng)
    y, m_idx, f_idx = _jit(kernel, backend=backend)(data, vals)
    m_ref = np.stack([_pair_slots(d, v, True) for d, v in zip(data, vals)])
    f_ref = np.stack([_pair_slots(d, v, False) for d, v in zip(data, vals)])
    _exact(m_idx, m_ref.astype(idx_dtype))          # -1 -> all ones of the index dtype
    _exact(f_idx, f_ref.astype(idx_dtype))
    y_ref = data.copy()
    for p, row in enumerate(m_ref):
        y_ref[p, row[row >= 0]] = -100.0
    _exact(y, y_ref)
    # five slots ask for 9, data holds three: walking 7..0, the two lowest slots miss out
    ones = np.iinfo(idx_dtype).max
    assert list(m_idx[0, [5, 3, 2, 1, 0]]) == [0, 1, 2, ones, ones]
    assert list(f_idx[0, [0, 1, 2, 3, 5]]) == [0, 1, 2, ones, ones]


# ----- activation: reduce_res aliasing dst (0.6.0) -----------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_activation_reduce_res_aliasing_dst_keeps_the_reduction(backend, rng, dtype):
    """Integer data, so every sum is exact: the row sums land in the aliased column after
    the elementwise results (the reduction is read out last)."""
    def kernel(x):
        s = _sbuf(x)
        a = nl.ndarray((x.shape[0], x.shape[1] + 1), dtype=dtype, buffer=nl.sbuf)
        # reduce_res inside the dst tile, one column to its right
        nisa.activation(dst=a[:, 0:x.shape[1]], op=nl.copy, data=s, scale=2.0, bias=None,
                        reduce_op=nl.add, reduce_res=a[:, x.shape[1]:x.shape[1] + 1],
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        b = nl.ndarray(x.shape, dtype=dtype, buffer=nl.sbuf)
        # reduce_res is a column of dst itself: the sum overwrites that column's result
        nisa.activation(dst=b, op=nl.copy, data=s, reduce_op=nl.add, reduce_res=b[:, 3:4],
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(dst=b, op=nl.copy, data=s, reduce_op=nl.add, reduce_res=b[:, 5:6],
                        reduce_cmd=nisa.reduce_cmd.reduce)            # chain: 2 x the sum
        c = nl.ndarray((x.shape[0], 1), dtype=dtype, buffer=nl.sbuf)
        nisa.activation(dst=c, op=nl.copy, data=s[:, 1:2], reduce_op=nl.add,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)      # registers = x[:, 1]
        # reduce_res *is* dst: the register (x1 + x0) wins over the element (x0)
        nisa.activation(dst=c, op=nl.copy, data=s[:, 0:1], reduce_op=nl.add, reduce_res=c,
                        reduce_cmd=nisa.reduce_cmd.reduce)
        d = nl.ndarray(x.shape, dtype=dtype, buffer=nl.sbuf)
        nisa.activation_reduce(dst=d, op=nl.copy, data=s, reduce_op=nl.add,
                               reduce_res=d[:, 0:1])
        return _out(a), _out(b), _out(c), _out(d)

    x = rng.integers(-4, 5, (32, 12)).astype(np.float32)
    a, b, c, d = _jit(kernel, backend=backend)(x)
    rows = x.sum(axis=1, dtype=np.float64)
    _exact(a, np.concatenate([2 * x, 2 * rows[:, None]], axis=1).astype(dtype))
    b_ref = x.astype(np.float64).copy()
    b_ref[:, 5] = 2 * rows          # the second call rewrote column 3 with x, then 5 with 2*sum
    _exact(b, b_ref.astype(dtype))
    _exact(c, (x[:, 0:1] + x[:, 1:2]).astype(dtype))
    d_ref = x.astype(np.float64).copy()
    d_ref[:, 0] = rows
    _exact(d, d_ref.astype(dtype))


# ----- nc_matmul: double-row perf mode is honoured (0.6.0) ---------------------------------
@pytest.mark.parametrize("target", ["trn2", "trn3"])
@pytest.mark.parametrize("how", ["keyword", "positional"])
def test_double_row_perf_mode_contracts_both_rows(backend, rng, target, how):
    def kernel(a, b):
        M, N = a.shape[2], b.shape[2]
        ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
        s, m = _sbuf(a), _sbuf(b)
        if how == "keyword":
            nisa.nc_matmul(dst=ps, stationary=s, moving=m,
                           perf_mode=nisa.matmul_perf_mode.double_row)
        else:
            nisa.nc_matmul(ps, s, m, False, False, False, None, (), (),
                           nisa.matmul_perf_mode.double_row)
        return _out(ps)

    a = rng.integers(-8, 9, (128, 2, 40)).astype(np.float32).astype(E4M3)
    b = rng.integers(-8, 9, (128, 2, 96)).astype(np.float32).astype(E5M2)
    y = _jit(kernel, backend=backend, target=target)(a, b)
    want = np.einsum("kjm,kjn->mn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_array_equal(y, want.astype(np.float32))


def test_double_row_dst_sized_for_a_plain_matmul_is_rejected():
    """A dst sized as if the perf mode were missed ([2M, 2N]) is an error, not a result."""
    def kernel(a, b):
        ps = nl.ndarray((80, 192), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=_sbuf(a), moving=_sbuf(b),  # the call
                       perf_mode=nisa.matmul_perf_mode.double_row)
        return _out(ps)

    a, b = np.zeros((128, 2, 40), E4M3), np.zeros((128, 2, 96), E4M3)
    line = _line(kernel, "# the call")
    with pytest.raises(NkiValidationError, match=rf"(?s)nki_shape_mismatch.*\[40, 96\]"
                                                 rf".*test_simulator_fixes\.py:{line}"):
        _jit(kernel, backend="python", target="trn2")(a, b)


# ----- nc_matmul: overlapping PSUM writes (the conv pattern) accumulate (0.6.0) ------------
TAPS = [(1, 1)] + [(dy, dx) for dy in range(3) for dx in range(3) if (dy, dx) != (1, 1)]


def _conv_kernel(H, W, order, flag):
    """3x3 'same' convolution: for each tap, dst is the sub-window of the [Co, H, W] PSUM
    tile the tap reaches (overlapping 3-D views), moving the matching input window."""
    def kernel(x, w):
        Ci, Co = w.shape[1], w.shape[2]
        xs = _sbuf(x)
        ps = nl.ndarray((Co, H, W), dtype=nl.float32, buffer=nl.psum)
        for t, (dy, dx) in enumerate(order):
            y0, y1 = max(0, 1 - dy), min(H, H + 1 - dy)
            x0, x1 = max(0, 1 - dx), min(W, W + 1 - dx)
            wt = nl.ndarray((Ci, Co), dtype=w.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=wt, src=w[3 * dy + dx])
            nisa.nc_matmul(dst=ps[:, y0:y1, x0:x1], stationary=wt,  # tap matmul
                           moving=xs[:, y0 + dy - 1:y1 + dy - 1, x0 + dx - 1:x1 + dx - 1],
                           accumulate=flag(t))
        return _out(ps)
    return kernel


def _conv_reference(x, w):
    Ci, H, W = x.shape
    pad = np.zeros((Ci, H + 2, W + 2))
    pad[:, 1:-1, 1:-1] = x
    out = np.zeros((w.shape[2], H, W))
    for dy in range(3):
        for dx in range(3):
            out += np.einsum("ic,ihw->chw", w[3 * dy + dx], pad[:, dy:dy + H, dx:dx + W])
    return out


@pytest.mark.parametrize("flag", [lambda t: None, lambda t: t > 0], ids=["None", "t>0"])
def test_conv_pattern_overlapping_psum_windows_accumulate(backend, rng, flag):
    """The centre tap writes the whole tile; the other taps' windows lie inside it, each of
    a different shape and offset, so every later matmul accumulates."""
    x = rng.integers(-3, 4, (16, 8, 8)).astype(np.float32)
    w = rng.integers(-3, 4, (9, 16, 8)).astype(np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = _jit(_conv_kernel(8, 8, TAPS, flag), backend=backend)(x, w)
    assert not [c for c in caught if "nki_accumulate" in str(c.message)]
    np.testing.assert_array_equal(y, _conv_reference(x, w).astype(np.float32))


def test_conv_pattern_starting_at_a_corner_is_rejected_with_accumulate_none():
    """Corner tap first: the centre tap's dst is then partly matmul-written, and no single
    overwrite/accumulate flag is right for all of it on hardware."""
    order = [(0, 0), (1, 1)]
    kernel = _conv_kernel(8, 8, order, lambda t: None)
    line = _line(kernel, "# tap matmul")
    x, w = np.zeros((16, 8, 8), np.float32), np.zeros((9, 16, 8), np.float32)
    with pytest.raises(NkiUnsupportedError, match=rf"(?s)nki_not_implemented.*only part.*"
                                                  rf"Split the matmul.*test_simulator_fixes"
                                                  rf"\.py:{line}"):
        _jit(kernel, backend="python")(x, w)


# ----- nc_matmul: warnings on accumulation that is undefined on hardware (0.5.0, 0.6.0) ----
def _acc_kernel(init):
    def kernel(a, b):
        M, N = a.shape[1], b.shape[1]
        s, m = _sbuf(a), _sbuf(b)
        ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
        if init == "memset":
            nisa.memset(dst=ps, value=1.0)
        elif init == "half_memset":
            nisa.memset(dst=ps[:, 0:N // 2], value=1.0)
        elif init == "matmul":
            nisa.nc_matmul(dst=ps, stationary=s, moving=m, accumulate=False)
        nisa.nc_matmul(dst=ps, stationary=s, moving=m, accumulate=True)   # the add
        return _out(ps)
    return kernel


@pytest.mark.parametrize("init,target,warns", [
    ("none", "trn3", "that nothing wrote"),
    ("none", "trn2", "that nothing wrote"),
    ("half_memset", "trn3", "only partly written"),
    ("memset", "trn2", "non-matmul instruction.*trn2 \\(NeuronCore-v2/v3\\)"),
    ("memset", "trn1", "non-matmul instruction.*trn1"),
    ("memset", "trn3", None),          # NeuronCore-v4 accumulates onto memset values
    ("matmul", "trn2", None),
])
def test_accumulate_true_warns_where_hardware_is_undefined(backend, rng, init, target,
                                                           warns):
    a = rng.integers(-4, 5, (32, 8)).astype(np.float32)
    b = rng.integers(-4, 5, (32, 16)).astype(np.float32)
    kernel = _acc_kernel(init)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = _jit(kernel, backend=backend, target=target)(a, b)
    ours = [w for w in caught if "nki_accumulate_uninitialized" in str(w.message)]
    if warns is None:
        assert not ours
    else:
        assert len(ours) == 1
        w = ours[0]
        assert w.filename.endswith("test_simulator_fixes.py")
        assert w.lineno == _line(kernel, "# the add")
        assert re.search(warns, str(w.message)), str(w.message)
    prod = a.astype(np.float64).T @ b
    if init in ("memset", "matmul"):
        base = 1.0 if init == "memset" else prod
        np.testing.assert_array_equal(y, (base + prod).astype(np.float32))
    else:   # never-written PSUM reads as NaN: the undefined part stays visible
        cols = slice(8, 16) if init == "half_memset" else slice(0, 16)
        assert np.isnan(y[:, cols]).all()
        if init == "half_memset":
            np.testing.assert_array_equal(y[:, 0:8], (1.0 + prod[:, 0:8]).astype(np.float32))


# ----- mixed-rank predicates (0.6.0) -------------------------------------------------------
def test_predicated_copy_and_select_reduce_take_mixed_ranks(backend, rng):
    def kernel(src, pred, base, pred3):
        s2, p4, d4 = _sbuf(src), _sbuf(pred), _sbuf(base)
        nisa.tensor_copy_predicated(dst=d4, src=s2, predicate=p4)          # 2-D src, 4-D dst
        d2 = _sbuf(src)
        nisa.tensor_copy_predicated(dst=d2, src=_sbuf(base), predicate=_sbuf(pred3),
                                    reverse_pred=True)                     # 4-D src, 3-D pred
        sel = nl.ndarray(base.shape, dtype=nl.float32, buffer=nl.sbuf)
        mx = nl.ndarray((src.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.select_reduce(dst=sel, predicate=p4, on_true=s2, on_false=-7.0, reduce_res=mx,
                           reduce_cmd=nisa.reduce_cmd.reset_reduce)        # 2-D on_true
        return _out(d4), _out(d2), _out(sel), _out(mx)

    P = 16
    src = rng.standard_normal((P, 24)).astype(np.float32)
    base = rng.standard_normal((P, 2, 3, 4)).astype(np.float32)
    pred = (rng.random((P, 2, 3, 4)) < 0.5).astype(np.uint8)
    pred3 = (rng.random((P, 4, 6)) < 0.5).astype(np.uint16)
    d4, d2, sel, mx = _jit(kernel, backend=backend)(src, pred, base, pred3)
    flat_p, flat_b = pred.reshape(P, -1) != 0, base.reshape(P, -1)
    _exact(d4, np.where(flat_p, src, flat_b).reshape(base.shape))
    _exact(d2, np.where(pred3.reshape(P, -1) == 0, flat_b, src))
    picked = np.where(flat_p, src, np.float32(-7.0))
    _exact(sel, picked.reshape(base.shape))
    _exact(mx, picked.max(axis=1, keepdims=True))


# ----- float on_false_value in range_select / affine_select (0.6.0) ------------------------
def test_float_on_false_value_is_an_fp32_immediate(backend, rng):
    def kernel(x, lo, hi):
        s = _sbuf(x)
        r = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.range_select(dst=r, on_true_tile=s, comp_op0=nl.greater_equal, comp_op1=nl.less,
                          bound0=_sbuf(lo), bound1=_sbuf(hi), on_false_value=F32_MIN)
        outs = [_out(r)]
        for dtype, fill in ((nl.float32, F32_MIN), (nl.bfloat16, -30000.5),
                            (nl.int32, F32_MIN), (nl.int32, -2.5)):
            a = nl.ndarray(x.shape, dtype=dtype, buffer=nl.sbuf)
            nisa.affine_select(dst=a, pattern=[[-1, x.shape[1]]], channel_multiplier=1,
                               on_true_tile=s, on_false_value=fill, cmp_op=nl.greater_equal)
            outs.append(_out(a))
        return tuple(outs)

    P, N = 16, 20
    x = (rng.standard_normal((P, N)) * 100).astype(np.float32)
    lo = rng.integers(0, 8, (P, 1)).astype(np.float32)
    hi = lo + rng.integers(1, 12, (P, 1)).astype(np.float32)
    r, *aff = _jit(kernel, backend=backend)(x, lo, hi)
    i = np.arange(N)[None, :]
    _exact(r, np.where((i >= lo) & (i < hi), x, np.float32(F32_MIN)))
    keep = np.arange(P)[:, None] - i >= 0                   # p*1 + (-1)*i >= 0
    fills = ((np.float32, F32_MIN), (BF16, -30000.5), (np.int32, F32_MIN), (np.int32, -2.5))
    for y, (dtype, fill) in zip(aff, fills):
        picked = np.where(keep, x, np.float32(fill))        # fp32, then the dst's cast
        want = (_cast_reference(picked, np.int32) if dtype is np.int32
                else picked.astype(dtype))
        _exact(y, want)


# ----- dma_copy with oob_mode.skip keeps integer bits (0.4.0) ------------------------------
@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int16], ids=["i32", "u32", "i16"])
def test_dma_gather_with_skip_keeps_integer_bits(backend, rng, dtype):
    V, D, P = 20, 6, 32

    def kernel(table, idx, fill):
        rows = _sbuf(fill)
        ids = _sbuf(idx)
        src = table.ap([[D, P], [1, D]], 0, vector_offset=ids, indirect_dim=0)
        nisa.dma_copy(dst=rows, src=src, oob_mode=nisa.oob_mode.skip)
        return _out(rows)

    info = np.iinfo(dtype)
    table = rng.integers(info.min, info.max, (V, D), dtype=np.int64, endpoint=True)
    table[0, :3] = [info.max, info.min, 2**24 + 1 if info.bits == 32 else 1]
    table = table.astype(dtype)
    fill = rng.integers(info.min, info.max, (P, D), dtype=np.int64).astype(dtype)
    idx = rng.integers(0, V, (P, 1)).astype(np.int32)
    idx[[3, 7, 11], 0] = [V, -1, V + 100]                  # skipped rows keep the fill
    idx[0, 0] = 0
    y = _jit(kernel, backend=backend)(table, idx, fill)
    ok = (idx[:, 0] >= 0) & (idx[:, 0] < V)
    want = fill.copy()
    want[ok] = table[idx[ok, 0]]
    _exact(y, want)


# ----- nc_stream_shuffle: mask 255 keeps dst (0.4.0) ---------------------------------------
@pytest.mark.parametrize("buffer", ["sbuf", "psum"])
def test_stream_shuffle_mask_255_leaves_dst_partitions_unchanged(backend, rng, buffer):
    mask = [255 if i % 4 == 1 else (7 * i + 3) % 32 for i in range(32)]

    def kernel(a, b):
        buf = nl.sbuf if buffer == "sbuf" else nl.psum
        src = nl.ndarray(a.shape, dtype=a.dtype, buffer=buf)
        dst = nl.ndarray(b.shape, dtype=b.dtype, buffer=buf)
        nisa.tensor_copy(dst=src, src=_sbuf(a))
        nisa.tensor_copy(dst=dst, src=_sbuf(b))
        nisa.nc_stream_shuffle(dst=dst, src=src, shuffle_mask=mask)
        nisa.nc_stream_shuffle(dst=src, src=src, shuffle_mask=mask)      # in place
        return _out(dst), _out(src)

    a = rng.standard_normal((64, 10)).astype(np.float32)
    b = rng.standard_normal((64, 10)).astype(np.float32)
    y, z = _jit(kernel, backend=backend)(a, b)

    def shuffled(into, src):
        out = into.copy()
        for p in range(64):
            q, i = divmod(p, 32)
            if mask[i] != 255:
                out[p] = src[32 * q + mask[i]]
        return out

    _exact(y, shuffled(b, a))
    _exact(z, shuffled(a, a))


# ----- local_gather: num_elem_per_idx is always honoured (AWS's 0.6.0 known issue) ---------
def test_local_gather_honours_num_elem_per_idx_and_rejects_other_dst_sizes(backend, rng):
    """AWS's simulator ignores num_elem_per_idx unless nv * E equals dst's elements per
    partition. Hardware gathers E elements per index whatever dst is; we honour E and reject
    a dst of any other size (it could not hold, or would not be filled by, the result)."""
    def kernel(src, idx, ne, nv, dst_free):
        g = nl.ndarray((src.shape[0], dst_free), dtype=src.dtype, buffer=nl.sbuf)
        nisa.local_gather(dst=g, src_buffer=_sbuf(src), index=_sbuf(idx),  # gather
                          num_elem_per_idx=ne, num_valid_indices=nv)
        return _out(g)

    src = rng.integers(-1000, 1000, (32, 64)).astype(np.int32)
    idx = rng.integers(0, 64 - 4 + 1, (32, 2)).astype(np.uint16)
    y = _jit(kernel, backend=backend)(src, idx, 4, 20, 80)
    want = np.empty((32, 80), np.int32)
    for g0 in (0, 16):
        offs = idx[g0:g0 + 16].T.reshape(-1)[:20]           # partition first within a group
        cols = (offs[:, None] + np.arange(4)).reshape(-1)
        want[g0:g0 + 16] = src[g0:g0 + 16][:, cols]
    _exact(y, want)
    line = _line(kernel, "# gather")
    with pytest.raises(NkiValidationError, match=rf"(?s)nki_shape_mismatch.*20 indices x 4 "
                                                 rf"elements need 80.*test_simulator_fixes"
                                                 rf"\.py:{line}"):
        _jit(kernel, backend="python")(src, idx, 4, 20, 20)
