"""Idioms of AWS's token-generation attention kernel (nki-samples 7af4e4d,
``contributed/neuron-team-kernels/attention_token_gen.py``), each in a kernel of our own
against numpy, both backends: a masked write through an SBUF slice that runs past the tile
(its fixed 512-wide chunks over a shorter context); ``nl.transpose(x).broadcast_to(...)``, a
partition broadcast of a PSUM tile; ``mask[:, n - 1:] = True``; ``nt.tensor[nt.mutable]``."""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt
import numpy as np
import pytest

BACKENDS = ["numba", "python"]


def chunked_scale_kernel(x):
    """Scales x [32, 384] in 512-wide chunks; the chunk's slice runs past the tile and the
    mask keeps the write inside."""
    n = x.shape[1]
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    xt = nl.load(x)
    res = nl.ndarray((32, n), dtype=np.float32, buffer=nl.sbuf)
    for c in nl.static_range(2):
        i_f = nl.arange(512)[None, :]
        res[:, c * 512:(c + 1) * 512] = nl.multiply(xt[nl.arange(32)[:, None], i_f + c * 512],
                                                    2.0, mask=(i_f + c * 512 < n))
    nl.store(out, value=res)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_write_through_an_sbuf_slice_past_the_tile(backend):
    x = np.random.default_rng(1).standard_normal((32, 384)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(chunked_scale_kernel, backend=backend)(x), 2 * x)


def unmasked_past_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    res = nl.ndarray((32, 384), dtype=np.float32, buffer=nl.sbuf)
    res[:, 256:512] = nl.load(x[:, 0:256])          # past
    nl.store(out, value=res)
    return out


def test_an_unmasked_sbuf_slice_past_the_tile_raises():
    with pytest.raises(nki.NkiError) as info:
        nki.jit(unmasked_past_kernel).specialize(np.ones((32, 384), np.float32))
    assert info.value.code == "err_tensor_access_out_of_bound", str(info.value)
    assert "test_legacy_decode_idioms.py" in str(info.value)


def normalise_columns_kernel(y, sums):
    """``y [128, 32] / sums[32, 1]``: the column sums are transposed (a PSUM [1, 32] tile) and
    broadcast over the 128 partitions, as the decode kernel divides by its exp sums."""
    out = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.shared_hbm)
    yt, st = nl.load(y), nl.load(sums)
    denom = nl.transpose(st).broadcast_to(yt.shape)
    nl.store(out, value=nl.divide(yt, denom))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_partition_broadcast_of_a_transposed_psum_tile(backend):
    rng = np.random.default_rng(2)
    y = rng.standard_normal((128, 32)).astype(np.float32)
    sums = rng.uniform(1, 4, (32, 1)).astype(np.float32)
    got = nki.jit(normalise_columns_kernel, backend=backend)(y, sums)
    np.testing.assert_allclose(got, y / sums.T, rtol=1e-6)


def last_column_kernel(m, out: nt.tensor[nt.mutable]):
    """``mask[:, n - 1:] = True`` on a loaded bool tile; ``out`` annotated mutable."""
    t = nl.load(m)
    t[:, m.shape[1] - 1:] = True
    nl.store(out, value=t)


@pytest.mark.parametrize("backend", BACKENDS)
def test_assigning_a_bool_fills_the_view(backend):
    m = np.random.default_rng(3).uniform(size=(16, 8)) < 0.3
    m[:, -1] = False
    out = np.zeros_like(m)
    nki.simulate_kernel(nki.jit(last_column_kernel, backend=backend), m, out)
    want = m.copy()
    want[:, -1] = True
    np.testing.assert_array_equal(out, want)


def test_tensor_of_mutable_is_the_mutable_annotation():
    assert nt.tensor[nt.mutable] is nt.mutable_tensor
