"""Index expressions, predicates and mask rectangles of the legacy dialect (no compile)."""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import numpy as np
import pytest

from nki.legacy.index import Predicate
from nki.legacy.mask import rectangle


def _values(e) -> np.ndarray:
    """The index expression evaluated the way numpy would evaluate the arrays."""
    grids = np.meshgrid(*(np.arange(n) for n in e.sizes), indexing="ij")
    return e.const + sum(c * g for c, g in zip(e.coefs, grids))


def test_affine_algebra_matches_numpy():
    a, b = np.arange(128)[:, None], np.arange(4, 68)[None, :]
    i_p, i_f = nl.arange(128)[:, None], nl.arange(4, 68)[None, :]
    for expr, ref in ((3 * i_p + 2, 3 * a + 2), (i_p - i_f, a - b), (7 - 2 * i_f, 7 - 2 * b),
                      (i_p + i_p, a + a), (-(i_f * 2) + i_p * 64, -(b * 2) + a * 64)):
        np.testing.assert_array_equal(_values(expr), np.broadcast_to(ref, expr.shape))
    assert (i_p + i_f).shape == (128, 64)
    assert (i_p - i_f).bounds() == (0 - 67, 127 - 4)


def test_mgrid_unpacks_and_has_p_x():
    g = nl.mgrid[0:128, 2:10:2]
    i_p, i_f = g
    assert g.p is i_p and g.x is i_f
    np.testing.assert_array_equal(_values(i_f)[0], np.arange(2, 10, 2))
    assert i_p.shape == (128, 1) and i_f.shape == (1, 4)


def test_new_axes():
    i = nl.arange(8)
    assert i[:, None].shape == (8, 1) and i[None, :].shape == (1, 8)
    assert i[None, :, None].shape == (1, 8, 1)


@pytest.mark.parametrize("pred,rect", [
    (lambda p, f: p < 100, {0: (0, 100)}),
    (lambda p, f: (p >= 3) & (p <= 9), {0: (3, 10)}),
    (lambda p, f: 2 * f < 7, {1: (0, 4)}),
    (lambda p, f: 100 - p > 40, {0: (0, 60)}),         # a negative coefficient
    (lambda p, f: -3 * f >= -10, {1: (0, 4)}),
    (lambda p, f: (p < 200) & (f >= 0), {}),            # covers everything
])
def test_mask_rectangles(pred, rect):
    i_p, i_f = nl.mgrid[0:128, 0:16]
    assert rectangle(pred(i_p, i_f), (128, 16), "t") == rect


def test_mask_rectangle_agrees_with_numpy_on_random_atoms():
    rng = np.random.default_rng(7)
    i_p, i_f = nl.mgrid[0:32, 0:24]
    for _ in range(200):
        c, k = int(rng.integers(-4, 5)), int(rng.integers(-40, 40))
        if c == 0:
            continue
        op = rng.choice(["<", "<=", ">", ">="])
        e = c * i_p + k
        pred = {"<": e < 0, "<=": e <= 0, ">": e > 0, ">=": e >= 0}[op]
        vals = c * np.arange(32) + k
        keep = {"<": vals < 0, "<=": vals <= 0, ">": vals > 0, ">=": vals >= 0}[op]
        rect = rectangle(pred, (32, 24), "t")
        if not keep.any():
            assert rect is None
        else:
            lo, hi = rect.get(0, (0, 32))
            assert list(np.nonzero(keep)[0]) == list(range(lo, hi))


def test_mask_false_everywhere_and_constants():
    i_p = nl.arange(128)[:, None]
    assert rectangle((i_p < 0), (128, 4), "t") is None
    assert rectangle((i_p < 10) & Predicate.never(), (128, 4), "t") is None
    assert rectangle(None, (128, 4), "t") == {}


def preloaded(w, x):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    i_k, i_m = nl.mgrid[0:128, 0:128]
    w_t = nl.load(w[i_k, i_m])                 # created before the loop, used inside
    acc = nl.zeros((128, 128), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(x.shape[0] // 128):
        acc += nl.matmul(w_t, nl.load(x[k * 128 + i_k, i_m]), transpose_x=True)
    nl.store(out[i_k, i_m], value=nl.copy(acc))
    return out


def test_pending_results_stay_in_their_loop_scope(rng):
    w = rng.standard_normal((128, 128)).astype(np.float32)
    x = rng.standard_normal((512, 128)).astype(np.float32)
    spec = nki.jit(preloaded).specialize(w, x)
    body = [ln.strip() for ln in spec.ir.splitlines() if not ln.startswith("  tensor ")]
    # (reroll may fold the w load with the first x load: both precede the K loop)
    first_loop = next(i for i, ln in enumerate(body) if ln.startswith("for ") and
                      ln.endswith("affine_range"))
    assert any("src=w@" in ln for ln in body[:first_loop]), spec.ir
    out = nki.jit(preloaded)(w, x)
    expect = sum(w.T @ x[k * 128:(k + 1) * 128] for k in range(4))
    np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-3)


def test_namespace_and_static_cast():
    assert nl.static_cast(3.7, nl.int32) == 4 and nl.static_cast(2.5, nl.int32) == 2
    assert nl.static_cast(1.0 + 2**-10, nl.bfloat16) == 1.0
    assert "Alu" not in nl.__all__ and "add" in nl.__all__ and "par_dim" in nl.__all__
    from neuronxcc.nki.language.constants import sizeinbytes

    assert sizeinbytes(nl.bfloat16) == 2 and sizeinbytes(nl.float32) == 4
