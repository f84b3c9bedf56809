"""Generated programs compiled straight to LLVM IR (``nki.sim.compile._Translator``): every
statement form codegen emits is translated (no Numba fallback), runs bit for bit like the
python backend, and faults where it does."""

from __future__ import annotations

import ast
import importlib

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiRuntimeError

cc = importlib.import_module("nki.sim.compile")
objcache = importlib.import_module("nki.sim.objcache")
F = 32


@pytest.fixture
def direct_only(monkeypatch):
    """Every program compiles afresh through the translator: kept object code is ignored
    once per program and the Numba path fails the test."""
    seen: set[str] = set()
    load = objcache.load

    def fresh_load(folder, name):
        if name.startswith("nki_prog_") and name not in seen:
            seen.add(name)
            return None
        return load(folder, name)

    import_module = cc.import_module

    def no_numba(name, path):           # helper entries still compile with Numba
        if name.startswith("nki_prog_"):
            raise AssertionError("the program fell back to Numba")
        return import_module(name, path)

    monkeypatch.setattr(objcache, "load", fresh_load)
    monkeypatch.setattr(cc, "import_module", no_numba)


def _both(fn, *args):
    outs = [nki.jit(fn, backend=b, cache=False)(*args) for b in ("numba", "python")]
    a, b = (o if isinstance(o, tuple) else (o,) for o in outs)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))
    return a


def _count(n):
    sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=n)
    reg = nisa.register_alloc()
    nisa.register_load(reg, sb)
    return sb, reg


def triangle(x):
    """Affine loops with a triangular trip count, peeled iterations and row runs."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n = x.shape[0] // 128
    for i in nl.affine_range(n):
        acc = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        for j in nl.sequential_range(i + 1):
            t = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[j * 128:(j + 1) * 128, :])
            nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=acc)
    return out


def runtime_loops(x, n):
    """fori_loop with a register offset (checked), while_loop, an oob_mode.skip guard."""
    out = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    cnt, count = _count(n)

    def body(i):
        a = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[nl.ds(i * 128, 128), :])
        nisa.tensor_tensor(dst=acc, data1=acc, data2=a, op=nl.add)

    nl.fori_loop(0, count, body)
    nxt = nisa.register_alloc(0)

    def twice(r):
        nisa.tensor_scalar(dst=acc, data=acc, op0=nl.multiply, operand0=2.0)
        nisa.tensor_scalar(dst=cnt, data=cnt, op0=nl.subtract, operand0=1.0)
        nisa.register_load(nxt, cnt)
        return nxt

    nl.while_loop(count, twice)
    t = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=t, value=-1.0)
    nisa.dma_copy(dst=t, src=x[nl.ds(count * 128, 128), :], oob_mode=nisa.oob_mode.skip)
    nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_affine_nest_matches_python_backend(direct_only):
    x = np.random.default_rng(0).standard_normal((5 * 128, F)).astype(np.float32)
    (out,) = _both(triangle, x)
    expect = np.cumsum(x.reshape(5, 128, F), axis=0, dtype=np.float32).reshape(x.shape)
    np.testing.assert_allclose(out, expect, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("n", [0, 2, 4])
def test_runtime_loops_registers_and_guards_match_python_backend(direct_only, n):
    x = np.random.default_rng(1).standard_normal((4 * 128, F)).astype(np.float32)
    _both(runtime_loops, x, np.array([[n]], np.int32))


def test_register_offset_fault_names_the_line(direct_only):
    x = np.zeros((4 * 128, F), np.float32)
    k = nki.jit(runtime_loops, cache=False)
    with pytest.raises(NkiRuntimeError,
                       match=r"nki_runtime_out_of_bounds.*test_program_compile.py"):
        k(x, np.array([[5]], np.int32))


def test_unknown_python_is_left_to_numba():
    src = "def f(ADDR, H, S, PS, IT, FT, L):\n    x = [1]\n    return -1\n"
    with pytest.raises(cc._UnsupportedError):
        cc._Translator.module_ir(ast.parse(src), "f", "e")
    src = "def f(ADDR, H, S, PS, IT, FT, L):\n    L[-1] = 2\n    return -1\n"
    with pytest.raises(cc._UnsupportedError):
        cc._Translator.module_ir(ast.parse(src), "f", "e")
