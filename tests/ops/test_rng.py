"""Random numbers: XORWOW bits against an independent scalar oracle, determinism given a
seed, per-core streams, state save/restore, uniform distribution sanity, and dropout masks
drawn from the same generator; both backends."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiValidationError
from nki.sim.emit.rng import reference_xorwow


def _jit(kernel, **options):
    return nki.jit(kernel, cache=False, **options)


def _out(t):
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def _seeded_bits(seed):
    s = nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=seed)
    nisa.set_rng_seed(src_seeds=s)
    bits = nl.ndarray((4, 5), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.rng(dst=bits)
    return _out(bits)


def test_rng_bits_match_the_scalar_oracle(backend):
    seed = np.array([[12345]], np.uint32)
    y = _jit(_seeded_bits, backend=backend)(seed)
    np.testing.assert_array_equal(y, reference_xorwow(12345, 128, 5)[:4])


def _uniform_and_state(seed):
    s = nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=seed)
    nl.random_seed(s)
    state = nl.ndarray((128, 6), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.rand_get_state(dst=state)
    a = nl.rand((128, 512), dtype=nl.float32)
    nisa.rand_set_state(src_seeds=state)          # rewind: the next draw repeats ``a``
    b = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.rand2(dst=b, min=0.0, max=1.0)
    c = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.rand2(dst=c, min=-2.0, max=2.0)
    return _out(a), _out(b), _out(c)


def test_uniform_deterministic_rewindable_and_sane(backend):
    seed = np.array([[7]], np.uint32)
    a, b, c = _jit(_uniform_and_state, backend=backend)(seed)
    a2, _, _ = _jit(_uniform_and_state, backend=backend)(seed)
    a3, _, _ = _jit(_uniform_and_state, backend=backend)(np.array([[8]], np.uint32))
    np.testing.assert_array_equal(a, a2)          # same seed, same numbers
    np.testing.assert_array_equal(a, b)           # state restored
    assert not np.array_equal(a, a3)              # another seed, other numbers
    assert a.min() >= 0 and a.max() < 1
    assert abs(a.mean() - 0.5) < 0.01 and abs(a.var() - 1 / 12) < 0.005
    assert c.min() >= -2 and c.max() < 2 and abs(c.mean()) < 0.02
    assert not np.array_equal(a[0], a[1])         # lanes draw distinct streams


def _per_core(x):
    me = nl.program_id(0)
    u = nl.rand((8, 16), dtype=nl.float32)
    out = nl.ndarray((2, 8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[me], src=u)
    return out


def test_lnc_cores_draw_their_own_streams(backend):
    y = _jit(_per_core, backend=backend)[2](np.zeros((1, 1), np.float32))
    assert not np.array_equal(y[0], y[1])
    np.testing.assert_array_equal(y, _jit(_per_core, backend=backend)[2](
        np.zeros((1, 1), np.float32)))


def test_rand2_needs_a_float_dst():
    def k(x):
        t = nl.ndarray((4, 4), dtype=nl.int32, buffer=nl.sbuf)
        nisa.rand2(dst=t)
        return x

    with pytest.raises(NkiValidationError, match=r"(?s)nki_dtype_mismatch.*rand2.*"
                                                 r"test_rng\.py:\d+"):
        _jit(k, backend="python")(np.ones((2, 2), np.float32))


def test_state_tile_shape_is_checked():
    def k(x):
        t = nl.ndarray((4, 5), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rand_get_state(dst=t)
        return x

    with pytest.raises(NkiValidationError, match=r"(?s)nki_shape_mismatch.*XORWOW.*"
                                                 r"test_rng\.py:\d+"):
        _jit(k, backend="python")(np.ones((2, 2), np.float32))


# ----- dropout draws from the Vector engine's XORWOW stream ---------------------------------
def _sb(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _dropped_np(x, bits, prob):
    """Independent of the simulator: drop where the top 24 bits / 2**24 are below prob."""
    u = (bits.astype(np.uint64) >> np.uint64(8)).astype(np.float64) / 2.0**24
    return np.where(u < np.asarray(prob, np.float64), np.zeros_like(x), x)


def _seeded_dropouts(x, seed, prob):
    nisa.set_rng_seed(src_seeds=_sb(seed))
    a = _sb(x)
    d1 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dropout(dst=d1, data=a, prob=0.3)
    d2 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dropout(dst=d2, data=a, prob=_sb(prob))
    return _out(d1), _out(d2)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_dropout_masks_are_the_seeded_xorwow_draws(backend, dtype):
    rng = np.random.default_rng(3)
    x = (rng.random((128, 64)) + 1.0).astype(dtype)          # no zeros in the data
    prob = np.linspace(0.0, 1.0, 128, dtype=np.float32).reshape(128, 1)
    d1, d2 = _jit(_seeded_dropouts, backend=backend)(x, np.array([[99]], np.uint32), prob)
    bits = reference_xorwow(99, 128, 128)                    # two calls: 64 draws each
    np.testing.assert_array_equal(d1.view(np.uint8), _dropped_np(x, bits[:, :64], 0.3)
                                  .view(np.uint8))
    np.testing.assert_array_equal(d2.view(np.uint8), _dropped_np(x, bits[:, 64:], prob)
                                  .view(np.uint8))
    keep = d1 != 0                                           # 8192 draws: sigma ~ 0.005
    assert abs(keep.mean() - 0.7) < 0.02
    assert d2[0].all() and not d2[-1].any()                  # prob 0 keeps, prob 1 drops


def _nl_dropout(x, seed):
    nl.random_seed(_sb(seed))
    return _out(nl.dropout(_sb(x), 0.5))


def test_nl_random_seed_makes_nl_dropout_reproducible(backend):
    x = np.ones((32, 128), np.float32)
    k = _jit(_nl_dropout, backend=backend)
    a, b = (k(x, np.array([[5]], np.uint32)) for _ in range(2))
    c = k(x, np.array([[6]], np.uint32))
    np.testing.assert_array_equal(a, b)
    assert (a != c).mean() > 0.3                             # another seed, another mask
    np.testing.assert_array_equal(a, _dropped_np(x, reference_xorwow(5, 32, 128), 0.5))


def _rewound(x):
    state = nl.ndarray((64, 6), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.rand_get_state(dst=state)
    d = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dropout(dst=d, data=_sb(x), prob=0.25)
    nisa.rand_set_state(src_seeds=state)                     # the same draws again
    u = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.rand2(dst=u, min=0.0, max=1.0)
    again = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dropout(dst=again, data=_sb(x), prob=0.25)          # stream moved on: a new mask
    return _out(d), _out(u), _out(again)


def test_dropout_and_rand2_share_the_generator(backend):
    x = np.full((64, 96), 2.0, np.float32)
    d, u, again = _jit(_rewound, backend=backend)(x)
    np.testing.assert_array_equal(d == 0, u < 0.25)          # same bits decide both
    assert (d != again).any()
