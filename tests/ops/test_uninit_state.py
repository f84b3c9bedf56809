"""Engine accumulators and registers read before anything wrote them (issue 14 §3).

Each legal idiom below is written the way nki-library's kernels use it (rmsnorm's
``activation_reduce`` sum of squares, the softmax ``activation(..., reduce_cmd=reset_reduce)``
row sum, quantization's ``tensor_scalar_reduce`` absmax, attention's ``range_select`` max,
MoE's ``register_alloc()`` + ``register_load`` loop conditions) and must stay quiet; each
illegal one must warn naming this file's line and suggesting ``reset_reduce``, and raise
under ``check_uninit=True``. Values are checked against numpy, in both backends.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiRuntimeError, NkiUninitializedRegisterWarning, NkiValidationError

HERE = r"test_uninit_state\.py:\d+"
RNG = np.random.default_rng(14)
X = RNG.uniform(-2, 2, (128, 48)).astype(np.float32)


def _load(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _col(rows: int):
    return nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)


def _out(t):
    o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o, src=t)
    return o


def _quiet(kernel, *args, backend, **kw):
    """Run with accumulator/register warnings as errors: legal code must not warn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", NkiUninitializedRegisterWarning)
        return nki.jit(kernel, backend=backend, **kw)(*args)


def _warns(kernel, *args, backend, lanes: str | None = None):
    """Run; exactly the uninitialized-state warning(s), naming this file's line."""
    with pytest.warns(NkiUninitializedRegisterWarning) as caught:
        result = nki.jit(kernel, backend=backend)(*args)
    msgs = [str(w.message) for w in caught if w.category is NkiUninitializedRegisterWarning]
    assert all(re.search(HERE, m) for m in msgs), msgs
    assert all(w.filename.endswith("test_uninit_state.py") for w in caught
               if w.category is NkiUninitializedRegisterWarning)
    if lanes is not None:
        assert any(f"partitions {lanes}," in m for m in msgs), msgs
    return result, msgs


# ----- ScalarE reduce registers -------------------------------------------------------------
def rowsum_idle(x):
    """The issue's mistake: reduce_res under the default reduce_cmd=idle reads the registers
    as they were, which nothing in this kernel set."""
    t, y, s = _load(x), nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf), _col(128)
    nisa.activation(dst=y, op=nl.exp, data=t, reduce_op=nl.add, reduce_res=s)
    return _out(s)


def rowsum_reset_reduce(x):
    """router_topk's softmax denominator: the sum starts with reset_reduce."""
    t, y, s = _load(x), nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf), _col(128)
    nisa.activation(dst=y, op=nl.exp, data=t, reduce_op=nl.add, reduce_res=s,
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    return _out(s)


def test_idle_read_of_fresh_registers_warns_and_reads_zero(backend):
    s, msgs = _warns(rowsum_idle, X, backend=backend, lanes="0-127")
    assert "reset_reduce" in msgs[0] and "Scalar Engine" in msgs[0]
    np.testing.assert_array_equal(s[:, 0], np.zeros(128, np.float32))   # our documented 0


def test_idle_read_is_an_error_with_check_uninit(backend):
    k = nki.jit(rowsum_idle, backend=backend, check_uninit=True)
    with pytest.raises(NkiRuntimeError, match=r"nki_uninitialized_register[\s\S]*reset_reduce"
                       r"[\s\S]*at " + HERE):
        k(X)


def test_check_uninit_from_the_environment(backend, monkeypatch):
    monkeypatch.setenv("NKI_CHECK_UNINIT", "1")
    with pytest.raises(NkiRuntimeError, match="nki_uninitialized_register"):
        nki.jit(rowsum_idle, backend=backend)(X)


def test_reset_reduce_row_sum_is_quiet(backend):
    s = _quiet(rowsum_reset_reduce, X, backend=backend)
    np.testing.assert_allclose(s[:, 0], np.exp(X.astype(np.float64)).sum(1), rtol=1e-5)


def sum_of_squares(x):
    """rmsnorm's idiom: activation_reduce (reset_reduce + read-out), then a chain kept in the
    registers (reduce_res=None) whose last call reads it out under idle."""
    t, y = _load(x), nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    s, total = _col(128), _col(128)
    nisa.activation_reduce(dst=y, op=nl.square, data=t, reduce_op=nl.add, reduce_res=s)
    nisa.activation(dst=y, op=nl.copy, data=t, reduce_op=nl.add,
                    reduce_cmd=nisa.reduce_cmd.reduce)
    nisa.activation(dst=y, op=nl.copy, data=t, reduce_res=total)      # idle read-out
    return _out(s), _out(total)


def test_chained_sums_are_quiet(backend):
    s, total = _quiet(sum_of_squares, X, backend=backend)
    x = X.astype(np.float64)
    np.testing.assert_allclose(s[:, 0], (x * x).sum(1), rtol=1e-5)
    np.testing.assert_allclose(total[:, 0], (x * x).sum(1) + x.sum(1), rtol=1e-5, atol=1e-4)


def reduce_first(x):
    t, y, s = _load(x), nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf), _col(128)
    nisa.activation(dst=y, op=nl.copy, data=t, reduce_op=nl.add, reduce_res=s,
                    reduce_cmd=nisa.reduce_cmd.reduce)
    return _out(s)


