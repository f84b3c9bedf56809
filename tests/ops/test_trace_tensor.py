"""``nki.tensor`` trace-time constants fed to ``nl.shared_constant`` (AWS's documented
``ntensor.identity`` / ``zeros`` / ``arange`` builders), and ``nki.dtype`` as the annotation
type of dtype parameters; both backends against numpy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import nki.tensor as ntensor


def _load_constant(const):
    t = nl.ndarray(const.shape, dtype=const.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=const)
    out = nl.ndarray(const.shape, dtype=const.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def _constants():
    eye = nl.shared_constant(ntensor.identity(64, nl.float32))
    ones = nl.shared_constant(ntensor.zeros((8, 16), dtype=nl.int8) + 1, dtype=nl.int16)
    ramp = nl.shared_constant(ntensor.arange(0, 32, 1, dtype=nl.int32).reshape(1, 32),
                              dtype=nl.float32)
    half = nl.shared_constant(ntensor.identity(16, dtype=nl.bfloat16))
    return _load_constant(eye), _load_constant(ones), _load_constant(ramp), _load_constant(half)


def test_trace_time_constants(backend):
    eye, ones, ramp, half = nki.jit(_constants, backend=backend, cache=False)()
    np.testing.assert_array_equal(eye, np.eye(64, dtype=np.float32))
    assert ones.dtype == np.int16
    np.testing.assert_array_equal(ones, np.ones((8, 16), np.int16))
    np.testing.assert_array_equal(ramp, np.arange(32, dtype=np.float32).reshape(1, 32))
    assert half.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(half.astype(np.float32), np.eye(16, dtype=np.float32))


@pytest.mark.parametrize("build, expect", [
    (lambda: ntensor.identity(3, nl.uint8), np.eye(3, dtype=np.uint8)),
    (lambda: ntensor.zeros(4), np.zeros(4, np.float32)),
    (lambda: ntensor.arange(5), np.arange(5, dtype=np.int32)),
    (lambda: ntensor.arange(2, 11, 3, dtype=nl.float32), np.array([2, 5, 8], np.float32)),
])
def test_builders_are_host_arrays_of_the_nki_dtype(build, expect):
    got = build()
    assert isinstance(got, ntensor.TraceTimeTensor)
    assert got.dtype == expect.dtype
    np.testing.assert_array_equal(got, expect)


def _scaled(x, dtype: nki.dtype = nl.float32):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    y = nl.ndarray(x.shape, dtype=dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=y, data=t, op0=nl.multiply, operand0=2.0)
    out = nl.ndarray(x.shape, dtype=dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=y)
    return out


def test_nki_dtype_annotates_dtype_parameters(backend):
    assert isinstance(nl.bfloat16, nki.dtype) and isinstance(nl.float32, nki.dtype)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = nki.jit(_scaled, backend=backend, cache=False)(x, dtype=nl.bfloat16)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.astype(np.float32), x * 2)


def _load_file_constant(path):
    return _load_constant(nl.shared_constant(path))


def test_shared_constant_from_an_npy_file(backend, tmp_path):
    """nki-library's topk writes its constants with np.save and passes the file's path."""
    table = np.random.default_rng(3).standard_normal((32, 24)).astype(np.float32)
    path = tmp_path / "table.npy"
    np.save(path, table)
    k = nki.jit(_load_file_constant, backend=backend)
    np.testing.assert_array_equal(k(str(path)), table)
    table2 = table + 1                     # same path, new contents: never a stale program
    np.save(path, table2)
    np.testing.assert_array_equal(nki.jit(_load_file_constant, backend=backend)(str(path)),
                                  table2)


def test_shared_constant_unreadable_file(tmp_path):
    missing = str(tmp_path / "missing.npy")
    with pytest.raises(nki.NkiValidationError, match=r"nki_invalid_argument.*cannot read the "
                       r"\.npy file(.|\n)*test_trace_tensor.py:\d+"):
        nki.jit(_load_file_constant, cache=False)(missing)
