"""PSUM capacity under a compiler's schedule (nki/jit/reorder.py): tiles that are all live
in program order but fit when each is read out right after its last matmul run (simulated
outside PSUM, exact, with a warning naming them); the schedule keeps every dependency and
never leaves a runtime loop; tiles live together in every schedule still fail."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiFragmentationWarning
from nki.ir.nodes import Access
from nki.ir.target import TARGETS
from nki.jit.liveness import walk_program
from nki.jit.reorder import schedule_keys
from nki.jit.specialize import trace_core

TILES, N = 12, 512            # twelve one-bank fp32 tiles: 24 KiB against 16 KiB of PSUM


def _accumulate_then_read(ps, xs, ws, res, out, base):
    """moe_cte's bwmm_shard_on_I order: accumulate every PSUM tile over K, then read them all."""
    for i in range(len(ps)):
        for k in range(len(xs)):
            nisa.nc_matmul(dst=ps[i], stationary=ws[k][:, i * 128:(i + 1) * 128], moving=xs[k])
    for i in range(len(ps)):
        nisa.activation(dst=res[i], op=nl.copy, data=ps[i])
        nisa.dma_copy(dst=out[nl.ds(base + i * 128, 128), :], src=res[i])


def _load(x, w):
    xs = [nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf) for _ in range(2)]
    ws = [nl.ndarray((128, w.shape[1]), dtype=w.dtype, buffer=nl.sbuf) for _ in range(2)]
    for k in range(2):
        nisa.dma_copy(dst=xs[k], src=x[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=ws[k], src=w[k * 128:(k + 1) * 128, :])
    return xs, ws


def _tiles(memory, n=TILES):
    return [nl.ndarray((128, N), dtype=nl.float32, buffer=memory) for _ in range(n)]


def read_after_all(x, w):
    out = nl.ndarray((TILES * 128, N), dtype=nl.float32, buffer=nl.shared_hbm)
    xs, ws = _load(x, w)
    _accumulate_then_read(_tiles(nl.psum), xs, ws, _tiles(nl.sbuf), out, 0)
    return out


def read_after_all_in_a_runtime_loop(x, w, n):
    """The same inside ``nl.fori_loop`` (AWS's MoE kernels run their block loop at run time)."""
    out = nl.ndarray((TILES * 128, N), dtype=nl.float32, buffer=nl.shared_hbm)
    xs, ws = _load(x, w)
    sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=n)
    count = nisa.register_alloc()
    nisa.register_load(count, sb)

    def body(_):
        _accumulate_then_read(_tiles(nl.psum), xs, ws, _tiles(nl.sbuf), out, 0)

    nl.fori_loop(0, count, body)
    return out


RNG = np.random.default_rng(3)
X = RNG.standard_normal((256, N)).astype(np.float32)
W = RNG.standard_normal((256, TILES * 128)).astype(np.float32)


def _reordered_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, NkiFragmentationWarning)
            and "nki_psum_reordered" in str(w.message)]


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_tiles_read_after_all_accumulate_run_exact_with_a_warning(backend, target):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = nki.jit(read_after_all, backend=backend, target=target, cache=False)(X, W)
    np.testing.assert_allclose(out, W.T.astype(np.float64) @ X, rtol=1e-4, atol=1e-3)
    texts = _reordered_warnings(caught)
    assert len(texts) == 1, [str(w.message) for w in caught]
    assert "8 banks" in texts[0] and "4 are simulated outside PSUM" in texts[0]
    assert "test_psum_reorder.py:" in texts[0]


def test_inside_a_runtime_loop_too(backend):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = nki.jit(read_after_all_in_a_runtime_loop, backend=backend, cache=False)(
            X, W, np.array([[2]], np.int32))
    np.testing.assert_allclose(out, W.T.astype(np.float64) @ X, rtol=1e-4, atol=1e-3)
    assert len(_reordered_warnings(caught)) == 1


def _conflicts(a, b) -> bool:
    """Whether instruction ``b`` (later in program order) depends on ``a``, by tensor."""
    wa = {x.tensor for _, x in a.writes if isinstance(x, Access)}
    ra = {x.tensor for _, x in a.reads if isinstance(x, Access)}
    wb = {x.tensor for _, x in b.writes if isinstance(x, Access)}
    rb = {x.tensor for _, x in b.reads if isinstance(x, Access)}
    return bool(wa & rb or wa & wb or ra & wb)


def _live(fn, args):
    k = nki.jit(fn, backend="python", target="trn2")
    program = trace_core(fn, args, {}, k._tensor_args(args), TARGETS["trn2"], 0, 1,
                         k.settings())[0]
    return walk_program(program)


@pytest.mark.parametrize("case", ["static", "runtime loop"])
def test_the_schedule_keeps_every_dependency_and_moves_evacuations(case):
    fn, args = ((read_after_all, (X, W)) if case == "static" else
                (read_after_all_in_a_runtime_loop, (X, W, np.array([[1]], np.int32))))
    live = _live(fn, args)
    keys = schedule_keys(live)
    order = sorted(range(len(keys)), key=keys.__getitem__)
    position = {index: rank for rank, index in enumerate(order)}
    instrs = live.instrs
    for j in range(len(instrs)):               # every pair: the order is topological
        for i in range(j + 1, len(instrs)):
            if _conflicts(instrs[j], instrs[i]):
                assert position[j] < position[i], (j, i)
    moved = [i for i in range(len(keys)) if position[i] != i]
    assert moved, "the evacuations were expected to move up"
    if live.dyn:                               # nothing enters or leaves the runtime loop
        loop = next(iter(live.dyn))
        lo, hi = live.spans[loop]
        assert sorted(position[i] for i in range(lo, hi + 1)) == list(range(lo, hi + 1))
