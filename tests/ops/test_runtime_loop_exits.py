"""Leaving a runtime loop's traced body early (nki/lang/tracer.py ``Trace._check_left_loops``).

A runtime loop the kernel's own ``for``/``with``/``while`` statement traces (``nl.dynamic_range``,
``while reg:``, legacy ``do_while`` and ``range(nt.scalar(t))``) runs its traced body whole on
every iteration; a ``break``/``return`` inside it while tracing would leave a partial body, so
the trace raises err_dynamic_control_flow_not_supported at the loop's line. Python loops
(``affine_range``, ``range``) keep Python's meaning, and an error raised in a body keeps its
own type. Kernels of our own against numpy, both backends."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiError

T, F = 4, 64
X = np.random.default_rng(11).standard_normal((T * 128, F)).astype(np.float32)
CODE = "err_dynamic_control_flow_not_supported"


def _count(n):
    """A register loaded from the [1, 1] int32 HBM tensor ``n`` (and its SBUF tile)."""
    sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=n)
    reg = nisa.register_alloc()
    nisa.register_load(reg, sb)
    return sb, reg


def _line(fn, marker: str) -> str:
    """``file:line`` of the line of ``fn`` that carries the comment ``marker``."""
    lines, first = inspect.getsourcelines(fn)
    line = first + next(i for i, t in enumerate(lines) if marker in t)
    return f"test_runtime_loop_exits.py:{line}"


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
    _, count = _count(n)
    for i in nl.dynamic_range(count):   # LEFT LOOP
        _add_tile(acc, x, i)
        break
    return _out(acc)


def return_dynamic(x, n):
    acc, out = _acc(), nl.ndarray((128, F), dtype=nl.float32, buffer=nl.shared_hbm)
    _, count = _count(n)
    for i in nl.dynamic_range(count):   # LEFT LOOP
        _add_tile(acc, x, i)
        return _out(acc, out)
    return _out(acc, out)


def kept_dynamic(x, n):
    """The loop's generator stays referenced after the break: Python does not close it."""
    acc, out = _acc(), nl.ndarray((128, F), dtype=nl.float32, buffer=nl.shared_hbm)
    _, count = _count(n)
    loop = nl.dynamic_range(count)      # LEFT LOOP (where the loop is made)
    for i in loop:
        _add_tile(acc, x, i)
        break
    return _out(acc, out)


def caught_dynamic(x, n):
    acc = _acc()
    _, count = _count(n)
    try:
        for i in nl.dynamic_range(count):   # LEFT LOOP
            _add_tile(acc, x, i)
            raise KeyError("stop")
    except KeyError:
        pass
    return _out(acc)


def break_while_reg(x, n):
    acc, out = _acc(), nl.ndarray((128, F), dtype=nl.float32, buffer=nl.shared_hbm)
    cnt, count = _count(n)
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
    _, count = _count(n)
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
    _, count = _count(n)
    for i in nl.dynamic_range(count):
        _add_tile(acc, x, i)
        raise ValueError("the body's own error")
    return _out(acc)


def nki_error_body(x, n):
    _, count = _count(n)
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
