"""Idioms of AWS's blockwise MoE backward kernel (nki-samples 7af4e4d,
``contributed/neuron-team-kernels/blockwise_mm_bwd.py``), each in a kernel of our own against
numpy, both backends: an expert id loaded into a one-element tile picks a weight slice
(``w[e[0, 0], i_p, i_f]``); a per-partition scalar ``[P, 1]`` times a ``[P, 4, 128]`` tile; a
``loop_reduce`` accumulator written while its input tensor is rewritten in the next
iteration; a matmul whose moving operand has two free dims, under a mask on M."""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest

BACKENDS = ["numba", "python"]


def expert_slice_kernel(experts, w):
    """Per block, the expert id comes from HBM into a one-element tile and indexes dim 0."""
    out = nl.ndarray((experts.shape[0], 128, w.shape[2]), dtype=w.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:w.shape[2]]
    for b in nl.sequential_range(experts.shape[0]):
        e = nl.load(experts[b], dtype=np.int32)
        nl.store(out[b, i_p, i_f], value=nl.load(w[e[0, 0], i_p, i_f]))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_element_tile_indexes_the_first_dim(backend):
    rng = np.random.default_rng(1)
    experts = np.array([2, 0, 2, 1], np.int32)
    w = rng.standard_normal((3, 128, 16)).astype(np.float32)
    got = nki.jit(expert_slice_kernel, backend=backend)(experts, w)
    np.testing.assert_array_equal(got, w[experts])


def scale_rows_kernel(x, s):
    """``x[ti, i_p, 4, 128] * s[ti, i_p, 0]``: the index of ``s`` selects a [128, 1] tile."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for ti in nl.affine_range(x.shape[0]):
        xt = nl.load(x[ti])
        st = nl.load(s[ti])
        i_p = nl.arange(128)[:, None, None]
        prod = nl.multiply(xt[i_p, nl.arange(4)[None, :, None], nl.arange(128)[None, None, :]],
                           st[i_p, 0])
        nl.store(out[ti], value=prod)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_partition_scalar_broadcasts_over_two_free_dims(backend):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 128, 4, 128)).astype(np.float32)
    s = rng.standard_normal((2, 128, 1)).astype(np.float32)
    got = nki.jit(scale_rows_kernel, backend=backend)(x, s)
    np.testing.assert_array_equal(got, x * s[:, :, :, None])


def row_sums_kernel(x):
    """Row sums of [128, H] in chunks of 128: a reduce into ``tmp[hi]``, folded by
    ``loop_reduce`` into ``acc``; ``tmp`` is rewritten by the next iteration's reduce."""
    out = nl.ndarray((128, 1), dtype=np.float32, buffer=nl.shared_hbm)
    chunks = x.shape[1] // 128
    acc = nl.ndarray((nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
    acc[...] = nl.zeros((128, 1), dtype=np.float32)
    tmp = nl.ndarray((chunks, nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
    xt = nl.load(x)
    for hi in nl.affine_range(chunks):
        tmp[hi, nl.arange(128)[:, None], 0] = nisa.tensor_reduce(
            np.add, data=xt[nl.arange(128)[:, None], 128 * hi + nl.arange(128)[None, :]],
            axis=[1], dtype=np.float32)
        acc[nl.arange(128)[:, None], 0] = nl.loop_reduce(
            tmp[hi, nl.arange(128)[:, None], 0], op=np.add, loop_indices=[hi],
            dtype=np.float32)
    nl.store(out, value=acc)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_reduce_accumulates_while_its_input_is_rewritten(backend):
    x = np.random.default_rng(3).standard_normal((128, 512)).astype(np.float32)
    got = nki.jit(row_sums_kernel, backend=backend)(x)
    want = x.reshape(128, 4, 128).sum(axis=2, dtype=np.float64).sum(axis=1)[:, None]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def masked_wide_matmul_kernel(a_t, b, m_valid: int):
    """``psum[i_m, 4 x 128] += nc_matmul(a_t[K, M], b[K, 4, 128], mask=i_m < m_valid)``: a
    [128, 512] PSUM tile written through a 3-d index expression, as the MoE kernel does."""
    out = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)
    ps = nl.zeros((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum)
    at, bt = nl.load(a_t), nl.load(b)
    i_m = nl.arange(128)[:, None]
    ps[nl.arange(128)[:, None, None],
       nl.arange(4)[None, :, None] * 128 + nl.arange(128)[None, None, :]] += \
        nisa.nc_matmul(at, bt[nl.arange(128)[:, None, None], nl.arange(4)[None, :, None],
                              nl.arange(128)[None, None, :]],
                       mask=(-1 * i_m + m_valid - 1 >= 0))
    res = nl.copy(ps)
    nl.store(out, value=res)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_matmul_with_a_moving_operand_of_two_free_dims(backend):
    rng = np.random.default_rng(4)
    a_t = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 4, 128)).astype(np.float32)
    got = nki.jit(masked_wide_matmul_kernel, backend=backend)(a_t, b, 96)
    want = np.einsum("km,kjn->mjn", a_t.astype(np.float64), b).reshape(128, 512)
    np.testing.assert_allclose(got[:96], want[:96], rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(got[96:], 0)


def n_masked_wide_matmul_kernel(a_t, b):
    out = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)
    ps = nl.zeros((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum)
    at, bt = nl.load(a_t), nl.load(b)
    i_n = nl.arange(512)[None, :]
    ps[nl.arange(128)[:, None], i_n] += nisa.nc_matmul(at, bt, mask=(i_n < 256))  # n-mask
    nl.store(out, value=nl.copy(ps))
    return out


def test_a_mask_on_n_of_a_wide_moving_operand_raises():
    with pytest.raises(nki.NkiError) as info:
        nki.jit(n_masked_wide_matmul_kernel).specialize(np.ones((128, 128), np.float32),
                                                        np.ones((128, 4, 128), np.float32))
    assert info.value.code == "nki_not_implemented", str(info.value)
    assert "bounding N" in str(info.value)
    assert "test_legacy_moe_idioms.py" in str(info.value)
