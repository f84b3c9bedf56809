"""Spellings earlier releases of the current dialect accepted (nki/lang/releases.py,
docs/releases.md): each accepted one against numpy in both backends, with the
DeprecationWarning naming the release that dropped it; each ambiguous one raises
``nki_removed_in_release`` naming the release."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiError
from nki.lang.releases import OLD_SPELLINGS

X = np.random.default_rng(7).standard_normal((128, 64)).astype(np.float32)
Y = np.random.default_rng(8).standard_normal((128, 64)).astype(np.float32)


def copy_with_dtype(x, dtype):
    """nki-samples' beta-2 matmul tutorial: ``tensor_copy(dst=, src=, dtype=)``."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    u = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u, src=t, dtype=dtype)
    nisa.dma_copy(dst=out, src=u)
    return out


def test_tensor_copy_dtype_of_dst_warns(backend):
    with pytest.warns(DeprecationWarning, match=r"dtype= was dropped in NKI 0\.2\.0"):
        out = nki.jit(copy_with_dtype, backend=backend)(X, nl.float32)
    np.testing.assert_array_equal(out, X)


def test_tensor_copy_other_dtype_is_ignored_as_nki_0_1_did(backend):
    with pytest.warns(UserWarning, match=r"dtype=bfloat16 was dropped in NKI 0\.2\.0.*keeps "
                      r"dst's float32"):
        out = nki.jit(copy_with_dtype, backend=backend)(X, nl.bfloat16)
    np.testing.assert_array_equal(out, X)            # no bf16 rounding: dst's fp32 decides


def masked_copy(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_copy(dst=t, src=t, mask=None)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_mask_keyword_raises():
    with pytest.raises(NkiError) as info:
        nki.jit(masked_copy).specialize(X)
    assert info.value.code == "nki_removed_in_release" and "mask=" in str(info.value)


def matmul_old_keywords(a, b, **old):
    """``a.T @ b`` through nc_matmul with NKI 0.1.0 keywords."""
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    ta = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    ps = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=ta, moving=tb, **old)
    res = nl.ndarray(ps.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=ps)
    nisa.dma_copy(dst=out, src=res)
    return out


@pytest.mark.parametrize("old, word", [({"psumAccumulateFlag": True}, "psumAccumulateFlag"),
                                       ({"is_moving_zero": False}, "is_moving_zero")])
def test_nc_matmul_old_keywords(backend, old, word):
    with pytest.warns(DeprecationWarning, match=rf"{word}= was dropped in NKI 0\.2\.0"):
        out = nki.jit(matmul_old_keywords, backend=backend)(X, Y, **old)
    np.testing.assert_allclose(out, X.T.astype(np.float64) @ Y, rtol=1e-4, atol=1e-4)


def test_renamed_keyword_twice_raises():
    with pytest.raises(NkiError) as info:
        nki.jit(matmul_old_keywords).specialize(X, Y, is_moving_zero=False,
                                                is_moving_onezero=False)
    assert info.value.code == "nki_removed_in_release"


def register_imm(x):
    """``register_move(dst, imm=)``, before NKI 0.3.0 renamed it ``src=``."""
    seven = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    r = nisa.register_alloc()
    nisa.register_move(r, imm=7)
    nisa.register_store(seven, r)
    return seven


def test_register_move_imm(backend):
    with pytest.warns(DeprecationWarning, match=r"imm= was dropped in NKI 0\.3\.0"):
        out = nki.jit(register_imm, backend=backend)(X)
    np.testing.assert_array_equal(out, [[7]])


def rmw_copy(x, y, op):
    """``dma_copy(dst_rmw_op=np.add)``: ``out = x; out += y`` by read-modify-write DMA."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=out, src=x)
    nisa.dma_copy(dst=t, src=y)
    nisa.dma_copy(dst=out, src=t, dst_rmw_op=op)
    return out


def test_dma_copy_rmw_add(backend):
    with pytest.warns(DeprecationWarning, match=r"dst_rmw_op= was dropped in NKI 0\.3\.0"):
        out = nki.jit(rmw_copy, backend=backend)(X, Y, np.add)
    np.testing.assert_allclose(out, X + Y, rtol=1e-6)


def test_dma_copy_rmw_other_op_raises():
    with pytest.raises(NkiError) as info:
        nki.jit(rmw_copy).specialize(X, Y, np.multiply)
    assert info.value.code == "nki_removed_in_release"


def test_docs_table_lists_every_spelling():
    """docs/releases.md is the same table as OLD_SPELLINGS, for people."""
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "releases.md").read_text()
    for o in OLD_SPELLINGS:
        assert f"`{o.spelling}`" in doc and o.dropped_in in doc, o
