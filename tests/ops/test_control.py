"""Registers and runtime loops (``fori_loop``, ``while_loop``, deprecated ``dynamic_range`` /
``while reg:``) against numpy, both backends; misuse errors name code, rule and file:line."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiError, NkiRuntimeError

T, F = 4, 64


def _count_tile(n):
    """A [1, 1] int32 SBUF tile holding the HBM scalar ``n`` and a register loaded from it."""
    sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=n)
    reg = nisa.register_alloc()
    nisa.register_load(reg, sb)
    return sb, reg


def scale_first_tiles(x, n):
    """out[:n*128] = 2 * x[:n*128], zeros elsewhere; n read at run time."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    zero = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0.0)
    for t in range(T):
        nisa.dma_copy(dst=out[t * 128:(t + 1) * 128, :], src=zero)
    _, count = _count_tile(n)

    def body(i):
        a = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[nl.ds(i * 128, 128), :])
        nisa.tensor_scalar(dst=a, data=a, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out[nl.ds(i * 128, 128), :], src=a)

    nl.fori_loop(0, count, body)
    return out


def _expect_scaled(x, n):
    out = np.zeros_like(x)
    out[:n * 128] = x[:n * 128] * np.float32(2.0)
    return out


X = np.random.default_rng(7).standard_normal((T * 128, F)).astype(np.float32)


def test_fori_loop_runs_register_count(backend):
    k = nki.jit(scale_first_tiles, backend=backend)
    for n in (3, 0, T):
        out = k(X, np.array([[n]], np.int32))
        np.testing.assert_array_equal(out, _expect_scaled(X, n))


def test_fori_loop_is_a_runtime_loop_traced_once():
    spec = nki.jit(scale_first_tiles, backend="python").specialize(X, np.array([[1]], np.int32))
    assert "range(0, R[" in spec.source
    assert "nl.fori_loop" in spec.ir and "runtime_range" in spec.ir
    # memset, the folded zero-fill loop, count DMA, register_load, then the body once
    assert spec.num_instructions == 1 + 1 + 1 + 1 + 3


def test_fori_loop_out_of_bounds_names_oob_mode_and_line(backend):
    k = nki.jit(scale_first_tiles, backend=backend)
    with pytest.raises(NkiRuntimeError, match=r"nki_runtime_out_of_bounds.*oob_mode=error.*"
                                              r"register value 4.*test_control.py:\d+"):
        k(X, np.array([[T + 1]], np.int32))


