"""Placement liveness (``nki.jit.allocate``): a tensor is live from where it was *created*
when that is outside the loop (iteration) that first uses it, so tiles made in one loop and
first written in a later one never share bytes with tiles live in between."""

from __future__ import annotations

import inspect

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.ir.types import Memory

N = 4          # loop trips
X = np.random.default_rng(5).standard_normal((N * 128, 64)).astype(np.float32)


def _line(fn, text: str) -> int:
    """The line number of the first line of ``fn`` containing ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(lines) if text in s)


def _state_made_in_earlier_loop(x):
    """The flash-attention shape: per-tile state created in one affine loop (next to a tile
    that loop uses), first written in a later affine loop."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    state = []
    for r in nl.affine_range(N):
        q = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=q, src=x[r * 128:(r + 1) * 128, :])
        acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)   # not used here
        state.append((q, acc))
    for r in nl.affine_range(N):
        q, acc = state[r]
        tmp = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=tmp, data=q, op0=nl.multiply, operand0=2.0)
        nisa.tensor_tensor(dst=acc, data1=tmp, data2=q, op=nl.add)      # first write: 3 q
        nisa.dma_copy(dst=out[r * 128:(r + 1) * 128, :], src=acc)
    return out


def _made_before_loop_used_in_one_iteration(x):
    """A tile created before an affine loop whose only write is in iteration 2; the
    per-iteration tiles of the other iterations must not take its bytes."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    picked = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    keep = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for r in nl.affine_range(N):
        if r == 2:
            nisa.memset(dst=keep, value=1.0)
        tmp = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tmp, src=x[r * 128:(r + 1) * 128, :])
        if r == 2:
            nisa.tensor_tensor(dst=keep, data1=keep, data2=tmp, op=nl.add)
        nisa.dma_copy(dst=out[r * 128:(r + 1) * 128, :], src=tmp)
    col = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=col, op=nl.add, data=keep, axis=1)
    nisa.dma_copy(dst=picked, src=col)
    return out, picked


def _sbuf_tiles(spec, fn, text: str) -> list[tuple[int, int]]:
    """Byte ranges ``[start, end)`` (per partition) of the SBUF tiles created on the line of
    ``fn`` containing ``text``."""
    line = _line(fn, text)
    return [(t.address[1], t.address[1] + t.bytes_per_partition)
            for t in spec.cores[0].program.tensors
            if t.memory is Memory.SBUF and t.loc is not None and t.loc.lineno == line]


def _overlapping(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list:
    return [(x, y) for x in a for y in b if x is not y and x[0] < y[1] and y[0] < x[1]]


def test_state_from_earlier_loop_gets_its_own_bytes():
    spec = nki.jit(_state_made_in_earlier_loop, cache=False).specialize(X)
    fn = _state_made_in_earlier_loop
    accs = _sbuf_tiles(spec, fn, "acc = nl.ndarray")
    qs = _sbuf_tiles(spec, fn, "q = nl.ndarray")
    tmps = _sbuf_tiles(spec, fn, "tmp = nl.ndarray")
    assert len(accs) == len(qs) == N and len(tmps) >= 1
    # every acc and q is live from its creation in loop 1 through loop 2
    assert _overlapping(accs + qs, accs + qs) == []
    assert _overlapping(tmps, accs + qs) == []


def test_state_from_earlier_loop_passes_race_check_and_computes(backend):
    kernel = nki.jit(_state_made_in_earlier_loop, backend=backend, check_races=True,
                     cache=False)
    np.testing.assert_array_equal(kernel(X), X * np.float32(2) + X)


def test_tile_made_before_loop_stays_live_for_the_whole_loop():
    fn = _made_before_loop_used_in_one_iteration
    spec = nki.jit(fn, cache=False).specialize(X)
    keep = _sbuf_tiles(spec, fn, "keep = nl.ndarray")
    tmps = _sbuf_tiles(spec, fn, "tmp = nl.ndarray")
    assert len(keep) == 1 and len(tmps) >= 1
    assert _overlapping(tmps, keep) == []
    out, picked = nki.jit(fn, check_races=True, cache=False)(X)
    np.testing.assert_array_equal(out, X)
    expect = (X[256:384].astype(np.float64) + 1.0).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(picked, expect, rtol=1e-5)
