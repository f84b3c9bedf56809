"""Legacy partition broadcasts (``tile.broadcast_to((M, F))`` of a ``[1, F]`` tile) run as
NKI documents them, a TensorE ones-matmul (trn1 arch guide, "Alternative Use Case"), and
stay exact: against numpy, under both backends, for each lowering (fp32 in one PSUM bank,
fp32 over several banks, bf16 through SBUF, int32 by stream shuffles)."""

from __future__ import annotations

import ml_dtypes
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest

from nki.ir.nodes import Instr, walk
from nki.ir.ops import Opcode


def row_times_tile_kernel(a, row):
    """out = a * row (row broadcast over a's 128 partitions) by nisa.tensor_tensor."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    p, f = a.shape
    x = nl.load(a)
    r = nl.load(row[0:1, 0:f])
    r_all = r.broadcast_to((p, f))
    nl.store(out, value=nisa.tensor_tensor(x, r_all, op=nl.multiply))
    return out


def row_copy_kernel(row, parts):
    """out[p, :] = row[0, :] for every partition, through nl.broadcast_to and a store."""
    f = row.shape[1]
    out = nl.ndarray((parts, f), dtype=row.dtype, buffer=nl.shared_hbm)
    r = nl.load(row[0:1, 0:f])
    nl.store(out, value=nl.broadcast_to(r, shape=(parts, f)))
    return out


def _opcodes(fn, *args) -> list[Opcode]:
    spec = nki.jit(fn).specialize(*args)
    return [s.opcode for s, _ in walk(spec.cores[0].program.body) if isinstance(s, Instr)]


@pytest.mark.parametrize("f", [512, 1000])
def test_fp32_row_broadcast_is_exact(backend, rng, f):
    a = rng.standard_normal((128, f)).astype(np.float32)
    row = rng.standard_normal((1, f)).astype(np.float32)
    row[0, :3] = (np.float32(3e30), np.float32(1e-40), np.float32(-0.0))   # big, subnormal
    out = nki.jit(row_times_tile_kernel, backend=backend)(a, row)
    np.testing.assert_array_equal(out, a * row)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16, np.int32])
def test_other_dtypes_broadcast_exactly(backend, rng, dtype):
    row = (rng.standard_normal((1, 700)) * 50).astype(dtype)
    out = nki.jit(row_copy_kernel, backend=backend)(row, 96)
    np.testing.assert_array_equal(out, np.broadcast_to(row, (96, 700)))


def test_float_broadcast_is_a_tensor_engine_matmul():
    a = np.zeros((128, 512), np.float32)
    ops = _opcodes(row_times_tile_kernel, a, a[:1])
    assert ops.count(Opcode.NC_MATMUL) == 1 and Opcode.NC_STREAM_SHUFFLE not in ops
    # over one PSUM bank (512 fp32): one matmul per bank, each copied into SBUF
    ops = _opcodes(row_copy_kernel, np.zeros((1, 1000), np.float32), 128)
    assert ops.count(Opcode.NC_MATMUL) == 2 and ops.count(Opcode.TENSOR_COPY) == 2


def test_int_broadcast_keeps_stream_shuffles():
    ops = _opcodes(row_copy_kernel, np.zeros((1, 64), np.int32), 128)
    assert Opcode.NC_MATMUL not in ops and Opcode.NC_STREAM_SHUFFLE in ops


def scale_rows_kernel(a, s, scale_first):
    """out = a * s[:, None] by the old nisa.tensor_tensor with a [P, 1] operand."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    col = nl.load(s)
    y = nisa.tensor_tensor(col, x, nl.multiply) if scale_first else \
        nisa.tensor_tensor(x, col, nl.multiply)
    nl.store(out, value=y)
    return out


@pytest.mark.parametrize("scale_first", [False, True])
def test_tensor_tensor_broadcasts_a_column_along_the_free_dim(backend, rng, scale_first):
    a = rng.standard_normal((128, 1024)).astype(np.float32)
    s = rng.standard_normal((128, 1)).astype(np.float32)
    out = nki.jit(scale_rows_kernel, backend=backend)(a, s, scale_first)
    np.testing.assert_array_equal(out, a * s)


def test_tensor_tensor_other_shape_mismatches_still_fail():
    from nki.errors import NkiValidationError

    a = np.zeros((128, 1024), np.float32)
    with pytest.raises(NkiValidationError, match="nki_shape_mismatch"):
        nki.jit(scale_rows_kernel)(a, np.zeros((128, 2), np.float32), False)
