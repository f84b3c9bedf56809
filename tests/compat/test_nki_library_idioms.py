"""Idioms of nki-library's kernels that its test suite (simulation mode) exercises, written
here as our own small kernels: each one a cause of failures found running the suite against
``nki``, checked against a numpy reference on both backends."""

from __future__ import annotations

import math

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


def _sharding():
    """nki-library's ``get_program_sharding_info``: (grid size, programs, this program)."""
    n = nl.num_programs(axes=0) if nl.program_ndim() > 0 else 1
    return n, n, nl.program_id(0) if nl.program_ndim() > 0 else 0


def row_shards(x):
    """Rows split ceil-wise over the LNC programs, so the last program may get none (3 rows:
    core 0 gets 2, core 1 gets 1; 1 row: core 1 gets none and writes nothing)."""
    _, n_prgs, prg = _sharding()
    b, n = x.shape
    out = nl.ndarray((b, n), dtype=x.dtype, buffer=nl.shared_hbm)
    per = math.ceil(b / n_prgs)
    rows = min(per, b - prg * per)
    if rows > 0:                       # plain Python on trace-time ints, as nki-library does
        t = nl.ndarray((rows, n), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[nl.ds(prg * per, rows), :])
        nisa.activation(dst=t, op=nl.exp, data=t)
        nisa.dma_copy(dst=out[nl.ds(prg * per, rows), :], src=t)
    return out


@pytest.mark.parametrize("b", [1, 3])
def test_an_lnc_core_with_no_share_writes_nothing(backend, b):
    x = np.random.default_rng(b).standard_normal((b, 64)).astype(np.float32)
    out = nki.jit(row_shards, backend=backend)[2](x)
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-5)


def no_core_writes(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    return out


def test_an_output_no_core_writes_is_still_an_error(backend):
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(nki.errors.NkiValidationError, match="err_tensor_output_not_written_to"):
        nki.jit(no_core_writes, backend=backend)[2](x)
