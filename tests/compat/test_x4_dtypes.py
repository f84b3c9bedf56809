"""The MX x4 numpy dtypes (nki.hostx4, nki.ir.packed): numpy identity as nki-library's tests
read it, bit-exact casts and views against numpy's own uint views, errors for arithmetic,
static_cast's packing against an independent reference, x4 kernel arguments and outputs on
both backends, the build cache and the no-compiler fallback (in fresh processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.host_dtypes as dt
import nki.isa as nisa
import nki.language as nl
from nki.ir import packed
from nki.ir.types import from_host

REPO = Path(__file__).resolve().parents[2]
# name -> (element format, bits per element, unsigned storage of one packed word)
FORMATS = {
    "float8_e4m3fn_x4": (ml_dtypes.float8_e4m3fn, 8, np.uint32),
    "float8_e5m2_x4": (ml_dtypes.float8_e5m2, 8, np.uint32),
    "float4_e2m1fn_x4": (ml_dtypes.float4_e2m1fn, 4, np.uint16),
}
pytestmark = pytest.mark.skipif(not packed.NATIVE, reason="no C compiler: void fallback")


def _bits(rng, shape, storage):
    return rng.integers(0, np.iinfo(storage).max, shape, dtype=np.uint64,
                        endpoint=True).astype(storage)


@pytest.mark.parametrize("name", FORMATS)
def test_numpy_identity(name):
    d = packed.BY_NAME[name]
    t = d.type
    assert str(np.dtype(t)) == t.__name__ == name == str(np.zeros(3, d).dtype)
    assert np.dtype(name) == d and d.itemsize == np.dtype(FORMATS[name][2]).itemsize
    assert "x4" in str(np.zeros((2, 2), dt.as_dtype(name)).dtype)
    nki_type = getattr(nl, name)
    assert nki_type.host_dtype() == d and from_host(d) is nki_type
    assert packed.packed_name(d) == name and packed.packed_name(np.uint32) is None
    others = {n: e for n, e in packed.BY_NAME.items() if n != name}
    assert all(e != d and from_host(e) is not nki_type for e in others.values())


@pytest.mark.parametrize("name", FORMATS)
def test_bit_round_trips(name, rng):
    d, storage = packed.BY_NAME[name], FORMATS[name][2]
    u = _bits(rng, (5, 7), storage)
    assert not np.zeros((5, 7), d).view(storage).any()
    assert np.empty((5, 7), d).view(storage).shape == (5, 7)
    a = u.view(d)
    np.testing.assert_array_equal(a.astype(storage), u)                 # bit casts
    np.testing.assert_array_equal(u.astype(d).view(storage), u)
    assert np.asarray(a, dtype=d) is a and np.asarray(a, dtype=storage).dtype == storage
    # copies through numpy's strided, byte-swapped and unaligned paths keep the bits
    np.testing.assert_array_equal(np.ascontiguousarray(a.T).view(storage), u.T)
    swapped = a.astype(d.newbyteorder(">"))
    assert swapped.tobytes() == u.astype(np.dtype(storage).newbyteorder(">")).tobytes()
    np.testing.assert_array_equal(swapped.astype(d).view(storage), u)
    raw = np.zeros(u.nbytes + 1, np.uint8)
    odd = raw[1:].view(d).reshape(u.shape)
    odd[...] = a
    assert odd.tobytes() == u.tobytes()
    # scalars hold the bits: Python ints in, int() out
    assert [int(s) for s in a.ravel()] == u.ravel().tolist()
    b = np.array(u.ravel().tolist(), dtype=d)
    np.testing.assert_array_equal(b.view(storage), u.ravel())
    b[3] = 0
    b[4] = a[0, 0]
    assert int(b[3]) == 0 and int(b[4]) == int(u[0, 0]) and repr(b[3]).startswith("0x")
    assert d.type(int(u[1, 1])) == a[1, 1] and int(d.type()) == 0


@pytest.mark.parametrize("name", FORMATS)
def test_comparisons_are_on_bits(name, rng):
    d, storage = packed.BY_NAME[name], FORMATS[name][2]
    u, v = _bits(rng, 64, storage), _bits(rng, 64, storage)
    v[::3] = u[::3]
    np.testing.assert_array_equal(u.view(d) == v.view(d), u == v)
    np.testing.assert_array_equal(u.view(d) != v.view(d), u != v)
    np.testing.assert_array_equal(np.sort(u.view(d)).view(storage), np.sort(u))
    u[::5] = 0
    np.testing.assert_array_equal(np.nonzero(u.view(d))[0], np.nonzero(u)[0])
    np.testing.assert_array_equal(u.view(d), u.copy().view(d))
    with pytest.raises(AssertionError):
        np.testing.assert_array_equal(u.view(d), v.view(d))


@pytest.mark.parametrize("name", FORMATS)
def test_values_and_arithmetic_raise(name):
    d, storage = packed.BY_NAME[name], FORMATS[name][2]
    a = np.ones(4, storage).view(d)
    other = packed.float8_e5m2_x4 if name == "float8_e4m3fn_x4" else packed.float8_e4m3fn_x4
    for bad in (lambda: a + a, lambda: a * 2, lambda: -a, lambda: a < a, lambda: np.sum(a),
                lambda: a.astype(np.float32), lambda: a.astype(np.int32),
                lambda: a.astype(other), lambda: float(a[0]), lambda: a[0] + a[0],
                lambda: a[0] < a[0]):
        with pytest.raises(TypeError):
            bad()
    with pytest.raises(TypeError, match=r"packed values as the bits.*got float.*static_cast"):
        a[0] = 1.5
    with pytest.raises(OverflowError, match=f"does not fit the {8 * d.itemsize} bits of {name}"):
        a[0] = 1 << (8 * d.itemsize)
    with pytest.raises(OverflowError):
        d.type(-1)


def _reference_pack(values: np.ndarray, element, bits: int) -> np.ndarray:
    """Element i of a word in bits [bits*i, bits*(i+1)): a weighted sum, no shifts."""
    codes = values.astype(element).view(np.uint8).astype(np.uint64) % (1 << bits)
    weights = (1 << (bits * np.arange(4))).astype(np.uint64)
    return (codes.reshape(values.shape[:-1] + (-1, 4)) * weights).sum(-1)


@pytest.mark.parametrize("name", FORMATS)
def test_static_cast_packs(name, rng):
    element, bits, storage = FORMATS[name]
    x = np.clip(rng.standard_normal((16, 32)) * 2, -6, 6).astype(np.float32)
    q = dt.static_cast(x, getattr(dt, name))
    assert str(q.dtype) == name and q.shape == (16, 8)
    np.testing.assert_array_equal(q.view(storage), _reference_pack(x, element, bits))
    np.testing.assert_array_equal(q.astype(storage), _reference_pack(x, element, bits))
    np.testing.assert_array_equal(dt.static_cast(q, np.float32),
                                  x.astype(element).astype(np.float32))


def _sbuf(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _mx_kernel(wq, ws, xq, xs):
    """An MXFP8 matmul of x4 HBM arguments; returns it, wq back and half of xq."""
    K, M, N = wq.shape[0], wq.shape[1], xq.shape[1]
    wq_sb = _sbuf(wq)
    ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=ps, stationary=wq_sb, moving=_sbuf(xq), stationary_scale=_sbuf(ws),
                      moving_scale=_sbuf(xs))
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=ps)
    y = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=y, src=res)
    w_back = nl.ndarray(wq.shape, dtype=wq.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=w_back, src=wq_sb)
    half = nl.ndarray(xq.shape, dtype=xq.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=half[0:K // 2, :], src=xq[0:K // 2, :])
    return y, w_back, half


def test_kernel_takes_and_returns_x4(backend, rng):
    K, M, N = 64, 8, 16
    w = rng.uniform(-4, 4, (K, 4 * M)).astype(np.float32)
    x = rng.uniform(-4, 4, (K, 4 * N)).astype(np.float32)
    wq, xq = dt.static_cast(w, dt.float8_e4m3fn_x4), dt.static_cast(x, dt.float8_e4m3fn_x4)
    ws = np.full((K, M), 126, np.uint8)                        # 2**-1
    xs = np.full((K, N), 129, np.uint8).view(ml_dtypes.float8_e8m0fnu)   # 2**2
    y, w_back, half = nki.jit(_mx_kernel, backend=backend, cache=False)(wq, ws, xq, xs)
    # value i of element (k, m) is row 4k + i of the contraction
    wv = w.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    xv = x.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    expect = 2.0 * wv.reshape(K, M, 4).transpose(0, 2, 1).reshape(4 * K, M).T @ \
        xv.reshape(K, N, 4).transpose(0, 2, 1).reshape(4 * K, N)
    np.testing.assert_allclose(y, expect, rtol=1e-5, atol=1e-5 * np.abs(expect).max())
    assert str(w_back.dtype) == "float8_e4m3fn_x4" and w_back.dtype == wq.dtype
    np.testing.assert_array_equal(w_back, wq)
    np.testing.assert_array_equal(half[:K // 2], xq[:K // 2])
    # never-written packed words read back all-ones bits (NaN lanes in fp8)
    assert (half[K // 2:].view(np.uint32) == 0xFFFFFFFF).all()


def _fresh_python(code: str, cache: Path, **env) -> dict:
    """Run ``code`` in a new interpreter on this checkout with its own nki cache; its last
    stdout line is JSON."""
    run_env = {**os.environ, "PYTHONPATH": str(REPO), "NKI_CACHE_DIR": str(cache), **env}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=run_env,
                          capture_output=True, text=True, check=True, timeout=600)
    return json.loads(done.stdout.strip().splitlines()[-1])


PROBE = """
    import json, numpy as np, nki.ir.packed as p, nki.hostx4 as h
    print(json.dumps({"native": p.NATIVE, "compiled": h.compiled_seconds is not None,
                      "lib": str(h.library_path()), "str": str(p.float8_e4m3fn_x4)}))
