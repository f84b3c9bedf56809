"""NKI 0.1 traced a loop body once (nki/legacy/loops.py): direct allocations whose address
a counter in the body advances keep their first iteration's address; a ``return``/``break``
inside a traced-once loop of the kernel or its module's functions runs the body up to it for
every iteration, as NKI 0.1 did (nki/legacy/early_exit.py), and one in another module's
function raises instead of silently running one iteration; a placed tile past the end of
its memory raises. Kernels of our own against numpy, both backends."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.language as nl
import numpy as np
import pytest

from nki.errors import NkiError
from nki.legacy.loops import LegacyLoopWarning

_SOURCE = Path(__file__).read_text().splitlines()


def _line(marker: str) -> int:
    return next(i for i, s in enumerate(_SOURCE, 1) if s.rstrip().endswith(f"# {marker}"))


def counter_alloc_kernel(a):
    """Double-buffered tiles at ``cur``, a counter the loop body advances (AWS's
    allocated_attention idiom): 8 iterations x 32 KiB would run past the SBUF if every
    iteration took a new address, as unrolling alone would give."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    cur = 0
    n = a.shape[1]
    for t in nl.affine_range(a.shape[0] // 128):
        x = nl.ndarray((2, nl.par_dim(128), n), dtype=a.dtype,
                       buffer=ncc.sbuf.mod_alloc(base_addr=cur, num_free_tiles=(2,)))
        cur += 2 * n * 4
        i_p, i_f = nl.mgrid[0:128, 0:n]
        x[t % 2, i_p, i_f] = nl.load(a[t * 128 + i_p, i_f])
        x[(t + 1) % 2, i_p, i_f] = nl.multiply(x[t % 2, i_p, i_f], 2.0)
        nl.store(out[t * 128 + i_p, i_f], value=x[(t + 1) % 2, i_p, i_f])
    return out


def test_counter_address_in_loop_keeps_first_iteration(backend, rng):
    a = rng.standard_normal((128 * 8, 4096)).astype(np.float32)
    with pytest.warns(LegacyLoopWarning, match="traced a loop body once"):
        out = nki.jit(counter_alloc_kernel, backend=backend)(a)
    np.testing.assert_array_equal(out, 2 * a)


def static_counter_kernel(a):
    """Under nl.static_range (unrolled by NKI 0.1 too) each iteration's tile really moves:
    4 tiles side by side, all read at the end."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    cur, tiles = 0, []
    i_p, i_f = nl.mgrid[0:128, 0:a.shape[1]]
    for t in nl.static_range(a.shape[0] // 128):
        x = nl.ndarray((nl.par_dim(128), a.shape[1]), dtype=a.dtype,
                       buffer=ncc.sbuf.mod_alloc(base_addr=cur))
        cur += a.shape[1] * 4
        x[i_p, i_f] = nl.load(a[t * 128 + i_p, i_f])
        tiles.append(x)
    for t, x in enumerate(tiles):
        nl.store(out[t * 128 + i_p, i_f], value=x[i_p, i_f])
    return out


def test_static_range_allocations_move(backend, rng):
    a = rng.standard_normal((128 * 4, 64)).astype(np.float32)
    out = nki.jit(static_counter_kernel, backend=backend)(a)
    np.testing.assert_array_equal(out, a)


def beyond_sbuf_kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    where = ncc.sbuf.mod_alloc(base_addr=300 * 1024)
    x = nl.ndarray((nl.par_dim(128), 512), dtype=a.dtype, buffer=where)  # beyond
    x[...] = nl.load(a)
    nl.store(out, value=x)
    return out


def test_address_past_the_sbuf_raises():
    with pytest.raises(NkiError) as info:
        nki.jit(beyond_sbuf_kernel).specialize(np.ones((128, 512), np.float32))
    assert info.value.code == "nki_address_out_of_range", str(info.value)
    assert info.value.loc.lineno == _line("beyond")


def return_in_loop_kernel(a):
    """AWS's blockwise_mm_bwd has its ``return`` indented into the store loop."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:a.shape[1]]
    for t in nl.affine_range(a.shape[0] // 128):
        nl.store(out[t * 128 + i_p, i_f], value=nl.load(a[t * 128 + i_p, i_f]))
        return out


def break_in_nested_loops_kernel(a):
    """A ``break`` in a sequential loop and a ``return`` two loops deep: NKI 0.1 ran each
    body up to the statement for every iteration, then left (the store after the inner loop
    never ran: the trace ended at the return)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    n = a.shape[1] // 2
    i_p, i_f = nl.mgrid[0:128, 0:n]
    for t in nl.affine_range(a.shape[0] // 128):
        for h in nl.sequential_range(2):
            x = nl.load(a[t * 128 + i_p, h * n + i_f])
            nl.store(out[t * 128 + i_p, h * n + i_f], value=nl.multiply(x, 3.0))
            if h >= 0:
                break
        for h in nl.affine_range(2):
            y = nl.load(a[t * 128 + i_p, h * n + i_f])
            nl.store(out[t * 128 + i_p, h * n + i_f], value=nl.add(y, 1.0), mask=(h == 1))
            return out
        nl.store(out[t * 128 + i_p, i_f], value=nl.zeros((128, n), dtype=a.dtype))


def _scaled_by(factor):
    def closure_kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:a.shape[1]]
        for t in nl.affine_range(a.shape[0] // 128):
            nl.store(out[t * 128 + i_p, i_f], value=nl.multiply(nl.load(a[t * 128 + i_p, i_f]),
                                                                 factor))
            return out
    return closure_kernel


def _store_tiles(a, out, i_p, i_f):
    """blockwise_mm_bwd's shape: the ``return`` is in a helper of the kernel's module."""
    for t in nl.affine_range(a.shape[0] // 128):
        nl.store(out[t * 128 + i_p, i_f], value=nl.load(a[t * 128 + i_p, i_f]))
        return out


def helper_return_kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:a.shape[1]]
    return _store_tiles(a, out, i_p, i_f)


_OTHER_MODULE = """
def store_tiles(nl, a, out, i_p, i_f):
    for t in nl.affine_range(a.shape[0] // 128):
        nl.store(out[t * 128 + i_p, i_f], value=nl.load(a[t * 128 + i_p, i_f]))
        return out
"""


def _other_module_helper():
    space = {"__name__": "other_helpers"}
    exec(compile(_OTHER_MODULE, "other_helpers.py", "exec"), space)
    return space["store_tiles"]


def foreign_helper_kernel(a):
    """The ``return`` is in a function of another module: not replayed, so it raises."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:a.shape[1]]
    return _other_module_helper()(nl, a, out, i_p, i_f)


@pytest.mark.parametrize("backend", ["numba", "python"])
def test_return_inside_loop_runs_every_iteration(backend):
    a = np.random.default_rng(3).standard_normal((384, 8)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(return_in_loop_kernel, backend=backend)(a), a)


@pytest.mark.parametrize("backend", ["numba", "python"])
def test_break_and_nested_return_replay_nki_0_1(backend):
    a = np.random.default_rng(4).standard_normal((256, 16)).astype(np.float32)
    want = a * np.float32(3.0)
    want[:, 8:] = a[:, 8:] + np.float32(1.0)      # the masked second half of the return loop
    got = nki.jit(break_in_nested_loops_kernel, backend=backend)(a)
    np.testing.assert_array_equal(got[:, :8], want[:, :8])
    np.testing.assert_allclose(got[:, 8:], want[:, 8:], rtol=1e-6)


def test_closure_kernel_keeps_its_cells():
    a = np.random.default_rng(5).standard_normal((256, 8)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(_scaled_by(2.0))(a), a * np.float32(2.0))


@pytest.mark.parametrize("backend", ["numba", "python"])
def test_return_in_a_helper_of_the_module_runs_every_iteration(backend):
    a = np.random.default_rng(6).standard_normal((384, 8)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(helper_return_kernel, backend=backend)(a), a)


def test_return_in_another_modules_function_still_raises():
    with pytest.raises(NkiError) as info:
        nki.jit(foreign_helper_kernel).specialize(np.ones((256, 8), np.float32))
    err = info.value
    assert err.code == "nki_not_implemented", str(err)
    assert "other_helpers.py:3" in str(err)
    assert "after iteration 0 of 2" in str(err)


def test_static_cast_of_host_arrays():
    """The old harnesses cast numpy inputs with nl.static_cast (nki-samples' tests)."""
    x = np.array([[1.00390625, -3.7], [1e9, 0.5]], np.float32)
    np.testing.assert_array_equal(nl.static_cast(x, nl.bfloat16),
                                  x.astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(nl.static_cast(x, np.int8),
                                  np.array([[1, -4], [127, 0]], np.int8))
    assert nl.static_cast(3.7, nl.int32) == 4


def nested_def_return_kernel(a):
    """A loop holding a nested function whose own loop returns: only the nested function
    gets the exit guards (the outer loop has no return of the kernel's)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:a.shape[1]]
    for t in nl.affine_range(a.shape[0] // 128):
        def store_tile():
            for _ in nl.affine_range(1):
                nl.store(out[t * 128 + i_p, i_f], value=nl.load(a[t * 128 + i_p, i_f]))
                return None
        store_tile()
    return out


@pytest.mark.parametrize("backend", ["numba", "python"])
def test_a_nested_functions_return_leaves_the_outer_loop_alone(backend):
    a = np.random.default_rng(8).standard_normal((256, 8)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(nested_def_return_kernel, backend=backend)(a), a)
