"""``neuronxcc.nki._private.private_api`` (nki/legacy/_private/private_api.py): ``do_while``
runs its body, then again while the condition tensor the body updates is nonzero (AWS's
blockwise_mm idiom: the index and the condition live in one-element HBM tensors); the names
whose meaning is not public raise ``ImportError`` naming them. Also the matmul mask that
restates its stationary operand's own mask (blockwise_mm's gate/up projection). Kernels of
our own against numpy, both backends."""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest
from neuronxcc.nki._private.private_api import do_while

BACKENDS = ["numba", "python"]


def row_sum_while_kernel(x, conditions):
    """Adds rows 0, 1, ... of ``x`` while ``conditions[next row]`` is nonzero, the row index
    and the flag kept in one-element HBM tensors the body updates."""
    out = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((1, x.shape[1]), dtype=np.float32, buffer=nl.sbuf)
    acc[...] = nl.zeros((1, x.shape[1]), dtype=np.float32)
    cond = nl.ndarray((1, 1), buffer=nl.hbm, dtype=np.uint8)
    nl.store(dst=cond[0], value=nl.load(conditions[0], dtype=np.uint8)[0, 0])
    index = nl.ndarray((1, 1), buffer=nl.hbm, dtype=np.int32)
    nl.store(dst=index[0, 0], value=0)
    with do_while(cond):
        row = nl.load(index[0], dtype=np.int32)
        acc[...] = nl.add(acc, nl.load(x[row[0, 0], nl.arange(x.shape[1])[None, :]]))
        nxt = nl.add(row, 1)
        nl.store(index[0], nxt[0, 0])
        nl.store(dst=cond[0], value=nl.load(conditions[nxt], dtype=np.uint8)[0, 0])
    nl.store(out, value=acc)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rows", [1, 3, 6])
def test_do_while_repeats_while_the_condition_holds(backend, rows):
    x = np.random.default_rng(rows).standard_normal((8, 16)).astype(np.float32)
    conditions = np.array([1] * rows + [0] * (9 - rows), np.uint8)
    got = nki.simulate_kernel(nki.jit(row_sum_while_kernel, backend=backend), x, conditions)
    want = np.zeros(16, np.float32)
    for r in range(rows):              # row 0, then row r while conditions[r] is 1
        want = want + x[r]
    np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_do_while_runs_its_body_once_when_the_condition_starts_false(backend):
    x = np.random.default_rng(7).standard_normal((8, 16)).astype(np.float32)
    conditions = np.zeros(9, np.uint8)
    got = nki.simulate_kernel(nki.jit(row_sum_while_kernel, backend=backend), x, conditions)
    np.testing.assert_array_equal(got[0], x[0])


@pytest.mark.parametrize("name", ["cc_div", "nc_matmul_sparse", "attention_kernel"])
def test_undocumented_private_names_raise_import_error(name):
    with pytest.raises(ImportError, match=rf"nki_not_implemented.*private_api\.{name}"):
        exec(f"from neuronxcc.nki._private.private_api import {name}", {})


def projection_kernel(w, x, valid: int):
    """blockwise_mm's projection: ``ps[i_i] += nc_matmul(w[i_k, idx][idx < valid], x,
    mask=(idx < valid))`` with ``idx`` the stationary's free (M) index, tile ``i_i``."""
    m_tiles = (valid + 127) // 128
    out = nl.ndarray((m_tiles * 128, x.shape[1]), dtype=np.float32, buffer=nl.shared_hbm)
    wt, xt = nl.load(w), nl.load(x)
    ps = nl.zeros((m_tiles, nl.par_dim(128), x.shape[1]), dtype=np.float32, buffer=nl.psum)
    for i_i in nl.affine_range(m_tiles):
        idx = nl.arange(128)[None, :] + 128 * i_i
        ps[i_i, 0:128, 0:x.shape[1]] += nisa.nc_matmul(
            wt[nl.arange(128)[:, None], idx][idx < valid], xt, mask=(idx < valid))
        res = nl.copy(ps[i_i], dtype=np.float32)
        nl.store(out[128 * i_i + nl.arange(128)[:, None], nl.arange(x.shape[1])[None, :]],
                 value=res, mask=(128 * i_i + nl.arange(128)[:, None] < valid))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("valid", [256, 200])
def test_matmul_mask_restating_the_stationary_mask_bounds_m(backend, valid):
    rng = np.random.default_rng(valid)
    w = rng.standard_normal((128, 256)).astype(np.float32)
    x = rng.standard_normal((128, 512)).astype(np.float32)
    got = nki.jit(projection_kernel, backend=backend)(w, x, valid)
    want = w.astype(np.float64).T @ x
    np.testing.assert_allclose(got[:valid], want[:valid], rtol=1e-4, atol=1e-3)


def test_do_while_instructions_name_the_kernels_lines():
    x = np.zeros((8, 16), np.float32)
    ir = nki.jit(row_sum_while_kernel).specialize(x, np.ones(9, np.uint8)).ir
    loop = next(line for line in ir.splitlines() if "do_while" in line)
    assert "test_legacy_private_api.py:" in loop, loop
    assert "contextlib" not in ir
