"""Current-dialect kernels over the SBUF capacity: by default neuronx-cc allocates and spills,
so they run (an ``NkiSpillWarning`` names the spilled tiles) with exact results; checked
against numpy under both backends."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiFragmentationWarning, NkiSpillWarning
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


CHUNK = 65535             # bf16 per partition: 128 KiB per tile, two exceed trn2's SBUF


def chunked_exp_sums(logits, chunk):
    """cross_entropy_forward's chunk loop: one tile reloaded per vocabulary chunk and one for
    exp(chunk - max), both ``chunk`` wide. They meet only in the ``tensor_scalar`` that
    reads the chunk for the last time and writes the other, element for element."""
    rows, vocab = logits.shape
    out = nl.ndarray((rows, vocab // chunk), dtype=nl.float32, buffer=nl.shared_hbm)
    sums = nl.ndarray((rows, vocab // chunk), dtype=nl.float32, buffer=nl.sbuf)
    data = nl.ndarray((rows, chunk), dtype=logits.dtype, buffer=nl.sbuf)
    exps = nl.ndarray((rows, chunk), dtype=logits.dtype, buffer=nl.sbuf)
    top = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    for c in range(vocab // chunk):
        nisa.dma_copy(dst=data, src=logits[:, c * chunk:(c + 1) * chunk])
        nisa.tensor_reduce(dst=top, op=nl.maximum, data=data, axis=1)
        nisa.tensor_scalar(dst=exps, data=data, op0=nl.subtract, operand0=top)
        nisa.activation(dst=exps, op=nl.exp, data=exps)
        nisa.tensor_reduce(dst=sums[:, c:c + 1], op=nl.add, data=exps, axis=1)
    nisa.dma_copy(dst=out, src=sums)
    return out


def _bf16(a):
    import ml_dtypes

    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def test_dst_over_a_source_read_for_the_last_time_fits(backend, rng):
    import ml_dtypes

    logits = rng.standard_normal((4, 2 * CHUNK)).astype(ml_dtypes.bfloat16)
    kernel = nki.jit(chunked_exp_sums, backend=backend, target="trn2", cache=False)
    # the check passes; our first fit does not put exps over data, so exps is simulated
    # outside the SBUF (values stay exact) and the placement says so
    with pytest.warns(NkiFragmentationWarning, match=r"nki_sbuf_fragmented.*exps"):
        out = kernel(logits, CHUNK)
    x = logits.astype(np.float32).reshape(4, 2, CHUNK)
    exps = _bf16(np.exp(_bf16(x - x.max(axis=2, keepdims=True))))
    np.testing.assert_allclose(out, exps.sum(axis=2, dtype=np.float64), rtol=1e-5)


def exp_sums_keeping_the_chunk(logits, chunk):
    """As above, but the chunk is read again after the ``tensor_scalar``: both 128 KiB tiles
    hold values there, which no allocator fits."""
    rows, _ = logits.shape
    out = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    data = nl.ndarray((rows, chunk), dtype=logits.dtype, buffer=nl.sbuf)
    exps = nl.ndarray((rows, chunk), dtype=logits.dtype, buffer=nl.sbuf)
    top = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=data, src=logits[:, 0:chunk])
    nisa.tensor_reduce(dst=top, op=nl.maximum, data=data, axis=1)
    nisa.tensor_scalar(dst=exps, data=data, op0=nl.subtract, operand0=top)
    nisa.tensor_tensor(dst=exps, data1=exps, data2=data, op=nl.add)
    nisa.tensor_reduce(dst=top, op=nl.add, data=exps, axis=1)
    nisa.dma_copy(dst=out, src=top)
    return out


def test_two_live_values_over_the_capacity_still_fail(rng):
    import ml_dtypes

    from nki.errors import NkiCapacityError

    logits = rng.standard_normal((4, CHUNK)).astype(ml_dtypes.bfloat16)
    kernel = nki.jit(exp_sums_keeping_the_chunk, backend="numpy", target="trn2", cache=False)
    with pytest.raises(NkiCapacityError, match=r"(?s)nki_sbuf_capacity_exceeded.*"
                       r"test_spill.py:\d+ needs \d+ of 212984 B/partition"):
        kernel(logits, CHUNK)
