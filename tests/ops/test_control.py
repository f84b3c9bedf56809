"""Registers and runtime loops (``fori_loop``, ``while_loop``, deprecated ``dynamic_range`` /
``while reg:``) against numpy, both backends; misuse errors name code, rule and file:line;
a break/return out of a runtime loop's traced body raises at the loop's line."""

from __future__ import annotations

import inspect

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


# ----- leaving a runtime loop's traced body early ---------------------------------------------
# A runtime loop the kernel's own for/with/while statement traces (nl.dynamic_range, 'while
# reg:', legacy do_while) runs its traced body whole on every iteration; a break/return in it
# while tracing would leave a partial body, so the trace raises at the loop's line
# (nki/lang/tracer.py Trace._check_left_loops). Python loops keep Python's meaning, and an
# error raised in a body keeps its own type.
CODE = "err_dynamic_control_flow_not_supported"


def _line(fn, marker: str) -> str:
    """``file:line`` of the line of ``fn`` that carries the comment ``marker``."""
    lines, first = inspect.getsourcelines(fn)
    line = first + next(i for i, t in enumerate(lines) if marker in t)
    return f"test_control.py:{line}"


def _left(fn, backend, *args, marker: str = "LEFT LOOP") -> NkiError:
    """Trace ``fn`` and assert it raises the left-loop error at its ``marker`` line."""
    with pytest.raises(NkiError) as e:
        nki.jit(fn, backend=backend)(*args)
    assert e.value.code == CODE, e.value
    assert "not traced whole" in str(e.value)
    assert _line(fn, marker) in str(e.value)
    return e.value


def _add_tile(acc, x, i):
    a = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x[nl.ds(i * 128, 128), :])
    nisa.tensor_tensor(dst=acc, data1=acc, data2=a, op=nl.add)


def _acc():
    acc = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    return acc


def _out(acc, out=None):
    if out is None:
        out = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


def break_dynamic(x, n):
    acc = _acc()
    _, count = _count_tile(n)
    for i in nl.dynamic_range(count):   # LEFT LOOP
        _add_tile(acc, x, i)
        break
    return _out(acc)


def return_dynamic(x, n):
    acc, out = _acc(), nl.ndarray((128, F), dtype=nl.float32, buffer=nl.shared_hbm)
    _, count = _count_tile(n)
    for i in nl.dynamic_range(count):   # LEFT LOOP
        _add_tile(acc, x, i)
        return _out(acc, out)
    return _out(acc, out)


def kept_dynamic(x, n):
    """The loop's generator stays referenced after the break: Python does not close it."""
    acc, out = _acc(), nl.ndarray((128, F), dtype=nl.float32, buffer=nl.shared_hbm)
    _, count = _count_tile(n)
    loop = nl.dynamic_range(count)      # LEFT LOOP (where the loop is made)
    for i in loop:
        _add_tile(acc, x, i)
        break
    return _out(acc, out)


def caught_dynamic(x, n):
    acc = _acc()
    _, count = _count_tile(n)
    try:
        for i in nl.dynamic_range(count):   # LEFT LOOP
            _add_tile(acc, x, i)
            raise KeyError("stop")
    except KeyError:
        pass
    return _out(acc)


def break_while_reg(x, n):
    acc, out = _acc(), nl.ndarray((128, F), dtype=nl.float32, buffer=nl.shared_hbm)
    cnt, count = _count_tile(n)
    while count:                        # LEFT LOOP
        nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1.0)
        nisa.tensor_scalar(dst=cnt, data=cnt, op0=nl.subtract, operand0=1.0)
        nisa.register_load(count, cnt)
        break
    return _out(acc, out)


N3 = np.array([[3]], np.int32)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("kernel", [break_dynamic, return_dynamic, kept_dynamic,
                                    caught_dynamic])
def test_leaving_dynamic_range_raises_at_its_line(kernel, backend):
    err = _left(kernel, backend, X, N3)
    assert "nl.dynamic_range" in str(err)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_break_out_of_while_reg_raises_at_its_line(backend):
    assert "while reg" in str(_left(break_while_reg, backend, X, N3))


