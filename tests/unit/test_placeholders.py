"""Shape-only placeholder arguments (issue 15): ``nt.tensor[[shape], dtype]`` in either
dialect specializes a kernel as an array of that shape and dtype would; it has no data, so a
call that simulates the kernel is a clear error, naming the line where control flow reads
data when the kernel has one."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import nki.typing as nt
from nki.errors import NkiError
from nki.ir.nodes import data_dependence


def copy_kernel(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out


def counted_kernel(x, n):
    """Copies the first n rows of 16 (n read at run time: a register-bounded loop)."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=n)
    count = nisa.register_alloc()
    nisa.register_load(count, sb)            # DATA LINE

    def body(i):                             # HBM to HBM, 16 rows per trip
        nisa.dma_copy(dst=out[nl.ds(i * 16, 16), :], src=x[nl.ds(i * 16, 16), :])

    nl.fori_loop(0, count, body)
    return out


def _line_of(fn, marker: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if marker in text)


def test_placeholder_specializes_like_an_array():
    kern = nki.jit(copy_kernel)
    from_placeholder = kern.specialize(nt.tensor[[128, 64], nl.bfloat16])
    from_array = kern.specialize(np.zeros((128, 64), ml_dtypes.bfloat16))
    assert from_placeholder is from_array          # one specialization, one cache entry
    (x,) = [t for t in from_array.cores[0].program.tensors if t.role == "input"]
    assert (x.shape, x.dtype.name) == ((128, 64), "bfloat16")
    assert data_dependence(from_array.cores[0].program) is None


def test_legacy_typing_placeholder_with_a_legacy_dtype():
    import neuronxcc.nki.language as lnl
    import neuronxcc.nki.typing as lnt

    kern = nki.jit(copy_kernel)
    spec = kern.specialize(lnt.tensor[[64, 32], lnl.float16])
    assert spec is kern.specialize(np.zeros((64, 32), np.float16))


def test_placeholder_without_dtype_is_an_error():
    with pytest.raises(NkiError) as e:
        nki.jit(copy_kernel).specialize(nt.tensor[128, 64])
    assert e.value.code == "nki_bad_kernel_argument"
    assert "needs a shape and a dtype" in str(e.value) and "'x'" in str(e.value)
    assert e.value.loc.filename == __file__


def test_placeholder_with_a_bad_dtype_is_an_error():
    with pytest.raises(NkiError) as e:
        nki.jit(copy_kernel).specialize(nt.tensor[[8, 8], np.float64])
    assert e.value.code == "nki_unsupported_dtype"


def test_simulating_a_placeholder_is_an_error(backend):
    kern = nki.jit(copy_kernel, backend=backend)
    with pytest.raises(NkiError) as e:
        kern(nt.tensor[[128, 64], nl.float32])
    assert e.value.code == "nki_shape_only_argument"
    assert "nt.tensor[[128, 64], float32]" in str(e.value)
    assert e.value.loc.filename == __file__
    with pytest.raises(NkiError):
        kern.profile(nt.tensor[[128, 64], nl.float32])
    x = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(kern(x), x)       # the same specialization still runs


def test_data_dependent_kernel_names_the_line(backend):
    kern = nki.jit(counted_kernel, backend=backend)
    x = np.random.default_rng(1).standard_normal((64, 8)).astype(np.float32)
    n = nt.tensor[[1, 1], nl.int32]
    spec = kern.specialize(x, n)
    where = data_dependence(spec.cores[0].program)
    assert where.lineno == _line_of(counted_kernel, "DATA LINE")
    with pytest.raises(NkiError) as e:
        kern(x, n)
    assert e.value.code == "nki_shape_only_argument"
    assert f"{where.short}" in str(e.value) and "'n'" in str(e.value)
    out = kern(x, np.array([[2]], np.int32))
    np.testing.assert_array_equal(out[:32], x[:32])


def test_placeholder_by_keyword_only_is_a_kernel_tensor():
    def kernel(x, *, y=None):
        return copy_kernel(y)

    with pytest.warns(DeprecationWarning, match="keyword-only"):
        k = nki.jit(kernel)
    spec = k.specialize(np.zeros((8, 8), np.float32), y=nt.tensor[[8, 8], nl.float32])
    prog = spec.cores[0].program
    assert [prog.tensor(i).name for i in prog.inputs] == ["x", "y"]
