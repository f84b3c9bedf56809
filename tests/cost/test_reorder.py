"""``order="reorder"``: a ready instruction takes an earlier gap of its engine, every true
dependency still kept (checked pair by pair against the rule written out plainly), and an
engine still runs one instruction at a time."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.cost import estimate
from nki.cost.gaps import Gaps, common_fit
from nki.ir.nodes import Placed
from nki.ir.ops import Opcode

VECTOR_GHZ = {"trn1": 1.12, "trn2": 0.96, "trn3": 1.2}
DEP_CYCLES = 100        # the docs' static overhead of a dependent instruction


def two_chains(big, small):
    """A long load feeding one VectorE op, and a short load, issued first, feeding another
    VectorE op written after the first."""
    out_a = nl.ndarray(big.shape, dtype=big.dtype, buffer=nl.shared_hbm)
    out_b = nl.ndarray(small.shape, dtype=small.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray(big.shape, dtype=big.dtype, buffer=nl.sbuf)
    b = nl.ndarray(small.shape, dtype=small.dtype, buffer=nl.sbuf)
    a2 = nl.ndarray(big.shape, dtype=big.dtype, buffer=nl.sbuf)
    b2 = nl.ndarray(small.shape, dtype=small.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=small)
    nisa.dma_copy(dst=a, src=big)
    nisa.tensor_scalar(dst=a2, data=a, op0=nl.multiply, operand0=2.0)
    nisa.tensor_scalar(dst=b2, data=b, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out_a, src=a2)
    nisa.dma_copy(dst=out_b, src=b2)
    return out_a, out_b


def _ops(est):
    prep, tl = est.preps[0], est.timelines[0]
    return [(prep.instrs[s].instr, prep.instrs[s].cost.engine, st, en)
            for s, st, en in zip(tl.sidx, tl.start, tl.end)]


def _inputs():
    return np.ones((128, 8192), np.float32), np.ones((128, 64), np.float32)


@pytest.mark.parametrize("target", sorted(VECTOR_GHZ))
def test_a_ready_instruction_runs_before_a_waiting_one(target):
    big, small = _inputs()
    prog = estimate(two_chains, target=target)(big, small)
    ro = estimate(two_chains, target=target, order="reorder")(big, small)
    assert prog.order == "program" and ro.order == "reorder"
    ops = _ops(ro)
    (_, _, lb0, lb1), (_, _, la0, la1) = [o for o in ops if o[0].opcode is Opcode.DMA_COPY][:2]
    (_, _, a0, a1), (_, _, b0, b1) = [o for o in ops if o[0].opcode is Opcode.TENSOR_SCALAR]
    # b2 starts as soon as its load is done, plus the dependency's static overhead ...
    assert b0 == pytest.approx(lb1 + DEP_CYCLES / VECTOR_GHZ[target])
    assert b1 <= a0 and a0 >= la1          # ... in the gap before a2, which waits for its load
    (_, _, pa0, pa1), (_, _, pb0, pb1) = [o for o in _ops(prog)
                                          if o[0].opcode is Opcode.TENSOR_SCALAR]
    assert pb0 >= pa1                      # in program order it waits behind a2
    assert ro.latency_ns <= prog.latency_ns


def mixed(x, y):
    """Straight-line code over whole tiles on four engines, with reuse of tiles (so write
    after read and write after write occur), no loops."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = [nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf) for _ in range(4)]
    nisa.dma_copy(dst=t[0], src=x)
    nisa.dma_copy(dst=t[1], src=y)
    nisa.activation(dst=t[2], op=nl.exp, data=t[1])
    nisa.tensor_tensor(dst=t[3], data1=t[0], data2=t[2], op=nl.add)
    nisa.tensor_scalar(dst=t[0], data=t[1], op0=nl.multiply, operand0=3.0)   # WAR on t0
    nisa.activation(dst=t[1], op=nl.exp, data=t[3])                          # WAR on t1
    nisa.tensor_copy(dst=t[2], src=t[0], engine=nisa.gpsimd_engine)
    nisa.tensor_tensor(dst=t[3], data1=t[2], data2=t[1], op=nl.multiply)    # WAW on t3
    nisa.dma_copy(dst=out, src=t[3])
    return out


