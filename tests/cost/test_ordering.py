"""Documented performance advice, as orderings of the model's estimates: each change the
NKI performance guide recommends must make the estimate smaller, on every generation.

(The model reads the IR only; there is no backend to parametrise over.)"""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.cost import estimate

GENS = ("trn1", "trn2", "trn3")


def latency(fn, target, *args) -> float:
    return estimate(nki.jit(fn), target=target)(*args).latency_ns


def scale_rows(x, w, hoisted):
    """out[t] = x[t] * w for each 128-row tile t; ``w`` loaded once or in every iteration."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    F = x.shape[1]
    if hoisted:
        wt = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=wt, src=w)
    for t in nl.affine_range(x.shape[0] // 128):
        if not hoisted:
            wt = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=wt, src=w)
        a = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[t * 128:(t + 1) * 128, :])
        nisa.tensor_tensor(dst=a, data1=a, data2=wt, op=nl.multiply)
        nisa.dma_copy(dst=out[t * 128:(t + 1) * 128, :], src=a)
    return out


@pytest.mark.parametrize("target", GENS)
def test_hoisting_a_load_out_of_the_loop_is_faster(target):
    x, w = np.ones((1024, 1024), np.float32), np.ones((128, 1024), np.float32)
    assert latency(scale_rows, target, x, w, True) < latency(scale_rows, target, x, w, False)


def exp_rows(x, buffers):
    """Load, three activations (ScalarE), store per tile, through ``buffers`` tiles made
    before the loop."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    F = x.shape[1]
    bufs = [nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf) for _ in range(buffers)]
    res = [nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf) for _ in range(buffers)]
    for t in range(x.shape[0] // 128):
        a, r = bufs[t % buffers], res[t % buffers]
        nisa.dma_copy(dst=a, src=x[t * 128:(t + 1) * 128, :])
        nisa.activation(dst=r, op=nl.exp, data=a)
        nisa.activation(dst=r, op=nl.tanh, data=r)       # compute about as long as the DMAs
        nisa.activation(dst=r, op=nl.exp, data=r)
        nisa.dma_copy(dst=out[t * 128:(t + 1) * 128, :], src=r)
    return out


@pytest.mark.parametrize("target", GENS)
def test_double_buffering_is_faster(target):
    x = np.ones((2048, 2048), np.float32)
    assert latency(exp_rows, target, x, 2) < latency(exp_rows, target, x, 1)


def copy_in_chunks(x, cols):
    """Copy x through SBUF in DMAs of ``cols`` columns (bytes per partition = 4 * cols)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    for c in range(0, x.shape[1], cols):
        nisa.dma_copy(dst=a[:, c:c + cols], src=x[:, c:c + cols])
    nisa.dma_copy(dst=out, src=a)
    return out


@pytest.mark.parametrize("target", GENS)
def test_larger_transfers_per_partition_are_faster(target):
    x = np.ones((128, 8192), np.float32)
    # 8 KiB per partition per DMA versus 256 B (overhead-bound, per the DMA guide)
    assert latency(copy_in_chunks, target, x, 2048) < latency(copy_in_chunks, target, x, 64)


def square_tiles(x, rows):
    """Square x on VectorE in tiles of ``rows`` partitions."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(x.shape[0] // rows):
        a = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[t * rows:(t + 1) * rows, :])
        nisa.tensor_tensor(dst=a, data1=a, data2=a, op=nl.multiply)
        nisa.dma_copy(dst=out[t * rows:(t + 1) * rows, :], src=a)
    return out


@pytest.mark.parametrize("target", GENS)
def test_128_partition_tiles_are_faster(target):
    x = np.ones((1024, 512), np.float32)
    assert latency(square_tiles, target, x, 128) < latency(square_tiles, target, x, 32)


def scale_in_pieces(x, cols):
    """Scale one SBUF tile with one tensor_scalar per ``cols`` columns."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    for c in range(0, x.shape[1], cols):
        nisa.tensor_scalar(dst=a[:, c:c + cols], data=a[:, c:c + cols], op0=nl.multiply,
                           operand0=2.0)
        nisa.tensor_scalar(dst=a[:, c:c + cols], data=a[:, c:c + cols], op0=nl.add,
                           operand0=1.0)
    nisa.dma_copy(dst=out, src=a)
    return out


@pytest.mark.parametrize("target", GENS)
def test_fewer_larger_instructions_are_faster(target):
    x = np.ones((128, 2048), np.float32)
    assert latency(scale_in_pieces, target, x, 2048) < latency(scale_in_pieces, target, x, 16)
