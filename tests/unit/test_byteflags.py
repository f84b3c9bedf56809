"""Written-byte tracking of on-chip tiles (``nki.lang.byteflags.ByteFlags``): whichever
form it keeps (one value, the same byte ranges in every row, a table), it answers as a
plain per-byte table does."""

from __future__ import annotations

import numpy as np

from nki.lang.byteflags import ByteFlags


def _column_block(rng, rows: int, rowbytes: int):
    """A ``Trace._layout`` triple over a block of columns: every row or a few, the bytes
    of each row contiguous (elements of 1, 2 or 4 bytes)."""
    isz = int(rng.choice([1, 2, 4]))
    n = rowbytes // isz
    lo = int(rng.integers(0, n))
    count = int(rng.integers(1, n - lo + 1))
    r0 = 0 if rng.random() < 0.7 else int(rng.integers(0, rows))
    nrows = rows - r0 if r0 == 0 else int(rng.integers(1, rows - r0 + 1))
    return r0 * rowbytes + lo * isz, (nrows, count, isz), (rowbytes, isz, 1)


def _strided(rng, rows: int, rowbytes: int):
    """Any strided layout inside the table (rows, then up to 2 strided byte dims)."""
    while True:
        isz = int(rng.choice([1, 2, 4]))
        shape = [int(rng.integers(1, rows + 1))] + [int(rng.integers(1, 5))
                                                    for _ in range(int(rng.integers(1, 3)))]
        strides = [rowbytes * int(rng.integers(0, 2))] + [int(rng.integers(0, 12))
                                                          for _ in shape[1:]]
        inner = sum((c - 1) * s for c, s in zip(shape[1:], strides[1:])) + isz
        last_row = (shape[0] - 1) * strides[0] // rowbytes
        if inner <= rowbytes and last_row < rows:
            base = int(rng.integers(0, rows - last_row)) * rowbytes + \
                int(rng.integers(0, rowbytes - inner + 1))
            return base, (*shape, isz), (*strides, 1)


def _reference_view(table: np.ndarray, layout):
    if layout is None:
        return table
    base, shape, strides = layout
    return np.lib.stride_tricks.as_strided(table.reshape(-1)[base:], shape=shape,
                                           strides=strides)


def _state(view: np.ndarray) -> str:
    return "all" if view.all() else "some" if view.any() else "none"


def test_byte_flags_answer_like_a_plain_table():
    rng = np.random.default_rng(3)
    for _ in range(400):
        rows, rowbytes = int(rng.choice([1, 4, 8])), int(rng.choice([8, 24, 64]))
        flags, ref = ByteFlags((rows, rowbytes)), np.zeros((rows, rowbytes), np.bool_)
        for _ in range(int(rng.integers(1, 10))):
            pick = rng.random()
            layout = None if pick < 0.1 else _column_block(rng, rows, rowbytes) \
                if pick < 0.75 else _strided(rng, rows, rowbytes)
            if rng.random() < 0.7:
                value = bool(rng.random() < 0.85)
                flags.set(layout, value)
                _reference_view(ref, layout)[...] = value
            for probe in (layout, None, _column_block(rng, rows, rowbytes),
                          _strided(rng, rows, rowbytes)):
                assert flags.state(probe) == _state(_reference_view(ref, probe))


def test_column_blocks_over_every_row_keep_no_table():
    flags = ByteFlags((128, 1024))
    for block in range(4):       # four transposes, 256 bytes of every row each
        flags.set((block * 256, (128, 64, 4), (1024, 4, 1)), True)
        assert flags.table is None
        assert flags.state(None) == ("all" if block == 3 else "some")
    assert flags.state((512, (128, 64, 4), (1024, 4, 1))) == "all"