"""


def test_build_is_cached_and_locked(tmp_path):
    """Two first imports at once build once (the other waits on the lock); later ones load."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "NKI_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(PROBE)], env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    firsts = [json.loads(p.communicate(timeout=600)[0].splitlines()[-1]) for p in procs]
    assert [f["native"] for f in firsts] == [True, True]
    assert sorted(f["compiled"] for f in firsts) == [False, True]
    lib = Path(firsts[0]["lib"])
    assert lib.parent.parent == tmp_path / "x4dtype" and firsts[1]["lib"] == str(lib)
    stamp = lib.stat().st_mtime_ns
    again = _fresh_python(PROBE, tmp_path)
    assert again == {**firsts[0], "compiled": False, "str": "float8_e4m3fn_x4"}
    assert lib.stat().st_mtime_ns == stamp


FALLBACK = """
    import json, warnings, numpy as np
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import nki.host_dtypes as dt
    from nki.ir import packed
    from nki.ir.types import from_host
    from nki.jit.args import signature_of
    x = np.arange(16, dtype=np.float32).reshape(2, 8) / 4
    q = dt.static_cast(x, dt.float8_e5m2_x4)
    e4, e5 = np.zeros(2, dt.float8_e4m3fn_x4), np.zeros(2, dt.float8_e5m2_x4)
    print(json.dumps({
        "native": packed.NATIVE, "warnings": [str(w.message) for w in caught],
        "str": str(q.dtype), "bits": q.view(np.uint32).tolist(),
        "back": dt.static_cast(q, np.float32).tolist(),
        "kinds": [from_host(e4.dtype).name, from_host(e5.dtype).name],
        "keys_differ": signature_of(e4) != signature_of(e5)}))
"""


def test_without_a_compiler_falls_back_to_void_dtypes(tmp_path):
    out = _fresh_python(FALLBACK, tmp_path, CC=str(tmp_path / "no-such-cc"))
    assert not out["native"] and out["str"] == "|V4"
    (warning,) = out["warnings"]
    assert "could not build its MX x4 numpy dtypes" in warning and "no-such-cc" in warning
    assert "'|V4'" in warning and ".view(np.uint32)" in warning
    x = np.arange(16, dtype=np.float32).reshape(2, 8) / 4
    assert out["bits"] == _reference_pack(x, ml_dtypes.float8_e5m2, 8).tolist()
    assert out["back"] == x.astype(ml_dtypes.float8_e5m2).astype(np.float32).tolist()
    assert out["kinds"] == ["float8_e4m3fn_x4", "float8_e5m2_x4"] and out["keys_differ"]
    assert not (tmp_path / "x4dtype").exists() or not list((tmp_path / "x4dtype").rglob("*.so"))
