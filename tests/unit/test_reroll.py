"""Rerolling: IR size does not grow with trip counts; peeling; triangular nests."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.ir.nodes import Loop


def _copy_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(x.shape[0] // 128):
        tile = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[t * 128:(t + 1) * 128, :])
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out[t * 128:(t + 1) * 128, :], src=tile)
    return out


def _spec(fn, *args):
    return nki.jit(fn, cache=False).specialize(*args)


def test_instruction_count_independent_of_trip_count():
    small = _spec(_copy_kernel, np.zeros((4 * 128, 64), np.float32))
    large = _spec(_copy_kernel, np.zeros((64 * 128, 64), np.float32))
    assert small.num_instructions == large.num_instructions == 3
    body = large.cores[0].program.body
    assert len(body) == 1 and isinstance(body[0], Loop) and body[0].trip.const == 64


def _k_loop(a, b):
    # out = a.T @ b via a vector-engine accumulation whose first step overwrites: peel
    out = nl.ndarray((128, b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, b.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    tmp = nl.ndarray((128, b.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.affine_range(b.shape[0] // 128):
        nisa.dma_copy(dst=tmp, src=b[k * 128:(k + 1) * 128, :])
        if k == 0:
            nisa.tensor_copy(dst=acc, src=tmp)
        else:
            nisa.tensor_tensor(dst=acc, data1=acc, data2=tmp, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_first_iteration_is_peeled_and_result_is_right(backend):
    b = np.random.default_rng(0).standard_normal((6 * 128, 32)).astype(np.float32)
    spec = _spec(_k_loop, None, b)
    body = spec.cores[0].program.body
    loops = [s for s in body if isinstance(s, Loop)]
    assert len(loops) == 1 and loops[0].trip.const == 5
    out = nki.jit(_k_loop, backend=backend)(None, b)
    expect = b.reshape(6, 128, 32).astype(np.float64).sum(0)
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-5)


def _triangle(x):
    # row block i accumulates blocks 0..i: trip count affine in the outer index
    n = x.shape[0] // 128
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n):
        acc = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        for j in nl.affine_range(i + 1):
            t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[j * 128:(j + 1) * 128, :])
            nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=acc)
    return out


def test_triangular_nest_folds(backend):
    x = np.random.default_rng(1).standard_normal((5 * 128, 16)).astype(np.float32)
    spec = _spec(_triangle, x)
    assert spec.num_instructions == 4
    outer = spec.cores[0].program.body[0]
    inner = [s for s in outer.body if isinstance(s, Loop)][0]
    assert str(inner.trip) == "i0 + 1"
    out = nki.jit(_triangle, backend=backend)(x)
    expect = np.cumsum(x.reshape(5, 128, 16).astype(np.float64), axis=0).reshape(x.shape)
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-5)


def _plain_python_loops(x):
    # NKI 0.6 style: ordinary Python range loops, nested, nothing recorded
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(x.shape[0] // 128):
        for j in range(x.shape[1] // 32):
            t = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, j * 32:(j + 1) * 32])
            nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=float(j))
            nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, j * 32:(j + 1) * 32], src=t)
    return out


def test_plain_python_loops_fold_into_a_nest(backend):
    x = np.random.default_rng(2).standard_normal((3 * 128, 4 * 32)).astype(np.float32)
    spec = _spec(_plain_python_loops, x)
    # the immediate differs per j, so the inner body cannot fold across j; rows still fold
    assert spec.num_instructions < 3 * 4 * 3
    out = nki.jit(_plain_python_loops, backend=backend)(x)
    expect = x + np.repeat(np.arange(4, dtype=np.float32), 32)[None, :]
    np.testing.assert_array_equal(out, expect)


def _plain_same_body(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(x.shape[0] // 128):
        for j in range(x.shape[1] // 32):
            t = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, j * 32:(j + 1) * 32])
            nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, j * 32:(j + 1) * 32], src=t)
    return out


def test_plain_python_nest_is_independent_of_trip_counts():
    small = _spec(_plain_same_body, np.zeros((2 * 128, 2 * 32), np.float32))
    large = _spec(_plain_same_body, np.zeros((16 * 128, 8 * 32), np.float32))
    assert small.num_instructions == large.num_instructions == 2


def _nine_deep(x):
    out = nl.ndarray((2,) * 9 + (4,), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 4), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.affine_range
    for a in r(2):
        for b in r(2):
            for c in r(2):
                for d in r(2):
                    for e in r(2):
                        for f in r(2):
                            for g in r(2):
                                for h in r(2):
                                    for i in r(2):
                                        nisa.dma_copy(dst=out[a, b, c, d, e, f, g, h, i],
                                                      src=t)
    return out


def test_nest_deeper_than_the_loop_slots_stays_correct(backend):
    # generated code has 7 loop slots; deeper recorded loops stay unrolled instead of failing
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    y = nki.jit(_nine_deep, backend=backend, cache=False)(x)
    np.testing.assert_array_equal(y, np.broadcast_to(x.reshape(4), (2,) * 9 + (4,)))


@pytest.mark.parametrize("n", [2, 3, 7, 64])
def test_the_longest_foldable_prefix_is_the_one_trying_every_length_finds(n):
    """fold's bisection against the plain scan (longest first), for every cut-off m: a
    make_loop that folds exactly the prefixes of at most m blocks."""
    from nki.jit.fold import _longest_loop

    blocks = [[i] for i in range(n)]
    for m in range(0, n + 1):
        calls = []

        def make_loop(bs, slot, m=m, calls=calls):
            calls.append(len(bs))
            if len(bs) > m:
                raise ValueError("not affine")
            return ("loop", len(bs))

        want = next((r for r in range(n, 1, -1) if r <= m), 0)
        loop, reps = _longest_loop(make_loop, blocks, 0)
        assert reps == want and (loop == ("loop", want) if want else loop is None)
        assert len(calls) <= 2 + n.bit_length()
