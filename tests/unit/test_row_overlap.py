"""The in-arena row paths' overlap rule (nki.sim.helpers.memory._strided_rows_meet) against
brute force over every pair of rows, compiled and interpreted."""

from __future__ import annotations

import numpy as np
import pytest

from nki.sim.helpers.memory import _strided_rows_meet


def _brute(xo, xl, yo, yl, pitch, rows):
    return any(max(xo + r * pitch, yo + q * pitch) < min(xo + r * pitch + xl, yo + q * pitch + yl)
               for r in range(rows) for q in range(rows))


@pytest.mark.parametrize("fn", [_strided_rows_meet, _strided_rows_meet.py_func])
def test_strided_rows_meet_matches_brute_force(fn):
    rng = np.random.default_rng(7)
    for _ in range(3000):
        pitch = int(rng.choice([64, 100, 128]))
        rows = int(rng.integers(1, 6))
        xl = int(rng.integers(1, pitch + 1))
        yl = xl if rng.random() < 0.5 else int(rng.integers(1, pitch + 1))
        xo, yo = (int(v) for v in rng.integers(0, 400, 2))
        assert fn(xo, pitch, xl, yo, pitch, yl, rows) == _brute(xo, xl, yo, yl, pitch, rows), \
            (xo, xl, yo, yl, pitch, rows)


def test_other_pitches_are_assumed_to_meet():
    assert _strided_rows_meet(0, 64, 16, 1000, 128, 16, 4)