def test_reduce_onto_fresh_registers_warns(backend):
    s, _ = _warns(reduce_first, X, backend=backend, lanes="0-127")
    np.testing.assert_allclose(s[:, 0], X.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


def tiles_reset_in_earlier_iteration(x):
    """Per lane: an earlier iteration reset partitions 0-63 only; the idle read of all 128
    partitions after the loop reads 64-127 unset."""
    t, y, s = _load(x), nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf), _col(128)
    for i in range(2):
        if i == 0:
            nisa.activation(dst=y[0:64], op=nl.copy, data=t[0:64], reduce_op=nl.add,
                            reduce_cmd=nisa.reduce_cmd.reset_reduce)
        else:
            nisa.activation(dst=y[0:64], op=nl.copy, data=t[0:64], reduce_op=nl.add,
                            reduce_cmd=nisa.reduce_cmd.reduce)
    nisa.activation(dst=y, op=nl.copy, data=t, reduce_res=s)
    return _out(s)


def test_reads_are_checked_per_lane(backend):
    s, msgs = _warns(tiles_reset_in_earlier_iteration, X, backend=backend, lanes="64-127")
    assert len(msgs) == 1
    np.testing.assert_allclose(s[:64, 0], 2 * X[:64].astype(np.float64).sum(1), rtol=1e-5,
                               atol=1e-5)


def reset_inside_runtime_loop(x, n):
    """A reset that only a runtime loop's body runs: whether the idle read after the loop
    is legal depends on the trip count, known at run time."""
    t, y, s = _load(x), nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf), _col(128)
    nsb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=nsb, src=n)
    count = nisa.register_alloc()
    nisa.register_load(count, nsb)

    def body(i):
        nisa.activation(dst=y, op=nl.copy, data=t, reduce_op=nl.add,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)

    nl.fori_loop(0, count, body)
    nisa.activation(dst=y, op=nl.copy, data=t, reduce_res=s)
    return _out(s)


def test_runtime_trip_count_decides(backend):
    k = nki.jit(reset_inside_runtime_loop, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NkiUninitializedRegisterWarning)
        s = k(X, np.array([[2]], np.int32))
    np.testing.assert_allclose(s[:, 0], X.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
    with pytest.warns(NkiUninitializedRegisterWarning, match=HERE):
        k(X, np.array([[0]], np.int32))


# ----- VectorE accumulators ---------------------------------------------------------------
def absmax_default(x):
    """Quantization's absmax: tensor_scalar_reduce under its default reset_reduce."""
    t, a, m = _load(x), nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf), _col(128)
    nisa.tensor_scalar_reduce(dst=a, data=t, op0=nl.abs, operand0=0.0, reduce_op=nl.maximum,
                              reduce_res=m)
    return _out(m)