def countdown(x, n):
    """acc += x while the count (decremented in SBUF each trip) is nonzero."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    left = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    seven = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    xt = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    acc = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    cnt, cond = _count_tile(n)
    nxt = nisa.register_alloc(0)

    def body(r):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=xt, op=nl.add)
        nisa.tensor_scalar(dst=cnt, data=cnt, op0=nl.subtract, operand0=1.0)
        nisa.register_load(nxt, cnt)
        return nxt

    nl.while_loop(cond, body)
    nisa.dma_copy(dst=out, src=acc)
    nisa.register_store(left, nxt)
    r7 = nisa.register_alloc()
    nisa.register_move(r7, 7)
    nisa.register_move(nxt, r7)
    nisa.register_store(seven, nxt)
    return out, left, seven


def test_while_loop_and_register_store(backend):
    x = X[:128]
    k = nki.jit(countdown, backend=backend)
    for n in (3, 0):
        out, left, seven = k(x, np.array([[n]], np.int32))
        expect = np.zeros_like(x)
        for _ in range(n):
            expect = expect + x
        np.testing.assert_array_equal(out, expect)
        assert int(left[0, 0]) == 0 and int(seven[0, 0]) == 7


def deprecated_forms(x, n):
    """dynamic_range over a register count, then 'while reg:' doing the same again."""
    out = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    cnt, count = _count_tile(n)
    for i in nl.dynamic_range(count):
        a = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[nl.ds(i * 128, 128), :])
        nisa.tensor_tensor(dst=acc, data1=acc, data2=a, op=nl.add)
    while count:
        nisa.tensor_scalar(dst=acc, data=acc, op0=nl.multiply, operand0=2.0)
        nisa.tensor_scalar(dst=cnt, data=cnt, op0=nl.subtract, operand0=1.0)
        nisa.register_load(count, cnt)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_deprecated_dynamic_range_and_while_reg(backend):
    with pytest.warns(DeprecationWarning) as caught:
        out = nki.jit(deprecated_forms, backend=backend)(X, np.array([[3]], np.int32))
    texts = " ".join(str(w.message) for w in caught)
    assert "nl.dynamic_range is deprecated" in texts and "'while reg:' is deprecated" in texts
    expect = (X[:128] + X[128:256] + X[256:384]) * np.float32(8.0)
    np.testing.assert_array_equal(out, expect)


def block_copy(x, n):
    """SBUF dynamic offsets: block i of a [128, T, 8] tile via .ap(scalar_offset=reg) and via
    a one-element tile as scalar_offset; HBM dynamic select."""
    out = nl.ndarray((128, T * 8), dtype=x.dtype, buffer=nl.shared_hbm)
    first = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, T, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[0].reshape((128, T, 8)))
    cnt, count = _count_tile(n)

    def body(i):
        b = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=b, src=t.ap([[T * 8, 128], [1, 8]], 0, scalar_offset=i,
                                        indirect_dim=1))
        nisa.dma_copy(dst=out[:, nl.ds(i * 8, 8)], src=b)

    nl.fori_loop(0, count, body)
    b0 = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=cnt, value=1)
    nisa.tensor_copy(dst=b0, src=t.ap([[T * 8, 128], [1, 8]], 0, scalar_offset=cnt,
                                      indirect_dim=1))
    nisa.dma_copy(dst=first, src=b0)
    return out, first


def test_scalar_offset_on_sbuf(backend):
    x = np.arange(2 * 128 * T * 8, dtype=np.float32).reshape(2, 128, T * 8)
    out, first = nki.jit(block_copy, backend=backend)(x, np.array([[T]], np.int32))
    np.testing.assert_array_equal(out, x[0])
    np.testing.assert_array_equal(first, x[0][:, 8:16])


def select_rows(x, n):
    out = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.shared_hbm)
    _, r = _count_tile(n)
    nisa.dma_copy(dst=out, src=x.select(0, r))
    return out


def test_dynamic_select_on_hbm(backend):
    x = X.reshape(T, 128, F)
    out = nki.jit(select_rows, backend=backend)(x, np.array([[2]], np.int32))
    np.testing.assert_array_equal(out, x[2])


# ----- misuse: trace-time errors (no compile) ------------------------------------------------
def _raises(fn, code, *args):
    with pytest.raises(NkiError, match=r"(?s)" + code + r".*test_control.py:\d+"):
        nki.jit(fn, backend="python")(*args)


N1 = np.array([[1]], np.int32)


def test_if_on_register_is_rejected():
    def k(x, n):
        _, r = _count_tile(n)
        out = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.shared_hbm)
        if r:
            nisa.dma_copy(dst=out, src=x[0:128, :])
        return out

    _raises(k, r"err_dynamic_control_flow_not_supported\].*outside a 'while' loop", X, N1)


def test_register_load_needs_an_integer_element():
    def k(x):
        t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=1.0)
        nisa.register_load(nisa.register_alloc(), t)

    _raises(k, r"nki_dtype_mismatch\].*register_load.*integer", X)


def test_fori_loop_step_must_be_positive():
    def k(x):
        nl.fori_loop(0, 4, lambda i: None, step=0)

    _raises(k, r"nki_invalid_argument\].*step must be a positive", X)


def test_while_loop_body_must_return_a_register():
    def k(x, n):
        _, r = _count_tile(n)
        nl.while_loop(r, lambda c: 0)

    _raises(k, r"nki_invalid_argument\].*next loop condition", X, N1)


def test_register_cannot_index_partitions():
    def k(x, n):
        _, r = _count_tile(n)
        t = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0.0)
        t[nl.ds(r, 1), :]

    _raises(k, r"nki_invalid_view\].*partition dim", X, N1)


def test_register_is_not_a_python_int():
    def k(x, n):
        _, r = _count_tile(n)
        for _ in range(r):
            pass

    _raises(k, r"err_dynamic_control_flow_not_supported\].*run-time value", X, N1)


def skip_tile(x, n):
    """Copy tile n of x; with oob_mode.skip an out-of-range n leaves the -1 fill."""
    out = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=t, value=-1.0)
    _, r = _count_tile(n)
    nisa.dma_copy(dst=t, src=x[nl.ds(r * 128, 128), :], oob_mode=nisa.oob_mode.skip)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_register_offset_with_oob_skip(backend):
    k = nki.jit(skip_tile, backend=backend)
    np.testing.assert_array_equal(k(X, np.array([[1]], np.int32)), X[128:256])
    np.testing.assert_array_equal(k(X, np.array([[T]], np.int32)), np.full((128, F), -1.0,
                                                                           np.float32))


def test_shared_hbm_inside_runtime_loop_is_rejected():
    def k(x, n):
        _, r = _count_tile(n)
        nl.fori_loop(0, r, lambda i: nl.ndarray((128, F), dtype=x.dtype,
                                                 buffer=nl.shared_hbm))

    _raises(k, r"err_shared_hbm_must_in_kernel_level", X, N1)


def nested(x, n):
    """Nested runtime loops: acc += x tile i, twice per outer trip (inner fori_loop)."""
    out = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    _, count = _count_tile(n)

    def outer(i):
        def inner(j):
            a = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=x[i])
            nisa.tensor_tensor(dst=acc, data1=acc, data2=a, op=nl.add)
        nl.fori_loop(0, 2, inner)

    nl.fori_loop(0, count, outer)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_nested_runtime_loops(backend):
    x = X.reshape(T, 128, F)
    out = nki.jit(nested, backend=backend)(x, np.array([[3]], np.int32))
    expect = np.zeros((128, F), np.float32)
    for i in range(3):
        expect = expect + x[i]
        expect = expect + x[i]
    np.testing.assert_array_equal(out, expect)


def _many_runtime_loops(x, n_loops):
    """One nl.fori_loop per output row, each adding 1.0 row+1 times: n_loops registers."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    row = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    for r in range(n_loops):
        nisa.dma_copy(dst=row, src=x[r:r + 1, :])
        nl.fori_loop(0, r + 1, lambda i: nisa.tensor_scalar(dst=row, data=row, op0=nl.add,
                                                            operand0=1.0))
        nisa.dma_copy(dst=out[r:r + 1, :], src=row)
    return out


def test_hundreds_of_virtual_registers(backend):
    """NKI's registers are virtual: nki-library's context-parallel attention allocates more
    than 128 (one per runtime loop here: 300)."""
    x = np.random.default_rng(3).standard_normal((300, 8)).astype(np.float32)
    out = nki.jit(_many_runtime_loops, backend=backend)(x, 300)
    expect = x.copy()
    for r in range(300):                      # r + 1 fp32 additions of 1.0, rounded each time
        for _ in range(r + 1):
            expect[r] += np.float32(1.0)
    np.testing.assert_array_equal(out, expect)


def test_register_limit_matches_the_register_file():
    from nki.lang.control import MAX_REGISTERS
    from nki.sim.emit.control import NUM_REGS
    from nki.sim.record import RECORD_REGS

    assert MAX_REGISTERS == NUM_REGS - RECORD_REGS     # the top slots hold the run record
