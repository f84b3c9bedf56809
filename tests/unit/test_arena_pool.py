"""The runtime's arena pool keeps standard-size arenas for later runs, and at most one
oversized (overflow-page) arena per target and core, so a suite of spilling kernels of many
sizes does not hold every size it ever saw."""

from __future__ import annotations

from nki.ir.target import get_target
from nki.ir.types import Memory
from nki.sim.runtime import STATE_BYTES, _ArenaPool


def _bytes(target, rows: int, prows: int) -> int:
    """Bytes of one SBUF + PSUM arena pair, computed from the target's pitches."""
    return (rows * target.arena_pitch(Memory.SBUF)
            + prows * target.arena_pitch(Memory.PSUM) + STATE_BYTES)


def test_standard_arenas_are_reused():
    pool, t = _ArenaPool(), get_target("trn2")
    with pool.take(t, 0) as first:
        pass
    with pool.take(t, 0) as second:
        assert second[0] is first[0] and second[1] is first[1]
    assert pool.held_bytes() == _bytes(t, t.sbuf_partitions, t.sbuf_partitions)


def test_only_the_latest_oversized_arena_is_kept():
    pool, t = _ArenaPool(), get_target("trn2")
    std = t.sbuf_partitions
    with pool.take(t, 0):
        pass
    for rows in (std + 8, std + 40, std + 3):
        with pool.take(t, 0, sbuf_rows=rows) as (sbuf, _):
            assert sbuf.nbytes == rows * t.arena_pitch(Memory.SBUF)
    held = _bytes(t, std, std) + _bytes(t, std + 3, std)
    assert pool.held_bytes() == held
    # another core keeps its own
    with pool.take(t, 1, sbuf_rows=std + 8):
        pass
    assert pool.held_bytes() == held + _bytes(t, std + 8, std)


def test_oversized_psum_arena_replaces_oversized_sbuf_one():
    pool, t = _ArenaPool(), get_target("trn1")
    std = t.sbuf_partitions
    with pool.take(t, 0, sbuf_rows=std + 16):
        pass
    with pool.take(t, 0, psum_rows=std + 2) as (_, psum):
        assert psum.nbytes == (std + 2) * t.arena_pitch(Memory.PSUM) + STATE_BYTES
        assert pool.held_bytes() == 0          # the first was dropped before allocating
    assert pool.held_bytes() == _bytes(t, std, std + 2)
