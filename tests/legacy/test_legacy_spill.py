"""A legacy-dialect kernel that needs more SBUF than trn1 has, as the fused-mamba tutorial's
``mamba_v2`` does at seq_len 8192: neuronx-cc spills it to HBM and runs it, so the simulator
spills too (an ``NkiSpillWarning``, the plan recorded on the program) and computes the exact
result. Checked against numpy under both backends."""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest

from nki.errors import NkiSpillWarning
from nki.jit.capacity import spill_plan

SEQ, STATES = 8192, 2       # 32 KiB fp32 per partition for every [128, SEQ] tile


def gated_scan(gate, val, decay, inj, proj):
    """out[c, t] = sum_k h_k[c, t] * proj[k, t], h_k[c, t] = exp(gate*decay[c, k]) h_k[c, t-1]
    + gate*val*inj[k, t]: a selective linear recurrence per channel ``c`` and state ``k``.
    Seven [128, SEQ] tiles are live at once (224 KiB > trn1's 176 KiB)."""
    ch, seq = gate.shape
    out = nl.ndarray((ch, seq), dtype=gate.dtype, buffer=nl.shared_hbm)
    total = nl.zeros((nl.par_dim(ch), seq), dtype=gate.dtype)
    g = nl.load(gate)
    v = nl.load(val)
    for k in nl.affine_range(decay.shape[1]):
        rate = nl.load(decay[:, k])
        keep = nisa.activation(op=nl.exp, data=g, scale=rate)
        gv = nisa.tensor_tensor(g, v, op=nl.multiply)
        drive_row = nl.load(inj[k:k + 1, :])
        drive = nisa.tensor_tensor(gv, drive_row.broadcast_to((ch, seq)), op=nl.multiply)
        state = nisa.tensor_tensor_scan(keep, drive, initial=0, op0=np.multiply, op1=np.add)
        proj_row = nl.load(proj[k:k + 1, :])
        total[...] += nisa.tensor_tensor(state, proj_row.broadcast_to((ch, seq)),
                                         op=nl.multiply)
    nl.store(out, total)
    return out


def _reference(gate, val, decay, inj, proj) -> np.ndarray:
    g, v, w = (a.astype(np.float64) for a in (gate, val, decay))
    out = np.zeros_like(g)
    for k in range(w.shape[1]):
        keep = np.exp(g * w[:, k:k + 1])
        drive = g * v * inj[k].astype(np.float64)
        h = np.zeros(g.shape[0])
        for t in range(g.shape[1]):
            h = keep[:, t] * h + drive[:, t]
            out[:, t] += h * proj[k, t]
    return out


def _inputs(rng):
    return (rng.uniform(0.0, 0.2, (128, SEQ)).astype(np.float32),
            rng.standard_normal((128, SEQ)).astype(np.float32),
            -rng.uniform(0.5, 1.5, (128, STATES)).astype(np.float32),
            rng.standard_normal((STATES, SEQ)).astype(np.float32),
            rng.standard_normal((STATES, SEQ)).astype(np.float32))


def test_spilling_kernel_runs_exactly_on_trn1(backend, rng):
    args = _inputs(rng)
    kernel = nki.jit(gated_scan, backend=backend, target="trn1")
    with pytest.warns(NkiSpillWarning, match=r"\[nki_sbuf_spill\] SBUF on trn1: 229376 "
                      r"B/partition are live at test_legacy_spill.py:\d+, over the 180224"):
        out = kernel(*args)
    ref = _reference(*args)
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


def test_spill_plan_is_recorded_for_the_cost_model(rng):
    args = _inputs(rng)
    with pytest.warns(NkiSpillWarning):
        spec = nki.jit(gated_scan, target="trn1", cache=False).specialize(*args)
    plan = spill_plan(spec.cores[0].program)
    assert plan.peak > plan.capacity == 180224
    assert plan.spills and all(s.bytes_per_partition == SEQ * 4 for s in plan.spills)
    # every spilled tile is stored before it is reloaded, and reloaded at least once
    for s in plan.spills:
        assert s.reloads and s.stores[0].instr < s.reloads[0].instr
    assert plan.dma_bytes == sum(s.transfer_bytes * (len(s.stores) + len(s.reloads))
                                 for s in plan.spills)