def fan_out(x):
    """One load read by four independent VectorE ops (ready at once) and a ScalarE one."""
    outs = [nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm) for _ in range(5)]
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    for k in range(5):
        u = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        if k == 4:
            nisa.activation(dst=u, op=nl.exp, data=t)
        else:
            nisa.tensor_scalar(dst=u, data=t, op0=nl.multiply, operand0=float(k))
        nisa.dma_copy(dst=outs[k], src=u)
    return tuple(outs)


def _tensors(instr):
    return [(a.tensor, w) for _, a, w in instr.accesses() if isinstance(a, Placed)]


@pytest.mark.parametrize("kernel", [mixed, fan_out])
@pytest.mark.parametrize("target", sorted(VECTOR_GHZ))
def test_every_dependency_is_kept_and_engines_run_one_at_a_time(target, kernel):
    x, y = np.ones((128, 512), np.float32), np.ones((128, 512), np.float32)
    args = (x, y) if kernel is mixed else (x,)
    ops = _ops(estimate(kernel, target=target, order="reorder")(*args))
    for (ia, ea, sa, fa), (ib, eb, sb, fb) in itertools.combinations(ops, 2):
        # program order a before b: b waits for a on any shared tensor with a write
        shared = {t for t, w in _tensors(ia)} & {t for t, w in _tensors(ib)}
        if any(w for t, w in _tensors(ia) + _tensors(ib) if t in shared):
            assert sb >= fa - 1e-9, (ia.opcode, ib.opcode)
        if ea == eb and ea not in ("dma", "none"):
            assert fa <= sb + 1e-9 or fb <= sa + 1e-9


def test_the_rule_is_checked():
    x = np.ones((128, 512), np.float32)
    with pytest.raises(ValueError, match="order must be"):
        estimate(mixed, target="trn2", order="fastest")(x, x)
    with pytest.raises(ValueError, match="Python only"):
        estimate(mixed, target="trn2", order="reorder", backend="numba")(x, x)


def test_the_reordered_kernel_still_computes_the_same():
    # the order is the model's: the simulator's results do not depend on it
    big, small = _inputs()
    a, b = nki.jit(two_chains)(big, small)
    np.testing.assert_array_equal(a, big * 2)
    np.testing.assert_array_equal(b, small * 2)


def _brute_first_fit(busy, t, dur):
    """The earliest start >= t free for dur, over every candidate start (t, interval ends)."""
    for c in sorted({t} | {e for _, e in busy if e >= t}):
        if all(c + dur <= s or e <= c for s, e in busy):
            return c
    raise AssertionError("unreachable: after the last end everything is free")


@pytest.mark.parametrize("seed", range(20))
def test_gaps_first_fit_matches_the_brute_force(seed):
    rng = random.Random(seed)
    resources, plain = [], []
    for _ in range(3):
        g, busy, t = Gaps(), [], 0.0
        for i in range(rng.randrange(1, 12)):
            t += rng.choice([0.0, 0.5, 1.0, 2.5])
            d = rng.choice([0.5, 1.0, 3.0])
            g.occupy(t, t + d, i)
            busy.append((t, t + d))
            t += d
        resources.append(g)
        plain.append(busy)
    for _ in range(30):
        t, dur = rng.uniform(0, 30), rng.choice([0.25, 0.5, 1.0, 2.0, 4.0])
        assert resources[0].first_fit(t, dur) == _brute_first_fit(plain[0], t, dur)
        assert common_fit(resources, t, dur) == _brute_first_fit(
            [iv for b in plain for iv in b], t, dur)