def test_tensor_scalar_reduce_default_is_quiet(backend):
    m = _quiet(absmax_default, X, backend=backend)
    np.testing.assert_array_equal(m[:, 0], np.abs(X).max(1))


def tsr_reduce_first(x):
    t, a, m = _load(x), nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf), _col(128)
    nisa.tensor_scalar_reduce(dst=a, data=t, op0=nl.multiply, operand0=1.0, reduce_op=nl.add,
                              reduce_res=m, reduce_cmd=nisa.reduce_cmd.reduce)
    return _out(m)


def test_tensor_scalar_reduce_onto_fresh_accumulators_warns(backend):
    _, msgs = _warns(tsr_reduce_first, X, backend=backend, lanes="0-127")
    assert "Vector Engine" in msgs[0]


def range_select_max(x):
    """Attention's masked row max: range_select with reset_reduce, then a tensor_scalar_reduce
    continuing the max (reduce) over another tile."""
    t, y, a, m = _load(x), nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf), \
        nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf), _col(128)
    lo, hi = _col(128), _col(128)
    nisa.memset(dst=lo, value=0.0)
    nisa.memset(dst=hi, value=float(x.shape[1] // 2))
    nisa.range_select(dst=y, on_true_tile=t, comp_op0=nl.greater_equal, comp_op1=nl.less,
                      bound0=lo, bound1=hi, reduce_op=nl.maximum, reduce_res=None,
                      reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.tensor_scalar_reduce(dst=a, data=t, op0=nl.multiply, operand0=-1.0,
                              reduce_op=nl.maximum, reduce_res=m,
                              reduce_cmd=nisa.reduce_cmd.reduce)
    return _out(m)


def test_range_select_then_reduce_is_quiet(backend):
    m = _quiet(range_select_max, X, backend=backend)
    half = X.shape[1] // 2
    np.testing.assert_array_equal(m[:, 0], np.maximum(X[:, :half].max(1), (-X).max(1)))


def select_idle_then_reduce(x):
    """AWS: an idle select_reduce "may still modify" the Vector accumulators, so a reduce
    continuing an earlier reset_reduce across it reads undefined values."""
    t, a, y, m = _load(x), nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf), \
        nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf), _col(128)
    pred = nl.ndarray(x.shape, dtype=nl.uint8, buffer=nl.sbuf)
    nisa.memset(dst=pred, value=1)
    nisa.tensor_scalar_reduce(dst=a, data=t, op0=nl.multiply, operand0=1.0, reduce_op=nl.add,
                              reduce_res=None)
    nisa.select_reduce(dst=y, predicate=pred, on_true=t, on_false=0.0)
    nisa.tensor_scalar_reduce(dst=a, data=t, op0=nl.multiply, operand0=1.0, reduce_op=nl.add,
                              reduce_res=m, reduce_cmd=nisa.reduce_cmd.reduce)
    return _out(m)


def test_idle_vector_instruction_leaves_accumulators_undefined(backend):
    _warns(select_idle_then_reduce, X, backend=backend, lanes="0-127")


def exp_sum_chain(x, cmd):
    t, e, s = _load(x), nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf), _col(128)
    nisa.exponential(dst=e, src=t, max_value=0.0, reduce_res=s, reduce_cmd=cmd)
    return _out(s)


@pytest.mark.parametrize("cmd", ["reset_reduce", "reduce"])
def test_exponential_sum(backend, cmd):
    def kernel(x):
        return exp_sum_chain(x, getattr(nisa.reduce_cmd, cmd))
    expect = np.exp(X.astype(np.float64)).sum(1)
    if cmd == "reset_reduce":
        s = _quiet(kernel, X, backend=backend)
    else:
        s, _ = _warns(kernel, X, backend=backend, lanes="0-127")
    np.testing.assert_allclose(s[:, 0], expect, rtol=1e-5)


def cumulative(x, cmd):
    t, c = _load(x), nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_cumulative(dst=c, src=t, op0=nl.multiply, op1=nl.add, imm0=1.0,
                                  reduce_cmd=cmd)
    return _out(c)


