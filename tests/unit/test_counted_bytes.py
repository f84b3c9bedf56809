"""The vectorised count of SBUF bytes against the rule written out pair by pair.

An ``address=`` tile lying inside another ``address=`` tile (byte window, partitions and
live range all contained) adds no bytes; of two identical tiles the larger, then the lower
id, is the container. The reference below states that rule literally, O(n^2) in Python.
"""
from types import SimpleNamespace

import numpy as np
import pytest

from nki.jit import capacity


def _reference(decls, spans, exact):
    def key(d):
        return (-d.bytes_per_partition, d.id)

    def inside(k):
        d, (p0, p1) = decls[k], spans[k]
        lo, hi = exact[d.id]
        a0, a1 = d.address[1], d.address[1] + d.bytes_per_partition
        for j, o in enumerate(decls):
            if o is d or not o.user_address or key(o) >= key(d):
                continue
            q0, q1 = spans[j]
            b0, b1 = o.address[1], o.address[1] + o.bytes_per_partition
            olo, ohi = exact[o.id]
            if b0 <= a0 and a1 <= b1 and q0 <= p0 and p1 <= q1 and olo <= lo and hi <= ohi:
                return True
        return False

    return [0 if d.user_address and inside(k) else d.bytes_per_partition
            for k, d in enumerate(decls)]


def _random_program(rng, n):
    decls, spans, exact = [], [], {}
    for i in range(n):
        size = int(rng.choice([64, 128, 256, 512]))
        user = bool(rng.random() < 0.8)
        addr = int(rng.integers(0, 8)) * 64 if user else None
        decls.append(SimpleNamespace(id=100 + i, bytes_per_partition=size, user_address=user,
                                     address=(0, addr) if user else None))
        p0 = int(rng.choice([0, 0, 32, 64]))
        spans.append((p0, p0 + int(rng.choice([32, 64]))))
        lo = int(rng.integers(0, 6))
        exact[100 + i] = (lo, lo + int(rng.integers(0, 6)))
    return decls, spans, exact


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [1, 2, 9, 40, 700])   # 700 spans two chunks of the matrix
def test_counted_bytes_matches_pairwise_rule(seed, n):
    decls, spans, exact = _random_program(np.random.default_rng(seed), n)
    got = capacity._counted_bytes(decls, spans, exact)
    assert got == _reference(decls, spans, exact)
    if n >= 40:                   # the random programs do exercise both outcomes
        assert 0 in got and any(got)


def test_identical_tiles_count_once():
    same = [SimpleNamespace(id=i, bytes_per_partition=256, user_address=True, address=(0, 0))
            for i in (7, 3)]
    spans, exact = [(0, 128)] * 2, {7: (0, 4), 3: (0, 4)}
    assert capacity._counted_bytes(same, spans, exact) == [0, 256]
