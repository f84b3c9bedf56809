"""Tensor-instance identity through reroll (issue 15 §3, §7): a tile allocated in a loop
body is a new instance every iteration, and the rerolled loop's operands still say which
(``Placed.instance``), checked against the instances the trace allocated; the printed IR
gives one line per allocation site, so it does not grow with trip counts."""

from __future__ import annotations

import inspect

import numpy as np
from test_reroll import _triangle

import nki
import nki.isa as nisa
import nki.language as nl
from nki.ir.nodes import FreshInstance, Instr, Loop
from nki.ir.printer import format_program


def tiles_kernel(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    keep = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)     # one instance
    nisa.memset(dst=keep, value=1.0)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)    # TILE SITE
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
        nisa.tensor_tensor(dst=t, data1=t, data2=keep, op=nl.add)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=t)
    return out


def _line(fn, marker: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if marker in text)


def _site_ids(program, fn, marker: str) -> list[int]:
    line = _line(fn, marker)
    return [t.id for t in program.tensors if t.loc is not None and t.loc.lineno == line]


def test_each_iteration_touches_its_own_instance(backend, rng):
    x = rng.standard_normal((4 * 128, 8)).astype(np.float32)
    kern = nki.jit(tiles_kernel, backend=backend, cache=False)
    np.testing.assert_allclose(kern(x), x + 1, rtol=1e-6)
    program = kern.specialize(x).cores[0].program
    (loop,) = [s for s in program.body if isinstance(s, Loop)]
    truth = _site_ids(program, tiles_kernel, "TILE SITE")
    assert len(truth) == 4
    load, add, store = [s for s in loop.body if isinstance(s, Instr)]
    slot = loop.slot
    for k in range(4):
        at = {slot: k}
        assert load.operand("dst").instance_key(at) == truth[k]
        assert add.operand("data1").instance_key(at) == truth[k]
        assert store.operand("src").instance_key(at) == truth[k]
        # the tile made before the loop is one instance in every iteration
        assert add.operand("data2").instance is None
        assert add.operand("data2").instance_key(at) == add.operand("data2").tensor


def test_non_affine_instances_still_fold_and_stay_apart(backend, rng):
    """A triangular nest allocates i+1 tiles in outer iteration i: instance ids are not
    affine, so the operand names the slots its instance changes with."""
    x = rng.standard_normal((3 * 128, 8)).astype(np.float32)
    kern = nki.jit(_triangle, backend=backend, cache=False)
    expect = np.cumsum(x.reshape(3, 128, 8).astype(np.float64), axis=0).reshape(x.shape)
    np.testing.assert_allclose(kern(x), expect, rtol=1e-5, atol=1e-5)
    spec = kern.specialize(x)
    assert spec.num_instructions == 4            # still one folded nest
    outer = spec.cores[0].program.body[0]
    inner = next(s for s in outer.body if isinstance(s, Loop))
    load = next(s for s in inner.body if isinstance(s, Instr))
    inst = load.operand("dst").instance
    assert isinstance(inst, FreshInstance)
    assert set(inst.slots) == {outer.slot, inner.slot}
    keys = {load.operand("dst").instance_key({outer.slot: i, inner.slot: j})
            for i in range(3) for j in range(i + 1)}
    assert len(keys) == len(_site_ids(spec.cores[0].program, _triangle, " t = nl.ndarray")) == 6


def test_printed_ir_has_one_line_per_site(rng):
    sizes = {}
    for n in (2, 16):
        x = rng.standard_normal((n * 128, 8)).astype(np.float32)
        spec = nki.jit(tiles_kernel, cache=False).specialize(x)
        sizes[n] = len(spec.ir.splitlines())
        assert f"x{n} (" in spec.ir                  # the site names its instance count
        every = format_program(spec.cores[0].program, every_instance=True)
        assert len(every.splitlines()) == sizes[n] + n - 1
    assert sizes[2] == sizes[16]
