"""activate2, exponential, tensor_scalar_cumulative, sequence_bounds, nonzero_with_count,
topk (bf16 snake layout), nl.device_print (captured stdout), nl.no_reorder, kernel.with_schedule and
NkiInstruction.depends_on; both backends against numpy, rule errors with code and
file:line."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiValidationError
from nki.ir.nodes import Dependency, NkiInstruction
from nki.sim.emit.misc import reference_nonzero_with_count, reference_sequence_bounds

RNG = np.random.default_rng(5)


def _jit(kernel, **options):
    return nki.jit(kernel, cache=False, **options)


def _sbuf(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _out(t):
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def _new(like, shape=None, dtype=None):
    return nl.ndarray(shape or like.shape, dtype=dtype or like.dtype, buffer=nl.sbuf)


def _activate2(x):
    t = _sbuf(x)
    y, z = _new(t), _new(t)
    m = _new(t, (t.shape[0], 1))
    nisa.activate2(dst=y, op=nl.relu, data=t, imm0=2.0, op0=nl.multiply, imm1=1.0,
                   op1=nl.subtract, reduce_op=nl.maximum, reduce_res=m,
                   reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.activate2(dst=z, op=nl.prelu, data=t, imm0=1.0, op0=nl.multiply, relu_param=0.25)
    return _out(y), _out(z), _out(m)


def test_activate2(backend):
    x = RNG.standard_normal((64, 48)).astype(np.float32)
    y, z, m = _jit(_activate2, backend=backend)(x)
    expect = np.maximum(x * np.float32(2) - np.float32(1), 0)
    np.testing.assert_array_equal(y, expect)
    np.testing.assert_array_equal(m[:, 0], expect.max(axis=1))
    np.testing.assert_array_equal(z, np.where(x > 0, x, x * np.float32(0.25)))


def _exponential(x):
    t = _sbuf(x)
    mx = _new(t, (t.shape[0], 1))
    nisa.tensor_reduce(dst=mx, op=nl.maximum, data=t, axis=1)
    e, s = _new(t), _new(t, (t.shape[0], 1))
    nisa.exponential(dst=e, src=t, max_value=mx, reduce_res=s,
                     reduce_cmd=nisa.reduce_cmd.reset_reduce)
    return _out(e), _out(s)


def test_exponential(backend):
    x = RNG.standard_normal((32, 100)).astype(np.float32) * 4
    e, s = _jit(_exponential, backend=backend)(x)
    expect = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(e, expect, rtol=2e-6)
    np.testing.assert_allclose(s[:, 0], expect.sum(axis=1), rtol=1e-5)


def _cumulative(x):
    t = _sbuf(x)
    c = _new(t)
    nisa.tensor_scalar_cumulative(dst=c, src=t, op0=nl.multiply, op1=nl.add, imm0=2.0)
    return _out(c)


def test_tensor_scalar_cumulative(backend):
    x = RNG.standard_normal((16, 40)).astype(np.float32)
    c = _jit(_cumulative, backend=backend)(x)
    np.testing.assert_array_equal(c, np.add.accumulate(x * np.float32(2), axis=1,
                                                       dtype=np.float32))


def _gpsimd(ids, data):
    i = _sbuf(ids)
    b = nl.ndarray((1, 2, ids.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.sequence_bounds(dst=b, segment_ids=i)
    d = _sbuf(data)
    nz = _new(d, (d.shape[0], d.shape[1] + 1), nl.int32)
    nisa.memset(dst=nz, value=7)
    nisa.nonzero_with_count(dst=nz, src=d, index_offset=10, padding_val=-1)
    return _out(b), _out(nz)


def test_gpsimd_sequence_bounds_nonzero(backend):
    ids = np.array([[1, 1, 2, 2, 2, 0, 0, 3, 1, 1]], np.float32)
    data = (RNG.random((32, 12)) < 0.3).astype(np.float32)
    b, nz = _jit(_gpsimd, backend=backend)(ids, data)
    np.testing.assert_array_equal(b[0], reference_sequence_bounds(ids))
    for p in range(32):
        expect = reference_nonzero_with_count(data[p], 10, -1) if p % 16 == 0 else 7
        np.testing.assert_array_equal(nz[p], expect)


# ----- topk: one top-K per group of 16 partitions, read and written as a bf16 snake ---------
def _topk_np(scores, n, k, val0, idx0):
    """Independent oracle (Python loops): snake position s of the group at g is
    scores[g + s % 16, s // 16]; the top k (largest, lower position first on ties) land
    ascending at the snake places [g + j % 16, j // 16]."""
    vals, idx = val0.copy(), idx0.copy()
    for g in range(0, scores.shape[0], 16):
        snake = [(float(scores[g + s % 16, s // 16]), s) for s in range(n)]
        best = sorted(snake, key=lambda e: (-e[0], e[1]))[:k]
        for j, (_, s) in enumerate(reversed(best)):
            vals[g + j % 16, j // 16] = scores[g + s % 16, s // 16]
            idx[g + j % 16, j // 16] = s
    return vals, idx


def _topk_kernel(n, k, sorted_=False):
    def kernel(scores):
        s = _sbuf(scores)
        v = _new(s, (s.shape[0], k))
        i = _new(s, (s.shape[0], k), nl.uint32)
        nisa.memset(dst=v, value=-7.0)                 # untouched places keep these
        nisa.memset(dst=i, value=99999)
        nisa.topk(val_dst=v, idx_dst=i, src=s, n=n, sorted=sorted_)
        return _out(v), _out(i)
    return kernel


@pytest.mark.parametrize("n,k", [(8, 1), (100, 20), (160, 37), (37, 37)])
def test_topk_reads_and_writes_the_16_partition_snake(backend, n, k):
    bf16 = ml_dtypes.bfloat16
    scores = RNG.standard_normal((48, 12)).astype(bf16)          # 3 independent groups
    v, i = _jit(_topk_kernel(n, k), backend=backend)(scores)
    ev, ei = _topk_np(scores, n, k, np.full((48, k), -7.0, bf16),
                      np.full((48, k), 99999, np.uint32))
    np.testing.assert_array_equal(v.view(np.uint16), ev.view(np.uint16))
    np.testing.assert_array_equal(i, ei)
    j = np.arange(k)
    got = v[16 + j % 16, j // 16].astype(np.float32)             # group 1's results
    assert np.all(np.diff(got) >= 0)                            # ascending
    group = scores[16:32].astype(np.float32).flatten(order="F")[:n]
    np.testing.assert_array_equal(np.sort(got), np.sort(group)[::-1][:k][::-1])


def test_topk_ties_pick_lower_snake_positions(backend):
    bf16 = ml_dtypes.bfloat16
    scores = np.zeros((16, 4), bf16)
    scores[3, 1] = scores[5, 0] = 2.0                  # positions 19 and 5
    v, i = _jit(_topk_kernel(64, 3), backend=backend)(scores)
    # the top 3: 2.0 (5), 2.0 (19), then the first zero (position 0); ascending
    np.testing.assert_array_equal(i[0:3, 0], [0, 19, 5])
    np.testing.assert_array_equal(v[0:3, 0].astype(np.float32), [0.0, 2.0, 2.0])


@pytest.mark.parametrize("kw,code", [
    ({"dtype": np.float32}, r"nki_dtype_mismatch\].*src must be bfloat16"),
    ({"rows": 24}, r"nki_shape_mismatch\].*whole groups of 16"),
    ({"n": 7}, r"nki_invalid_argument\].*n=7"),
    ({"n": 65}, r"nki_shape_mismatch\].*ceil\(n / 16\) = 5.*has 4"),
    ({"k": 9, "n": 8}, r"nki_shape_mismatch\].*K = val_dst's 9"),
])
def test_topk_rules(kw, code):
    rows, dtype = kw.get("rows", 16), kw.get("dtype", ml_dtypes.bfloat16)

    def k(x):
        v = nl.ndarray((rows, kw.get("k", 4)), dtype=nl.bfloat16, buffer=nl.sbuf)
        i = nl.ndarray((rows, kw.get("k", 4)), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.topk(val_dst=v, idx_dst=i, src=_sbuf(x), n=kw.get("n", 32))
        return x

    with pytest.raises(NkiValidationError, match=r"(?s)" + code + r".*test_misc_isa\.py:\d+"):
        _jit(k, backend="python")(np.ones((rows, 4), dtype))


def _printing(x):
    t = _sbuf(x)
    with nl.no_reorder():
        nl.device_print("tile t:", t)
    return _out(t)


def test_device_print_goes_to_stdout(backend, capsys):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    _jit(_printing, backend=backend)(x)
    out = capsys.readouterr().out
    assert "tile t:" in out and "[[0. 1. 2.]" in out and "[3. 4. 5.]]" in out


def _print_per_core(x):
    me = nl.program_id(0)
    t = _sbuf(x[me])
    nl.device_print("row", t)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[me], src=t)
    return out


def test_device_print_in_an_lnc_launch(backend, capsys):
    x = np.array([[[1, 2]], [[3, 4]]], np.int32)
    _jit(_print_per_core, backend=backend)[2](x)
    out = capsys.readouterr().out
    assert "[core 0] row [[1 2]]" in out and "[core 1] row [[3 4]]" in out


def test_with_schedule_is_accepted(backend):
    def k(x):
        t = _sbuf(x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0, name="bump")
        return _out(t)

    kern = _jit(k, backend=backend).with_schedule([("bump", ["load"])])
    x = np.ones((4, 4), np.float32)
    np.testing.assert_array_equal(kern(x), x + 1)


def test_with_schedule_checks_pairs():
    with pytest.raises(NkiValidationError, match=r"(?s)nki_invalid_argument.*with_schedule.*"
                                                 r"test_misc_isa\.py:\d+"):
        _jit(lambda x: x).with_schedule([("a",)])


def test_sequence_bounds_shape_rule():
    def k(x):
        b = nl.ndarray((1, 3, 10), dtype=nl.float32, buffer=nl.sbuf)
        nisa.sequence_bounds(dst=b, segment_ids=_sbuf(x))
        return x

    with pytest.raises(NkiValidationError, match=r"(?s)nki_shape_mismatch.*\(1, 2, N\).*"
                                                 r"test_misc_isa\.py:\d+"):
        _jit(k, backend="python")(np.ones((1, 10), np.float32))


def _not_invert(x):
    t = _sbuf(x)
    return _out(nl.logical_not(t)), _out(nl.invert(t))


def test_logical_not_and_invert(backend):
    x = np.array([[0, 1, -3, 7]], np.int32)
    a, b = _jit(_not_invert, backend=backend)(x)
    np.testing.assert_array_equal(a, (x == 0).astype(np.int32))
    np.testing.assert_array_equal(b, ~x)


# ----- NkiInstruction.depends_on ---------------------------------------------------------------

def _ordered(x, kind):
    t = _sbuf(x)
    a, b = _new(t), _new(t)
    load = nisa.tensor_copy(dst=a, src=t)
    plus = nisa.tensor_scalar(dst=b, data=t, op0=nl.add, operand0=1.0, name="plus1")
    total = nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
    assert total.depends_on(plus, load, kind=kind) is total       # returns self: chains
    assert total.depends_on(plus, kind=kind).depends_on(load, kind=kind) is total
    return _out(a)


@pytest.mark.parametrize("kind", [None, Dependency.runtime, Dependency.schedule])
def test_depends_on_is_accepted_and_the_kernel_runs(backend, kind):
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    out = _jit(_ordered, backend=backend)(x, kind)
    np.testing.assert_array_equal(out, x + (x + np.float32(1.0)))


def test_nisa_calls_return_instruction_handles():
    def k(x):
        t = _sbuf(x)
        handles = [nisa.memset(dst=_new(t), value=0.0),
                   nisa.tensor_copy(dst=_new(t), src=t),
                   nisa.activation(dst=_new(t), op=nl.exp, data=t),
                   nisa.tensor_reduce(dst=_new(t, (8, 1)), op=nl.add, data=t, axis=1),
                   nisa.iota(dst=_new(t, dtype=nl.int32), pattern=[[1, 16]]),
                   nisa.dma_copy(dst=_new(t), src=x)]
        assert all(isinstance(h, NkiInstruction) for h in handles), handles
        handles[-1].depends_on(*handles[:-1])
        return x
    _jit(k).specialize(np.ones((8, 16), np.float32))


def _bad_producer(x, which):
    t = _sbuf(x)
    a = _new(t)
    first = nisa.tensor_copy(dst=a, src=t)
    second = nisa.tensor_scalar(dst=a, data=a, op0=nl.add, operand0=1.0)
    if which == "tensor":
        second.depends_on(first, a)                                  # bad: a tile
    elif which == "kind":
        second.depends_on(first, kind="runtime")                     # bad: a string
    elif which == "self":
        second.depends_on(second)                                    # bad: itself
    elif which == "later":
        first.depends_on(second)                                     # bad: later producer
    return _out(a)


@pytest.mark.parametrize("which,code,words", [
    ("tensor", "nki_invalid_argument", r"producer 1 must be an instruction handle.*NkiTensor"),
    ("kind", "nki_invalid_argument", r"kind='runtime' must be a nisa.dependency member"),
    ("self", "nki_invalid_argument", r"an instruction cannot depend on itself"),
    ("later", "nki_not_implemented", r"producer 0 \(at test_misc_isa.py:\d+\) comes after the "
                                     r"consumer.*program order"),
])
def test_depends_on_rules_name_code_and_line(which, code, words):
    import inspect

    lines, start = inspect.getsourcelines(_bad_producer)
    line = start + next(i for i, s in enumerate(lines) if f'"{which}"' in s) + 1
    with pytest.raises(Exception, match=rf"(?s)\[{code}\] NkiInstruction.depends_on: {words}"
                                        rf".*at test_misc_isa\.py:{line}:"):
        _jit(_bad_producer).specialize(np.ones((8, 16), np.float32), which)


def _across_runtime_loop(x, edge, kind):
    t = _sbuf(x)
    a = _new(t)
    outer = nisa.tensor_copy(dst=a, src=t)
    inner = []

    def body(i):
        h = nisa.tensor_scalar(dst=a, data=a, op0=nl.add, operand0=1.0)
        if edge == "into":
            h.depends_on(outer, kind=kind)          # producer in an enclosing scope: fine
        inner.append(h)

    nl.fori_loop(0, 3, body)
    after = nisa.tensor_scalar(dst=a, data=a, op0=nl.multiply, operand0=2.0)
    if edge == "out_of":
        after.depends_on(inner[0], kind=kind)       # producer inside the loop
    return _out(a)


def test_depends_on_into_a_runtime_loop_is_fine(backend):
    x = np.ones((8, 16), np.float32)
    out = _jit(_across_runtime_loop, backend=backend)(x, "into", None)
    np.testing.assert_array_equal(out, (x + 3) * 2)


def test_runtime_dependency_out_of_a_runtime_loop_is_rejected():
    x = np.ones((8, 16), np.float32)
    with pytest.raises(NkiValidationError, match=r"(?s)nki_invalid_argument.*depends_on: "
                       r"producer 0 .* different runtime loops.*test_misc_isa\.py:\d+"):
        _jit(_across_runtime_loop).specialize(x, "out_of", Dependency.runtime)
    _jit(_across_runtime_loop).specialize(x, "out_of", Dependency.schedule)  # no semaphore
