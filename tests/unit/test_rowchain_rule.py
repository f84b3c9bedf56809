"""The row chains' pair rule (nki.sim.rowchain._rows_pair_safe) against brute force over
every pair of rows: two operands may be run chunk by chunk only if row r of one meets
no row q != r of the other."""

from __future__ import annotations

import numpy as np

from nki.ir.affine import Affine
from nki.ir.types import Memory
from nki.sim import rowchain
from nki.sim.helpers.memory import CHUNK_ELEMS
from nki.sim.rowchain import _Rows, _rows_pair_safe


def _brute_safe(x: _Rows, y: _Rows, P: int, d: int) -> bool:
    for r in range(P):
        for q in range(P):
            xa, xb = d + r * x.pitch + x.lo, d + r * x.pitch + x.hi
            ya, yb = q * y.pitch + y.lo, q * y.pitch + y.hi
            if r != q and max(xa, ya) < min(xb, yb):
                return False
    return True


def _rows(offset, pitch, lo, hi):
    return _Rows("sbuf", offset, pitch, lo, hi, True)


def test_constant_offsets_match_brute_force():
    rng = np.random.default_rng(3)
    for _ in range(4000):
        P = int(rng.integers(2, 7))
        pitch = int(rng.choice([16, 24, 64]))
        px = pitch if rng.random() < 0.8 else int(rng.choice([16, 24, 64]))
        lo_x, lo_y = (int(v) for v in rng.integers(-8, 8, 2))
        x = _rows(Affine.of(int(rng.integers(-200, 200))), px, lo_x,
                  lo_x + int(rng.integers(1, 2 * px)))
        y = _rows(Affine.of(0), pitch, lo_y, lo_y + int(rng.integers(1, 2 * pitch)))
        safe = _rows_pair_safe(x, y, P, {})
        if safe:   # the rule may refuse more than it must (other pitches), never less
            assert _brute_safe(x, y, P, x.offset.const), (x, y, P)
        elif px == pitch:
            assert not _brute_safe(x, y, P, x.offset.const), (x, y, P)


def test_offsets_moving_with_loops_are_judged_over_every_value():
    rng = np.random.default_rng(4)
    for _ in range(1500):
        P, pitch, trip = int(rng.integers(2, 5)), 32, int(rng.integers(1, 4))
        cx, cy = (int(v) for v in rng.integers(-40, 41, 2))
        x = _rows(Affine(int(rng.integers(-100, 100)), ((0, cx),)), pitch, 0,
                  int(rng.integers(1, pitch)))
        y = _rows(Affine(0, ((0, cy),)) if cy else Affine.of(0), pitch, 0,
                  int(rng.integers(1, pitch)))
        if _rows_pair_safe(x, y, P, {0: trip}):
            for i in range(trip):
                d = x.offset.evaluate({0: i}) - y.offset.evaluate({0: i})
                assert _brute_safe(x, y, P, d), (x, y, P, i)


def test_an_unknown_trip_count_is_refused():
    x = _rows(Affine(0, ((1, 64),)), 64, 0, 16)
    assert not _rows_pair_safe(x, _rows(Affine.of(4096), 64, 0, 16), 4, {})


def test_chunks_fit_the_budget_and_the_helpers_chunks(monkeypatch):
    monkeypatch.setattr(rowchain, "l2_bytes", lambda: 0)
    monkeypatch.setattr(rowchain, "CHAIN_BYTES", 200_000)
    for elems in (1024, 4096, 20000, 40000):    # 16, 4, 1 and 1 rows a helper chunk
        rows = _Rows(Memory.SBUF, Affine.of(0), 4 * elems, 0, 4 * elems, True, elems)
        other = _Rows(Memory.SBUF, Affine.of(4 * elems), 4 * elems, 0, 4 * elems, False, elems)
        chunk = rowchain._rows_per_chunk([[rows, other], [other]], 128)
        inner = max(1, CHUNK_ELEMS // elems)
        assert 1 <= chunk < 128 and chunk % inner == 0, (elems, chunk)
        assert chunk * 8 * elems <= max(rowchain.CHAIN_BYTES, 8 * elems * inner)
