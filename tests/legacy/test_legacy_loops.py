"""NKI 0.1 traced a loop body once (nki/legacy/loops.py): direct allocations whose address
a counter in the body advances keep their first iteration's address; a ``return`` inside a
loop body raises instead of silently running one iteration; a placed tile past the end of
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
    for t in nl.affine_range(a.shape[0] // 128):  # loop
        nl.store(out[t * 128 + i_p, i_f], value=nl.load(a[t * 128 + i_p, i_f]))
        return out


def test_return_inside_loop_raises():
    with pytest.raises(NkiError) as info:
        nki.jit(return_in_loop_kernel).specialize(np.ones((256, 8), np.float32))
    err = info.value
    assert err.code == "nki_not_implemented", str(err)
    assert f"test_legacy_loops.py:{_line('loop')}" in str(err)
    assert "after iteration 0 of 2" in str(err)


def test_static_cast_of_host_arrays():
    """The old harnesses cast numpy inputs with nl.static_cast (nki-samples' tests)."""
    x = np.array([[1.00390625, -3.7], [1e9, 0.5]], np.float32)
    np.testing.assert_array_equal(nl.static_cast(x, nl.bfloat16),
                                  x.astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(nl.static_cast(x, np.int8),
                                  np.array([[1, -4], [127, 0]], np.int8))
    assert nl.static_cast(3.7, nl.int32) == 4
