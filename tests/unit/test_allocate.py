"""Placement (``nki.jit.allocate``) and capacity (``nki.jit.capacity``).

Liveness: a tensor is live from where it was *created* when that is outside the loop
(iteration) that first uses it, so tiles made in one loop and first written in a later one
never share bytes with tiles live in between. Capacity: measured on exact ranges per
partition range, never stricter than a real allocator; over it, tiles are spilled (the
neuronx-cc flow) with the values kept exact, or the allocator that does not spill refuses."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiCapacityError, NkiFragmentationWarning, NkiSpillWarning
from nki.ir.target import get_target
from nki.ir.types import Memory
from nki.jit.allocate import allocate
from nki.jit.capacity import spill_plan
from nki.jit.specialize import trace_core

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


# ----- capacity apart from placement (nki/jit/capacity.py) ----------------------------------

KIB = 1024 // 4        # fp32 elements in 1 KiB per partition
CAP1 = 180224          # trn1 SBUF bytes per partition
F32, SB = nl.float32, nl.sbuf


def _traced(fn, *args, target: str = "trn1"):
    """``fn`` traced for ``args`` (not placed), and its target."""
    kernel = nki.jit(fn, cache=False, target=target)
    settings = kernel.settings()
    tgt = get_target(settings.target)
    return trace_core(fn, args, {}, kernel._tensor_args(args), tgt, 0, 1, settings)[0], tgt


def _row_sum(out_col, t):
    col = nl.ndarray((t.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=col, op=nl.add, data=t, axis=1)
    nisa.dma_copy(dst=out_col, src=col)


def _keep_then_loop(x):
    """``keep`` is created before the loop but used only in iteration 0: our loop-extended
    range keeps it for the whole loop (100 + 100 KiB > 176 KiB), its exact range does not."""
    out = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.shared_hbm)
    keep = nl.ndarray((128, 100 * KIB), dtype=F32, buffer=SB)
    for r in nl.affine_range(N):
        if r == 0:
            nisa.memset(dst=keep, value=3.0)
            _row_sum(out[:, 0:1], keep)
        else:
            tmp = nl.ndarray((128, 100 * KIB), dtype=F32, buffer=SB)
            nisa.memset(dst=tmp, value=float(r))
            _row_sum(out[:, r:r + 1], tmp)
    return out


def test_exact_ranges_fit_where_our_loop_ranges_do_not(backend):
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # neither a spill nor a fragmentation warning
        kernel = nki.jit(_keep_then_loop, backend=backend, target="trn1", cache=False)
        y = kernel(np.zeros((1, 1), np.float32))
    expect = np.array([3.0] + [float(r) for r in range(1, N)], np.float32) * (100 * KIB)
    np.testing.assert_array_equal(y, np.broadcast_to(expect, (128, N)))
    spec = kernel.specialize(np.zeros((1, 1), np.float32))
    keep = _sbuf_tiles(spec, _keep_then_loop, "keep = nl.ndarray")
    assert keep[0][1] <= CAP1                # inside the SBUF, not an overflow page
    assert spill_plan(spec.cores[0].program) is None


def _fragmented(x):
    """a, b, c (58 KiB each) fill 174 KiB; a and c die, b stays in the middle: 158 KiB of
    b + d are live, but no 100 KiB hole is left for d."""
    out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    tiles = []
    for i in range(3):
        t = nl.ndarray((128, 58 * KIB), dtype=F32, buffer=SB, name="abc"[i])
        nisa.memset(dst=t, value=float(i + 1))
        tiles.append(t)
    a, b, c = tiles
    _row_sum(out[:, 0:1], a)
    _row_sum(out[:, 2:3], c)
    d = nl.ndarray((128, 100 * KIB), dtype=F32, buffer=SB)
    nisa.memset(dst=d, value=4.0)
    _row_sum(out[:, 1:2], b)
    _row_sum(out[:, 3:4], d)
    return out


def test_fragmentation_only_is_a_warning_naming_the_tensor(backend):
    line = _line(_fragmented, "d = nl.ndarray((128, 100 * KIB), dtype=F32, buffer=SB)")
    with pytest.warns(NkiFragmentationWarning, match=r"\[nki_sbuf_fragmented\] SBUF on trn1: "
                      r"the live tensors fit the 180224 B/partition at every instruction, "
                      r"but first fit left no contiguous room for 1 of them: d \(102400 "
                      rf"B/partition, created at test_allocate.py:{line}\)"):
        y = nki.jit(_fragmented, backend=backend, target="trn1", cache=False)(
            np.zeros((1, 1), np.float32))
    expect = np.array([1 * 58, 2 * 58, 3 * 58, 4 * 100], np.float32) * KIB
    np.testing.assert_array_equal(y, np.broadcast_to(expect, (128, 4)))


def _three_big(x):
    out = nl.ndarray((128, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    # 240 KiB live after c's memset
    a, b, c = (nl.ndarray((128, 80 * KIB), dtype=F32, buffer=SB, name=n) for n in "abc")
    nisa.memset(dst=a, value=1.0)
    nisa.memset(dst=b, value=2.0)
    nisa.memset(dst=c, value=3.0)
    _row_sum(out[:, 0:1], a)
    _row_sum(out[:, 1:2], b)
    _row_sum(out[:, 2:3], c)
    return out


def test_spill_plan_spills_the_tile_used_last():
    program, target = _traced(_three_big, np.zeros((1, 1), np.float32))
    with pytest.warns(NkiSpillWarning, match=r"\[nki_sbuf_spill\] SBUF on trn1: 245764 "
                      r"B/partition are live at test_allocate.py:\d+, over the 180224 it has"
                      r"(.|\n)*spills 1 tensor\(s\)(.|\n)*20.0 MiB of spill DMA(.|\n)*  b "
                      r"\(created at test_allocate.py:\d+\): 81920 B/partition x 128 "
                      r"partitions, 1 stores and 1 reloads"):
        placed = allocate(program, target)
    plan = spill_plan(placed)
    memset_b = _line(_three_big, "memset(dst=b")
    (s,) = plan.spills
    assert (s.name, s.bytes_per_partition, s.partitions) == ("b", 80 * 1024, 128)
    # instructions: memset a, b, c; then reduce + dma per tile. b is stored after its memset
    # (instruction 1) and reloaded before its reduce (instruction 5)
    assert [(p.instr, p.loc.lineno) for p in s.stores] == [(1, memset_b)]
    assert [p.instr for p in s.reloads] == [5]
    # the peak: a, b, c and the 4-byte column of a's row sum
    assert plan.peak == 3 * 80 * 1024 + 4 and plan.capacity == CAP1
    assert plan.dma_bytes == 2 * 128 * 80 * 1024
    assert placed.tensor(s.tensor).address[0] == 128        # simulated in an overflow page


def test_spilled_values_stay_exact(backend):
    with pytest.warns(NkiSpillWarning):
        y = nki.jit(_three_big, backend=backend, target="trn1", cache=False)(
            np.zeros((1, 1), np.float32))
    np.testing.assert_array_equal(y, np.broadcast_to(np.float32([1, 2, 3]) * 80 * KIB,
                                                     (128, 3)))


def test_an_allocator_that_does_not_spill_names_the_tile_and_the_largest_live():
    program, target = _traced(_three_big, np.zeros((1, 1), np.float32))
    line = _line(_three_big, "a, b, c = ")
    with pytest.raises(NkiCapacityError, match=r"\[nki_sbuf_capacity_exceeded\] SBUF overflow "
                       r"on trn1: tensor 'c' needs 81920 B/partition while 163840 of 180224 "
                       r"B/partition are live \(short by 65536 B\), at test_allocate.py:\d+; "
                       r"this allocator does not spill. Largest live tensors:\n  a: 81920 "
                       r"B/partition(.|\n)*  b: 81920 B/partition(.|\n)*"
                       rf"at test_allocate.py:{line}"):
        allocate(program, target, spill=False)


def _operands_too_big(x):
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    a, b, c = (nl.ndarray((128, 64 * KIB), dtype=F32, buffer=SB, name=n) for n in "abc")
    nisa.memset(dst=a, value=1.0)
    nisa.memset(dst=b, value=2.0)
    nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.add)   # 192 KiB at once
    # a and b are read again, so c cannot take the bytes of either (nki/jit/values.py)
    nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.subtract)
    _row_sum(out, c)
    return out


@pytest.mark.parametrize("spill", [True, False])
def test_one_instruction_over_capacity_fails_in_every_allocator(spill):
    program, target = _traced(_operands_too_big, np.zeros((1, 1), np.float32))
    line = _line(_operands_too_big, "192 KiB at once")
    if spill:
        match = (r"\[nki_sbuf_capacity_exceeded\] SBUF overflow on trn1: the instruction at "
                 rf"test_allocate.py:{line} needs 196608 of 180224 B/partition at once")
    else:
        match = r"\[nki_sbuf_capacity_exceeded\] SBUF overflow on trn1: tensor 'c' needs 65536"
    with pytest.raises(NkiCapacityError, match=match):
        allocate(program, target, spill=spill)


def _user_tile_and_pressure(x):
    out = nl.ndarray((128, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    u = nl.ndarray((128, 100 * KIB), dtype=nl.float32, buffer=nl.sbuf, address=(0, 0))
    nisa.memset(dst=u, value=5.0)
    a, b = (nl.ndarray((128, 60 * KIB), dtype=F32, buffer=SB, name=n) for n in "ab")
    nisa.memset(dst=a, value=1.0)
    nisa.memset(dst=b, value=2.0)
    _row_sum(out[:, 0:1], a)
    _row_sum(out[:, 1:2], b)
    _row_sum(out[:, 2:3], u)                # u's next use is the farthest: still never spilled
    return out


def test_address_tiles_are_never_spilled(backend):
    program, target = _traced(_user_tile_and_pressure, np.zeros((1, 1), np.float32))
    with pytest.warns(NkiSpillWarning):
        plan = spill_plan(allocate(program, target))
    # b's memset pushes a out; a's reload then pushes b out; u stays though used last
    assert [s.name for s in plan.spills] == ["a", "b"]
    with pytest.warns(NkiSpillWarning):
        y = nki.jit(_user_tile_and_pressure, backend=backend, target="trn1", cache=False)(
            np.zeros((1, 1), np.float32))
    np.testing.assert_array_equal(y, np.broadcast_to(np.float32([60, 120, 500]) * KIB,
                                                     (128, 3)))


def _two_partition_ranges(x):
    """100 KiB on partitions 0..31 and 100 KiB (address=) on 64..127: no partition holds
    more than 100 KiB, though 200 KiB per partition would not fit."""
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    low = nl.ndarray((32, 100 * KIB), dtype=F32, buffer=SB)
    high = nl.ndarray((64, 100 * KIB), dtype=nl.float32, buffer=nl.sbuf, address=(64, 0))
    nisa.memset(dst=low, value=1.0)
    nisa.memset(dst=high, value=2.0)
    _row_sum(out[0:32, :], low)
    _row_sum(out[64:128, :], high)
    nisa.memset(dst=low, value=0.0)
    _row_sum(out[32:64, :], low)
    return out


def test_capacity_is_counted_per_partition_range(backend):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernel = nki.jit(_two_partition_ranges, backend=backend, target="trn1", cache=False)
        y = kernel(np.zeros((1, 1), np.float32))
    expect = np.concatenate([np.full(32, 100.0), np.zeros(32), np.full(64, 200.0)]) * KIB
    np.testing.assert_array_equal(y[:, 0], expect.astype(np.float32))
    spec = kernel.specialize(np.zeros((1, 1), np.float32))
    assert _sbuf_tiles(spec, _two_partition_ranges, "low = nl.ndarray") == [(0, 100 * 1024)]
