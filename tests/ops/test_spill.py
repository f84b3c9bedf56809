"""Current-dialect kernels over the SBUF capacity: by default neuronx-cc allocates and spills,
so they run (an ``NkiSpillWarning`` names the spilled tiles) with exact results; checked
against numpy under both backends."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiSpillWarning
from nki.jit.capacity import spill_plan

F = 12288                 # fp32 per partition: 48 KiB per tile


def rotate_pairs(x, cos, sin):
    """Rotary embedding on half-width tiles (the nki-library RoPE layout): rows 0..h-1 of
    ``x`` are the even features, rows h..2h-1 the odd ones; seven 48 KiB tiles share
    partitions 0..31 at once, 336 KiB > trn2's 208 KiB."""
    d, f = x.shape
    h = d // 2
    out = nl.ndarray((d, f), dtype=x.dtype, buffer=nl.shared_hbm)
    xs = nl.ndarray((d, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    c = nl.ndarray((h, f), dtype=x.dtype, buffer=nl.sbuf)
    s = nl.ndarray((h, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=c, src=cos)
    nisa.dma_copy(dst=s, src=sin)
    odd = nl.ndarray((h, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=odd, src=xs[h:d, :])
    parts = {}
    for name, a, b in (("even_cos", xs[0:h, :], c), ("odd_cos", odd, c),
                       ("even_sin", xs[0:h, :], s), ("odd_sin", odd, s)):
        parts[name] = nl.ndarray((h, f), dtype=x.dtype, buffer=nl.sbuf, name=name)
        nisa.tensor_tensor(dst=parts[name], data1=a, data2=b, op=nl.multiply)
    res = nl.ndarray((d, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=res[0:h, :], data1=parts["even_cos"], data2=parts["odd_sin"],
                       op=nl.subtract)
    rot = nl.ndarray((h, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=rot, data1=parts["odd_cos"], data2=parts["even_sin"], op=nl.add)
    nisa.tensor_copy(dst=res[h:d, :], src=rot)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_rope_shaped_kernel_spills_and_is_exact(backend, rng):
    x = rng.standard_normal((64, F)).astype(np.float32)
    ang = rng.uniform(0, 2 * np.pi, (32, F))
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    kernel = nki.jit(rotate_pairs, backend=backend, target="trn2", cache=False)
    with pytest.warns(NkiSpillWarning, match=r"\[nki_sbuf_spill\] SBUF on trn2: \d+ "
                      r"B/partition are live at test_spill.py:\d+, over the 212984 it has"
                      r"(.|\n)*49152 B/partition x 32 partitions"):
        y = kernel(x, cos, sin)
    even, odd = x[:32], x[32:]
    expect = np.concatenate([even * cos - odd * sin, odd * cos + even * sin])
    np.testing.assert_array_equal(y, expect)      # one fp32 multiply and add each: exact
    plan = spill_plan(kernel.specialize(x, cos, sin).cores[0].program)
    assert plan.peak > plan.capacity and {s.partitions for s in plan.spills} <= {32, 64}
