"""``for _ in range(nt.scalar(t)):`` in legacy kernels: a runtime loop whose trip count is
read from a tile when the kernel runs (nki/legacy/scalar_loop.py)."""

from __future__ import annotations

import inspect

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt
import numpy as np
import pytest
from neuronxcc.nki.isa.constants import oob_mode
from neuronxcc.nki.typing import scalar
from scalar_loop_annotated import copy_kernel
from scalar_loop_helpers import add_n_times
from scalar_loop_nt_helpers import add_n_times_nt

from nki.errors import NkiError


def repeat_add(x, count):
    """``count[0, 0] * x``, by adding x that many times in a runtime loop."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    xt = nl.load(x)
    acc = nl.zeros(x.shape, dtype=nl.float32)
    n = nl.load(count)
    for _ in range(scalar(n)):
        acc[...] = nl.add(acc, xt)
    nl.store(out, value=acc)
    return out


def _count(n: int, dtype=np.int32) -> np.ndarray:
    return np.array([[n]], dtype)


@pytest.mark.parametrize("n", [0, 1, 3, -2])
def test_trip_count_is_read_at_run_time(backend, rng, n):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    k = nki.jit(repeat_add, backend=backend)
    np.testing.assert_allclose(k(x, _count(n)), max(n, 0) * x, rtol=1e-6)
    assert k.last_run_record[0].loops[0].trips == max(n, 0)


def test_one_trace_for_every_count(rng):
    x = rng.standard_normal((128, 8)).astype(np.float32)
    k = nki.jit(repeat_add)
    for n in (2, 7):
        np.testing.assert_allclose(k(x, _count(n)), n * x, rtol=1e-6)
    assert len(k._cache) == 1
    spec = k.specialize(x, _count(1))
    assert spec.num_instructions < 10          # the body once, not unrolled
    assert "range(scalar(...))" in spec.ir


def rows_up_to(x, count):
    """Rows ``0 .. count-1`` of ``x`` copied in order by a runtime loop over a loop-index
    tile (as flash_paged_attn_varlen walks its tiles); rows past the count stay zero, and
    a count past the rows is skipped by ``oob_mode.skip``."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    zeros = nl.zeros((1, x.shape[1]), dtype=x.dtype)
    for r in nl.affine_range(x.shape[0]):
        nl.store(out[r], value=zeros)
    idx = nl.zeros((1, 1), dtype=np.int32)
    n = nl.load(count)
    for _ in range(scalar(n)):
        row = nl.load(x[idx[0, 0]], mode=oob_mode.skip)
        nl.store(out[idx[0, 0]], value=row, mode=oob_mode.skip)
        idx[...] = nl.add(idx[...], 1)
    return out


@pytest.mark.parametrize("n", [0, 3, 8, 11])
def test_loop_state_in_a_tile(backend, rng, n):
    x = rng.standard_normal((8, 32)).astype(np.float32)
    want = np.zeros_like(x)
    want[:n] = x[:n]
    got = nki.jit(rows_up_to, backend=backend)(x, _count(n))
    np.testing.assert_array_equal(got, want)


def kernel_using_helper_modules(x, count, count2):
    """``(count + count2) * x``: one runtime loop in a module that imports scalar, one in a
    module that spells nt.scalar."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros(x.shape, dtype=nl.float32)
    xt = nl.load(x)
    add_n_times(acc, xt, count)
    add_n_times_nt(acc, xt, count2)
    nl.store(out, value=acc)
    return out


def test_loops_in_other_modules(backend, rng):
    x = rng.standard_normal((128, 16)).astype(np.float32)
    got = nki.jit(kernel_using_helper_modules, backend=backend)(x, _count(4), _count(2))
    np.testing.assert_allclose(got, 6 * x, rtol=1e-6)


def test_modules_without_scalar_are_not_copied(rng):
    from nki.legacy.scalar_loop import with_runtime_range

    assert with_runtime_range(copy_kernel, None) is copy_kernel
    x = rng.standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(copy_kernel)(x), x)


def start_and_stop(x, count):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros(x.shape, dtype=nl.float32)
    for _ in range(2, nt.scalar(nl.load(count)), 1):      # count - 2 trips
        acc[...] = nl.add(acc, nl.load(x))
    for i in range(3):                                    # Python's range: ints
        acc[...] = nl.add(acc, nl.multiply(nl.load(x), float(i + 1)))
    nl.store(out, value=acc)
    return out


def test_start_stop_step_and_python_range_unchanged(backend, rng):
    x = rng.standard_normal((128, 16)).astype(np.float32)
    got = nki.jit(start_and_stop, backend=backend)(x, _count(6))
    np.testing.assert_allclose(got, (4 + 1 + 2 + 3) * x, rtol=1e-6)


def scalar_as_python_int(x, count):
    n = scalar(nl.load(count))
    return x[0:int(n)]


def scalar_of_wide_tile(x, count):
    for _ in range(scalar(nl.load(count))):
        pass
    return x


def test_misuse_is_a_clear_error(rng):
    x = rng.standard_normal((128, 8)).astype(np.float32)
    with pytest.raises(NkiError, match=r"(?s)err_dynamic_control_flow_not_supported.*run "
                                       r"time.*test_scalar_loop.py:\d+"):
        nki.jit(scalar_as_python_int)(x, _count(2))
    with pytest.raises(NkiError, match=r"(?s)nki_dtype_mismatch.*32-bit.*test_scalar_loop"):
        nki.jit(scalar_of_wide_tile)(x, _count(2, np.uint32))


def test_runaway_count_stops_at_the_loop_budget(backend, rng):
    x = rng.standard_normal((128, 8)).astype(np.float32)
    k = nki.jit(repeat_add, backend=backend, loop_budget=100)
    np.testing.assert_allclose(k(x, _count(100)), 100 * x, rtol=1e-5)
    with pytest.raises(NkiError, match=r"(?s)nki_loop_budget_exceeded.*range\(scalar.*"
                                       r"test_scalar_loop.py:\d+"):
        k(x, _count(2 ** 31 - 1))


def break_out(x, count):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros(x.shape, dtype=nl.float32)
    for _ in range(scalar(nl.load(count))):   # LEFT LOOP
        acc[...] = nl.add(acc, nl.load(x))
        break
    nl.store(out, value=acc)
    return out


def test_break_out_of_a_runtime_loop_raises(rng):
    x = rng.standard_normal((128, 8)).astype(np.float32)
    with pytest.raises(NkiError) as e:
        nki.jit(break_out)(x, _count(3))
    assert e.value.code == "err_dynamic_control_flow_not_supported"
    lines, first = inspect.getsourcelines(break_out)
    line = first + next(i for i, t in enumerate(lines) if "LEFT LOOP" in t)
    assert f"test_scalar_loop.py:{line}" in str(e.value)
