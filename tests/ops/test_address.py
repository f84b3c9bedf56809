"""``nl.ndarray(..., address=(partition, byte))``: exact placement and aliasing, as on hardware."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiValidationError


def _alias(x):
    # a and b name the same SBUF bytes: what is written through a is read through b
    out = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    a = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf, address=(0, 4096))
    b = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.sbuf, address=(0, 4096))
    other = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)   # placed automatically
    nisa.dma_copy(dst=a, src=x)
    nisa.memset(dst=other, value=7.0)
    nisa.dma_copy(dst=out, src=b)
    return out


def test_same_address_aliases_and_auto_tiles_keep_off(backend):
    x = np.random.default_rng(3).standard_normal((128, 64)).astype(np.float32)
    out = nki.jit(_alias, backend=backend)(x)
    np.testing.assert_array_equal(out, x.view(np.int32))
    spec = nki.jit(_alias, cache=False).specialize(x)
    other = [t for t in spec.cores[0].program.tensors if t.name.startswith("t") and
             t.memory is nl.sbuf and not t.user_address]
    assert all(not (4096 <= t.address[1] < 4096 + 256) for t in other)


def test_misaligned_address_is_rejected():
    def k(x):
        nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf, address=(0, 6))
    with pytest.raises(NkiValidationError, match=r"nki_misaligned_address(.|\n)*"
                       r"test_address.py:\d+"):
        nki.jit(k, cache=False).specialize(np.zeros((2, 2), np.float32))