def first_tiles_with_python_breaks(x, n):
    """Sum of tiles 0..n-1 (runtime loop); inside the body an affine_range whose Python
    break stops it after one pass, and a top-level affine_range left by a break too."""
    acc = _acc()
    _, count = _count_tile(n)
    for i in nl.dynamic_range(count):
        for _ in nl.affine_range(3):        # a Python loop: break keeps Python's meaning
            _add_tile(acc, x, i)
            break
    for t in nl.affine_range(T):
        if t == 1:
            break
        _add_tile(acc, x, t)                # tile 0 once more
    return _out(acc)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_runtime_loop_with_python_breaks_matches_numpy(backend):
    k = nki.jit(first_tiles_with_python_breaks, backend=backend)
    tiles = X.reshape(T, 128, F)
    for n in (3, 0, T):
        out = k(X, np.array([[n]], np.int32))
        np.testing.assert_allclose(out, tiles[:n].sum(axis=0) + tiles[0], rtol=1e-6, atol=1e-6)


def raising_body(x, n):
    acc = _acc()
    _, count = _count_tile(n)
    for i in nl.dynamic_range(count):
        _add_tile(acc, x, i)
        raise ValueError("the body's own error")
    return _out(acc)


def nki_error_body(x, n):
    _, count = _count_tile(n)
    for _ in nl.dynamic_range(count):
        nl.fori_loop(0, 4, lambda i: None, step=0)      # BODY ERROR


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_an_error_in_the_body_keeps_its_own_type(backend):
    with pytest.raises(ValueError, match="the body's own error"):
        nki.jit(raising_body, backend=backend)(X, N3)
    with pytest.raises(NkiError) as e:
        nki.jit(nki_error_body, backend=backend)(X, N3)
    assert e.value.code == "nki_invalid_argument"
    assert _line(nki_error_body, "BODY ERROR") in str(e.value)


# ----- legacy do_while (a 'with' block) -------------------------------------------------------
def _legacy_do_while_kernels():
    import neuronxcc.nki.language as lnl
    from neuronxcc.nki._private.private_api import do_while

    def body(x, acc, cond):
        acc[...] = lnl.add(acc, lnl.load(x))
        lnl.store(dst=cond[0], value=lnl.zeros((1, 1), dtype=np.uint8)[0, 0])

    def setup(x):
        out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
        acc = lnl.zeros(x.shape, dtype=lnl.float32)
        cond = lnl.ndarray((1, 1), buffer=lnl.hbm, dtype=np.uint8)
        lnl.store(dst=cond[0], value=lnl.zeros((1, 1), dtype=np.uint8)[0, 0])
        return out, acc, cond

    def do_while_break(x):
        out, acc, cond = setup(x)
        for _ in range(2):
            with do_while(cond):            # LEFT LOOP
                acc[...] = lnl.add(acc, lnl.load(x))
                break
        lnl.store(out, value=acc)
        return out

    def do_while_return(x):
        out, acc, cond = setup(x)
        with do_while(cond):                # LEFT LOOP
            acc[...] = lnl.add(acc, lnl.load(x))
            lnl.store(out, value=acc)
            return out

    def do_while_whole(x):
        out, acc, cond = setup(x)
        for _ in range(2):                  # a Python loop around two whole do_while blocks
            with do_while(cond):
                if x.shape[0] == 128:       # a trace-time branch inside the body
                    body(x, acc, cond)
                else:
                    body(x, acc, cond)
                if x.shape[0] != 128:       # an exit not taken: the block still ends whole
                    break
        lnl.store(out, value=acc)
        return out

    def do_while_continue(x):
        out, acc, cond = setup(x)
        for _ in range(2):
            with do_while(cond):            # LEFT LOOP
                acc[...] = lnl.add(acc, lnl.load(x))
                if x.shape[0] == 128:
                    continue
                body(x, acc, cond)
        lnl.store(out, value=acc)
        return out

    return do_while_break, do_while_return, do_while_continue, do_while_whole


def test_leaving_do_while_raises_at_its_line(backend):
    import neuronxcc.nki as lnki

    x = X[:128, :8].copy()
    *left, whole = _legacy_do_while_kernels()
    for k in left:
        with pytest.raises(NkiError) as e:
            lnki.jit(k, backend=backend)(x)
        assert e.value.code == CODE and "'do_while'" in str(e.value)
        assert _line(k, "LEFT LOOP") in str(e.value)
    out = lnki.jit(whole, backend=backend)(x)
    np.testing.assert_allclose(out, 2 * x, rtol=1e-6)      # one pass each: the flag is 0