@pytest.mark.parametrize("cmd", ["reset_reduce", "reduce"])
def test_tensor_scalar_cumulative_start(backend, cmd):
    def kernel(x):
        return cumulative(x, getattr(nisa.reduce_cmd, cmd))
    expect = np.add.accumulate(X, axis=1, dtype=np.float32)
    if cmd == "reset_reduce":
        c = _quiet(kernel, X, backend=backend)
    else:
        c, _ = _warns(kernel, X, backend=backend, lanes="0-127")
    np.testing.assert_array_equal(c, expect)


def activate2_readout(x, reset_first):
    t, y, s = _load(x), nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf), _col(128)
    if reset_first:
        nisa.activate2(dst=y, op=nl.copy, data=t, imm0=1.0, imm1=0.0, op0=nl.multiply,
                       op1=nl.add, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.activate2(dst=y, op=nl.copy, data=t, imm0=1.0, imm1=0.0, op0=nl.multiply, op1=nl.add,
                   reduce_op=nl.add, reduce_res=s)      # idle: reads the registers out
    return _out(s)


def activate2_after_reset(x):
    return activate2_readout(x, True)


def activate2_fresh(x):
    return activate2_readout(x, False)


def test_activate2_idle_reads_the_registers_out(backend):
    s = _quiet(activate2_after_reset, X, backend=backend)
    np.testing.assert_allclose(s[:, 0], X.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
    _warns(activate2_fresh, X, backend=backend, lanes="0-127")


# ----- nisa.register_* registers ------------------------------------------------------------
def register_loop(x, n, load):
    """MoE's loop condition idiom: register_alloc() then register_load from SBUF."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = _load(x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=0.0)
    nisa.dma_copy(dst=out, src=t)
    nsb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=nsb, src=n)
    count = nisa.register_alloc()
    if load:
        nisa.register_load(count, nsb)
    a = _load(x)
    nl.fori_loop(0, count, lambda i: nisa.dma_copy(dst=out, src=a))
    return out


def loop_loaded(x, n):
    return register_loop(x, n, True)


def loop_unloaded(x, n):
    return register_loop(x, n, False)


def test_loaded_register_bounds_a_loop_quietly(backend):
    out = _quiet(loop_loaded, X, np.array([[1]], np.int32), backend=backend)
    np.testing.assert_array_equal(out, X)


def test_loop_bound_from_unwritten_register_warns(backend):
    out, msgs = _warns(loop_unloaded, X, np.array([[1]], np.int32), backend=backend)
    assert "register_alloc" in msgs[0] and "upper bound" in msgs[0]
    np.testing.assert_array_equal(out, np.zeros_like(X))   # 0 trips: the register reads 0


def test_loop_bound_from_unwritten_register_is_an_error_when_checked(backend):
    k = nki.jit(loop_unloaded, backend=backend, check_uninit=True)
    with pytest.raises(NkiValidationError, match=r"nki_uninitialized_register[\s\S]*"
                       r"nl.fori_loop[\s\S]*at " + HERE):
        k(X, np.array([[1]], np.int32))


def register_store_kernel(x, init):
    out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    r = nisa.register_alloc(init)
    copy = nisa.register_alloc(r)          # register_move from r
    nisa.register_store(sb, copy)
    nisa.dma_copy(dst=out, src=sb)
    return out


def store_seven(x):
    return register_store_kernel(x, 7)


def store_unset(x):
    return register_store_kernel(x, None)


def test_register_with_value_is_quiet(backend):
    out = _quiet(store_seven, X, backend=backend)
    assert out[0, 0] == 7


def test_register_copy_of_unwritten_register_warns(backend):
    out, msgs = _warns(store_unset, X, backend=backend)
    # the copy's read of r warns; the copy itself then counts as written (one warning)
    assert len(msgs) == 1 and "nisa.register_alloc reads register r0" in msgs[0]
    assert out[0, 0] == 0
