"""Tensor views (spec §1.8): indexing and view methods move exactly the elements numpy would."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiValidationError


def _through_sbuf(view_fn, out_shape):
    """Kernel: load x [128, 64] to SBUF, copy the view ``view_fn(tile)`` to a compact output."""
    def kernel(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        v = view_fn(t)
        out = nl.ndarray(out_shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=v)
        return out
    return kernel


X = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)

CASES = {
    "slice-step": (lambda t: t[0:128:1, 3:60:4], lambda x: x[:, 3:60:4]),
    "negative": (lambda t: t[-28:, -10:], lambda x: x[-28:, -10:]),
    "ellipsis-int": (lambda t: t[..., 5], lambda x: x[:, 5:6]),
    "ds": (lambda t: t[nl.ds(8, 16), nl.ds(32, 8)], lambda x: x[8:24, 32:40]),
    "reshape": (lambda t: t.reshape((128, 8, 8))[:, 2, :], lambda x: x.reshape(128, 8, 8)[:, 2]),
    "permute": (lambda t: t.reshape((128, 8, 8)).permute((0, 2, 1)),
                lambda x: x.reshape(128, 8, 8).transpose(0, 2, 1)),
    "slice-method": (lambda t: t.slice(1, 10, 20, 2), lambda x: x[:, 10:20:2]),
    "select": (lambda t: t.reshape((128, 4, 16)).select(1, 3),
               lambda x: x.reshape(128, 4, 16)[:, 3]),
    "expand-squeeze": (lambda t: t.expand_dim(1).squeeze_dim(1)[:, 0:7], lambda x: x[:, 0:7]),
    "broadcast": (lambda t: t[:, 4:5].broadcast(1, 6), lambda x: np.repeat(x[:, 4:5], 6, 1)),
    "ap": (lambda t: t.ap([[64, 128], [2, 16]], offset=1), lambda x: x[:, 1:33:2]),
    "chained": (lambda t: t[16:80][4:20, 8:16], lambda x: x[20:36, 8:16]),
    # AWS's keyword names (start_dim/end_dim), as nki-library's rmsnorm_tkg calls it
    "flatten-dims": (lambda t: t.reshape((128, 2, 4, 8)).flatten_dims(start_dim=1, end_dim=2),
                     lambda x: x.reshape(128, 8, 8)),
    "rearrange-split": (lambda t: t.rearrange(("p", ("h", "w")), ("p", "w", "h"), {"h": 4}),
                        lambda x: x.reshape(128, 4, 16).transpose(0, 2, 1)),
    "rearrange-merge": (lambda t: t[:, 0:48].reshape((128, 4, 12))
                        .rearrange(("p", "a", ("b", "c")), ("p", ("a", "b"), "c"), {"c": 3}),
                        lambda x: x[:, 0:48].reshape(128, 16, 3)),
    "rearrange-infer": (lambda t: t.rearrange(("p", ("h", "w")), ("p", "w", "h"),
                                              {"h": -1, "w": 8}),
                        lambda x: x.reshape(128, 8, 8).transpose(0, 2, 1)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_views_match_numpy(backend, name):
    view_fn, ref_fn = CASES[name]
    expect = ref_fn(X)
    out = nki.jit(_through_sbuf(view_fn, expect.shape), backend=backend)(X)
    np.testing.assert_array_equal(out, expect)


def test_dtype_view_reinterprets_bits(backend):
    def kernel(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        out = nl.ndarray((128, 128), dtype=nl.uint16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t.view(nl.uint16))
        return out
    out = nki.jit(kernel, backend=backend)(X)
    np.testing.assert_array_equal(out, X.view(np.uint16))


def test_hbm_int_index_drops_dim():
    def kernel(x):
        assert x[3].shape == (64,) and x[3, 4:8].shape == (4,)
        t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
        assert t[5].shape == (1, 64) and t[:, 7].shape == (128, 1)
    nki.jit(kernel, cache=False).specialize(X)


@pytest.mark.parametrize("bad,code", [
    (lambda t: t.slice(1, 10, 70), "err_tensor_access_out_of_bound"),
    (lambda t: t.permute((1, 0)), "nki_invalid_view"),
    (lambda t: t[:, 0:10].reshape((128, 2, 5)).reshape((128, 10)).broadcast(1, 3),
     "nki_invalid_view"),
    (lambda t: t[0:128:2, :], "nki_invalid_view"),
    (lambda t: t.ap([[7, 128], [1, 4]]), "nki_invalid_view"),
    (lambda t: t.reshape((128, 8, 8)).flatten_dims(0, 1), "nki_invalid_view"),
    (lambda t: t.rearrange(("p", "f"), ("f", "p")), "nki_invalid_view"),
    (lambda t: t.rearrange(("p", ("h", "w")), ("p", "h", "w")), "nki_invalid_view"),
    (lambda t: t.rearrange(("p", ("h", "w")), ("p", "h", "w"), {"h": 5}), "nki_invalid_view"),
    (lambda t: t.rearrange(("p", "f"), ("p", "g")), "nki_invalid_view"),
    (lambda t: t.reshape((128, 8, 8)).permute((0, 2, 1)).rearrange(
        ("p", "a", "b"), ("p", ("a", "b"))), "nki_invalid_view"),
])
def test_invalid_views_are_rejected(bad, code):
    def kernel(x):
        t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
        bad(t)
    with pytest.raises(NkiValidationError, match=rf"{code}(.|\n)*test_views.py:\d+"):
        nki.jit(kernel, cache=False).specialize(X)


# ----- reshape of strided views (numpy's no-copy rules) ----------------------------------------

B = np.arange(384 * 300, dtype=np.float32).reshape(384, 300)


def _hbm_reshape(view_fn, shape):
    """Kernel: reshape a strided HBM view of ``b`` to ``shape`` and copy it block by block
    (over the first dim) through SBUF into a compact output."""
    def kernel(b):
        v = view_fn(b)
        assert v.shape == shape
        out = nl.ndarray(shape, dtype=b.dtype, buffer=nl.shared_hbm)
        for i in range(shape[0]):
            t = nl.ndarray(shape[1:], dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=v[i])
            nisa.dma_copy(dst=out[i], src=t)
        return out
    return kernel


HBM_RESHAPES = {
    "split-rows": (lambda b: b[:, 0:256].reshape((3, 128, 256)),
                   lambda b: b[:, 0:256].reshape(3, 128, 256)),
    "split-both": (lambda b: b[0:384:2, 0:100].reshape((2, 96, 10, 10)),
                   lambda b: b[0:384:2, 0:100].reshape(2, 96, 10, 10)),
    "split-merge": (lambda b: b[0:256, :].reshape((2, 128 * 300)).reshape((2, 128, 300)),
                    lambda b: b[0:256, :].reshape(2, 128, 300)),
    "reshape-dim": (lambda b: b[:, 8:264].reshape_dim(0, (3, 128)),
                    lambda b: b[:, 8:264].reshape(3, 128, 256)),
    # in HBM any dim may be split or moved, dim 0 included
    "rearrange-hbm": (lambda b: b[0:128, 0:256].rearrange(("r", ("a", "c")), ("a", "r", "c"),
                                                          {"a": 2}),
                      lambda b: b[0:128, 0:256].reshape(128, 2, 128).transpose(1, 0, 2)),
    "flatten-hbm": (lambda b: b.reshape((3, 128, 2, 150)).flatten_dims(start_dim=0,
                                                                        end_dim=1)[0:3],
                    lambda b: b[0:3].reshape(3, 2, 150)),
}


@pytest.mark.parametrize("name", sorted(HBM_RESHAPES))
def test_reshape_of_strided_hbm_view_matches_numpy(backend, name):
    view_fn, ref_fn = HBM_RESHAPES[name]
    expect = ref_fn(B)
    out = nki.jit(_hbm_reshape(view_fn, expect.shape), backend=backend, cache=False)(B)
    np.testing.assert_array_equal(out, expect)


def test_reshape_splits_a_strided_on_chip_free_dim(backend):
    view_fn = lambda t: t[:, 0:64:2].reshape((128, 4, 8))          # noqa: E731
    expect = X[:, 0:64:2].reshape(128, 4, 8)
    out = nki.jit(_through_sbuf(view_fn, expect.shape), backend=backend, cache=False)(X)
    np.testing.assert_array_equal(out, expect)


def test_reshape_split_keeps_the_row_stride():
    def kernel(b):
        assert b[:, 0:256].reshape((3, 128, 256)).get_pattern() == \
            [[128 * 300, 3], [300, 128], [1, 256]]
    nki.jit(kernel, cache=False).specialize(B)


@pytest.mark.parametrize("bad,dims", [
    (lambda b: b[:, 0:256].reshape((384 * 256,)), "0, 1"),
    (lambda b: b[0:384:2, :].reshape((96, 600)), "0, 1"),
    (lambda b: b[0:8, 0:16].reshape((8, 4, 4)).permute((0, 2, 1)).reshape((8, 16)), "1, 2"),
])
def test_reshape_merging_incompatible_strides_names_the_dims(bad, dims):
    def kernel(b):
        bad(b)
    with pytest.raises(NkiValidationError, match=rf"nki_invalid_view\] reshape of 'b' to "
                       rf".*: dims {dims} of its pattern .* cannot be merged(.|\n)*"
                       r"test_views.py:\d+"):
        nki.jit(kernel, cache=False).specialize(B)
