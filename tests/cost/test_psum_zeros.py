"""PSUM zeros that start a matmul accumulation group cost nothing.

trn1 arch guide, "Near-memory accumulation in PSUM": the accumulation pattern is (1) a psum
buffer with zeros, (2) an affine range loop, (3) matmul results added into it, and "the
first nc_matmul instruction overwrites the destination PSUM bank" (the instruction's
psum_zero flag, Neuron Explorer's glossary). So the ``nl.zeros`` fill is no VectorE
instruction when the tile's next use is a matmul writing all of it; any other zeros keep
their fill's cost, hand-computed here: ``max(MIN_II, N)`` VectorE cycles for fp32."""

from __future__ import annotations

import neuronxcc.nki.isa as lisa
import neuronxcc.nki.language as lnl
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.cost import estimate
from nki.cost.facts import cost_facts
from nki.cost.prep import prepare
from nki.ir.ops import Opcode

K_TILES, N = 4, 512
VECTOR_GHZ = {"trn1": 1.12, "trn2": 0.96, "trn3": 1.2}


def _fills(fn, target, *args):
    """The cost of every memset of ``fn``'s program, in program order."""
    spec = nki.jit(fn, target=target).specialize(*args)
    prep = prepare(spec.cores[0].program, cost_facts(target))
    return [st.cost for st in prep.instrs if st.instr.opcode is Opcode.MEMSET]


def _inputs():
    rng = np.random.default_rng(0)
    return (rng.random((K_TILES, 128, 128), np.float32),
            rng.random((K_TILES, 128, N), np.float32))


def group(a, b, start):
    """``a[k].T @ b[k]`` summed over k into a PSUM tile; ``start`` says how the tile is
    prepared: "zeros" (nl.zeros), "memset" (nisa.memset), "read" (nl.zeros then a VectorE
    add reads it before any matmul), "half" (nl.zeros, the first matmul writes half)."""
    out = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.shared_hbm)
    if start == "memset":
        ps = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=ps, value=0.0)
    else:
        ps = nl.zeros((128, N), dtype=nl.float32, buffer=nl.psum)
    if start == "read":
        nisa.tensor_scalar(dst=ps, data=ps, op0=nl.add, operand0=1.0)
    cols = N // 2 if start == "half" else N
    for k in nl.affine_range(K_TILES):
        at = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        bt = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a[k])
        nisa.dma_copy(dst=bt, src=b[k])
        # accumulate=None, the docs' example: the first write overwrites, later ones add
        nisa.nc_matmul(dst=ps[:, 0:cols], stationary=at, moving=bt[:, 0:cols])
    res = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=ps, engine=nisa.vector_engine)
    nisa.dma_copy(dst=out, src=res)
    return out


@pytest.mark.parametrize("target", sorted(VECTOR_GHZ))
def test_zeros_starting_a_group_are_folded_into_the_first_matmul(target):
    a, b = _inputs()
    fill, = _fills(group, target, a, b, "zeros")
    assert fill.engine == "none" and fill.ns == 0.0
    # the estimate's VectorE time is the copy out alone: N fp32 cycles
    est = estimate(group, target=target)(a, b, "zeros")
    assert est.busy_ns("vector") == pytest.approx(N / VECTOR_GHZ[target])


@pytest.mark.parametrize("start", ["memset", "read", "half"])
@pytest.mark.parametrize("target", sorted(VECTOR_GHZ))
def test_other_fills_cost_their_vector_cycles(target, start):
    a, b = _inputs()
    fill, = _fills(group, target, a, b, start)
    assert fill.engine == "vector"
    assert fill.ns * VECTOR_GHZ[target] == pytest.approx(N)


def test_the_folded_group_still_matches_numpy():
    # the fold is the model's; the simulator still zeroes and accumulates exactly
    a, b = _inputs()
    got = nki.jit(group)(a, b, "zeros")
    want = np.einsum("kpm,kpn->mn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def legacy_group(a, b):
    """The legacy dialect's idiom: ``psum[...] += nisa.nc_matmul(...)`` over nl.zeros."""
    out = lnl.ndarray((128, N), dtype=lnl.float32, buffer=lnl.shared_hbm)
    ps = lnl.zeros((128, N), dtype=lnl.float32, buffer=lnl.psum)
    for k in lnl.affine_range(K_TILES):
        at = lnl.load(a[k])
        bt = lnl.load(b[k])
        ps += lisa.nc_matmul(at, bt)
    lnl.store(out, value=lnl.copy(ps, dtype=lnl.float32))
    return out


def test_legacy_zeros_and_plus_equals_fold_too():
    a, b = _inputs()
    fill, = _fills(legacy_group, "trn1", a, b)
    assert fill.engine == "none"
    got = nki.jit(legacy_group)(a, b)
    want = np.einsum("kpm,kpn->mn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5)
