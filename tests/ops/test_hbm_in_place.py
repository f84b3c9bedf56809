"""Big read-only inputs are read where the caller has them (nki/jit/hbm.py): results are those
of a copied input, for plain, transposing and indirect reads, LNC launches, host calls, and
the inputs that must still be copied (written, small, misaligned)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiRuntimeError

hbm = sys.modules["nki.jit.hbm"]
ROWS, COLS = 512, 256            # 512 KiB of fp32: above the in-place threshold


def _scaled(x, y):
    """out = x * 2 + y, tile by tile (two big read-only inputs)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(x.shape[0] // 128):
        a = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[t * 128:(t + 1) * 128, :])
        nisa.dma_copy(dst=b, src=y[t * 128:(t + 1) * 128, :])
        nisa.scalar_tensor_tensor(dst=a, data=a, op0=nl.multiply, operand0=2.0,
                                  op1=nl.add, operand1=b)
        nisa.dma_copy(dst=out[t * 128:(t + 1) * 128, :], src=a)
    return out


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((ROWS, COLS)).astype(np.float32) for _ in range(2)]


def test_big_read_only_inputs_are_read_in_place(backend):
    x, y = _inputs()
    kernel = nki.jit(_scaled, backend=backend)
    spec = kernel.specialize(x, y)
    args = [kernel._tensor_args([x, y])[i] for i in range(2)]
    assert hbm.in_place_inputs(spec, args) == {0, 1}
    np.testing.assert_array_equal(kernel(x, y), x * 2 + y)


def test_inputs_that_must_be_copied_still_are(backend):
    x, y = _inputs(1)
    small = x[:128].copy()                                  # below the threshold
    raw = np.zeros(x.nbytes + 4, np.uint8)
    odd = np.frombuffer(raw.data, np.float32, x.size, offset=2).reshape(x.shape)  # unaligned
    odd[...] = y
    kernel = nki.jit(_scaled, backend=backend)
    spec = kernel.specialize(x, odd)
    assert hbm.in_place_inputs(spec, [kernel._tensor_args([x, odd])[i] for i in range(2)]) \
        == {0}
    np.testing.assert_array_equal(kernel(x, odd), x * 2 + y)
    np.testing.assert_array_equal(nki.jit(_scaled, backend=backend)(small, small), small * 3)


def _add_in_place(x, y):
    """x += y: a written input is copied in and written back."""
    for t in nl.affine_range(x.shape[0] // 128):
        a = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[t * 128:(t + 1) * 128, :])
        nisa.dma_copy(dst=b, src=y[t * 128:(t + 1) * 128, :])
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
        nisa.dma_copy(dst=x[t * 128:(t + 1) * 128, :], src=a)


def test_written_input_is_copied_and_written_back(backend):
    x, y = _inputs(2)
    expect = x + y
    kernel = nki.jit(_add_in_place, backend=backend)
    args = [kernel._tensor_args([x, y])[i] for i in range(2)]
    assert hbm.in_place_inputs(kernel.specialize(x, y), args) == {1}
    kernel(x, y)
    np.testing.assert_array_equal(x, expect)


def test_transposed_and_indirect_reads_in_place(backend):
    rng = np.random.default_rng(3)
    table = rng.standard_normal((2048, 64)).astype(np.float32)      # 512 KiB
    idx = rng.integers(0, 2048, (128, 1)).astype(np.int32)

    def kernel(table, idx):
        out = nl.ndarray((128, 64), dtype=table.dtype, buffer=nl.shared_hbm)
        outT = nl.ndarray((64, 128), dtype=table.dtype, buffer=nl.shared_hbm)
        ids = nl.ndarray((128, 1), dtype=idx.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ids, src=idx)
        rows = nl.ndarray((128, 64), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=rows, src=table.ap([[64, 128], [1, 64]], 0, vector_offset=ids,
                                             indirect_dim=0))
        nisa.dma_copy(dst=out, src=rows)
        tT = nl.ndarray((64, 128), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=tT, src=table[1000:1128, :])
        nisa.dma_copy(dst=outT, src=tT)
        return out, outT

    out, outT = nki.jit(kernel, backend=backend)(table, idx)
    np.testing.assert_array_equal(out, table[idx[:, 0]])
    np.testing.assert_array_equal(outT, table[1000:1128].T)


def _halves(x, y):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    half = x.shape[0] // 2
    r0 = nl.program_id(0) * half
    for t in nl.affine_range(half // 128):
        a = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        rows = slice(r0 + t * 128, r0 + (t + 1) * 128)
        nisa.dma_copy(dst=a, src=x[rows, :])
        nisa.dma_copy(dst=b, src=y[rows, :])
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.subtract)
        nisa.dma_copy(dst=out[rows, :], src=a)
    return out


def test_lnc_cores_read_the_same_inputs_in_place(backend):
    x, y = _inputs(4)
    np.testing.assert_array_equal(nki.jit(_halves, backend=backend)[2](x, y), x - y)


def _mismatched_sync(x, y):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[0:128, :])
    if nl.program_id(0) == 0:
        nisa.core_barrier(data=out, cores=(0, 1))
    else:
        nisa.sendrecv(src=t, dst=t, send_to_rank=0, recv_from_rank=0, pipe_id=0)
    nisa.dma_copy(dst=out[nl.program_id(0) * 128:(nl.program_id(0) + 1) * 128, :], src=t)
    return out


def test_host_call_errors_name_their_line_with_inputs_in_place(backend):
    x, y = _inputs(5)
    with pytest.raises(NkiRuntimeError, match=r"core_barrier at test_hbm_in_place.py:\d+"):
        nki.jit(_mismatched_sync, backend=backend)[2](x, y)
