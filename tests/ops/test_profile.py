"""Kernel.profile: every instruction timed while the kernel computes what it always does."""

from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


def _scaled_rows(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(x.shape[0] // 128):
        tile = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[t * 128:(t + 1) * 128, :])
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=3.0)
        nisa.dma_copy(dst=out[t * 128:(t + 1) * 128, :], src=tile)
    return out


def _halves_then_barrier(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    half = x.shape[0] // 2
    r0 = nl.program_id(0) * half
    tile = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x[r0:r0 + half, :])
    nisa.tensor_scalar(dst=tile, data=tile, op0=nl.add, operand0=1.0)
    if nl.program_id(0) == 1:
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out[r0:r0 + half, :], src=tile)
    nisa.core_barrier(out, (0, 1))
    return out


def test_profile_counts_every_instruction_and_keeps_results():
    x = np.random.default_rng(0).standard_normal((512, 64)).astype(np.float32)
    kernel = nki.jit(_scaled_rows)
    (profile,) = kernel.profile(x)
    # the affine loop runs 4 times: each of its three instructions is called 4 times
    assert sorted(profile.calls.tolist()) == [4, 4, 4]
    assert (profile.seconds > 0).all() and profile.total <= profile.wall
    assert set(profile.by_helper()) == {"dma_copy", "tensor_scalar"}
    text = profile.table()
    assert "test_profile.py:17" in text and "tensor_scalar" in text
    np.testing.assert_array_equal(kernel(x), 3 * x)   # a profiled run is a normal run


def test_profile_of_an_lnc_launch_has_one_profile_per_core():
    x = np.random.default_rng(1).standard_normal((128, 8)).astype(np.float32)
    kernel = nki.jit(_halves_then_barrier)[2]
    profiles = kernel.profile(x)
    # core 1 runs one instruction more; the barrier is a host call, timed like the rest
    assert [int(p.calls.sum()) for p in profiles] == [4, 5]
    np.testing.assert_array_equal(kernel(x), np.concatenate([x[:64] + 1, (x[64:] + 1) * 2]))
