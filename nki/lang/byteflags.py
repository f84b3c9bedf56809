"""Which bytes of an on-chip tile were written: one flag per byte, kept cheap.

Most tiles are written whole by their first instruction; many of the rest are written in
column blocks over every partition (a transpose or a matmul per 128 columns). So a
``ByteFlags`` is one of three things, the first that fits:

* one value for every flag (``uniform``);
* the same flags in every partition row, set exactly on sorted disjoint byte ranges of the
  row (``cols``);
* a ``(P, bytes)`` table, made only when a write or a question fits neither.

A fresh table per partly written tile (page faults on first touch) was ~60% of the trace of
flash attention at S=8192; at S=4096 the tables of the column-block writes were still ~15%.
``layout`` arguments are ``Trace._layout`` triples (first byte, shape, byte strides, the
last dim the element's bytes); None means the whole tensor.
"""

from __future__ import annotations

import numpy as np


class ByteFlags:
    """One flag per byte of a ``(P, bytes)`` tile; see the module docstring.

    Example:
        >>> f = ByteFlags((2, 8))
        >>> f.set((0, (2, 2, 2), (8, 2, 1)), True)          # bytes 0-3 of both rows
        >>> f.state(None), f.state((8, (1, 4, 1), (8, 1, 1)))
        ('some', 'all')
    """

    __slots__ = ("shape", "uniform", "cols", "table")

    def __init__(self, shape: tuple[int, int]):
        self.shape = shape
        self.uniform: bool | None = False   # every flag, while they are all equal
        self.cols: list[list[int]] | None = None
        self.table: np.ndarray | None = None

    def _view(self, layout) -> np.ndarray:
        if layout is None:
            return self.table
        base, shape, strides = layout
        flat = self.table.reshape(-1)
        return np.lib.stride_tricks.as_strided(flat[base:], shape=shape, strides=strides)

    def _materialize(self) -> None:
        """Switch to the explicit table (from the uniform value or the row ranges)."""
        if self.cols is None:
            self.table = np.full(self.shape, self.uniform, np.bool_)
        else:
            self.table = np.zeros(self.shape, np.bool_)
            for lo, hi in self.cols:
                self.table[:, lo:hi] = True
        self.uniform, self.cols = None, None

    def set(self, layout, value: bool) -> None:
        value = bool(value)
        if layout is None or _covers(layout, self.shape[0] * self.shape[1]):
            self.uniform, self.cols, self.table = value, None, None
            return
        if self.table is None:
            if self.uniform is value:
                return
            span = _row_span(layout, self.shape) if value else None
            if span is not None and span[0]:
                self._add_cols(span[1], span[2])
                return
            self._materialize()
        self._view(layout)[...] = value

    def _add_cols(self, lo: int, hi: int) -> None:
        """Set bytes ``[lo, hi)`` of every row (uniform False or row ranges before)."""
        if hi <= lo:
            return
        cols = [] if self.cols is None else self.cols
        merged, out = [lo, hi], []
        for c in cols:
            if c[1] < merged[0] or merged[1] < c[0]:
                out.append(c)
            else:                       # overlapping or adjacent: one range
                merged = [min(c[0], merged[0]), max(c[1], merged[1])]
        out.append(merged)
        out.sort()
        if out == [[0, self.shape[1]]]:
            self.uniform, self.cols = True, None
        else:
            self.uniform, self.cols = None, out

    def state(self, layout) -> str:
        """``"all"``, ``"some"`` or ``"none"`` of the flags under ``layout`` set."""
        if self.cols is not None:
            if layout is None:
                return "some"           # ranges are kept only while some but not all
            span = _row_span(layout, self.shape)
            if span is None:
                self._materialize()
            else:
                return _ranges_state(self.cols, span[1], span[2])
        if self.table is not None:
            view = self._view(layout)
            return "all" if view.all() else "some" if view.any() else "none"
        shape = self.shape if layout is None else layout[1]
        if self.uniform or 0 in shape:        # no bytes at all: vacuously all (as .all())
            return "all"
        return "none"


def _ranges_state(cols: list[list[int]], lo: int, hi: int) -> str:
    """How much of ``[lo, hi)`` the sorted disjoint ranges cover."""
    if hi <= lo:
        return "all"
    covered = 0
    for a, b in cols:
        covered += max(0, min(b, hi) - max(a, lo))
    return "all" if covered == hi - lo else "some" if covered else "none"


def _row_span(layout, table: tuple[int, int]) -> tuple[bool, int, int] | None:
    """``(every row, lo, hi)`` when ``layout`` touches bytes ``[lo, hi)`` of each row it
    touches (and whether that is every row of the table), else None."""
    base, shape, strides = layout
    rows, rowbytes = table
    if shape[0] != 1 and strides[0] % rowbytes:
        return None                   # the first dim does not step whole rows
    row0, lo = divmod(base, rowbytes)
    run = 1
    for extent, stride in zip(reversed(shape[1:]), reversed(strides[1:])):
        if extent == 1:
            continue
        if stride != run:
            return None
        run *= extent
    if shape[0] == 0 or run == 0:
        return False, lo, lo
    if lo + run > rowbytes:
        return None
    every = row0 == 0 and shape[0] == rows and (rows == 1 or strides[0] == rowbytes)
    return every, lo, lo + run


def _covers(layout, nbytes: int) -> bool:
    """Whether a byte layout is exactly bytes ``[0, nbytes)``, each once: from byte 0, C-
    contiguous (size-1 dims have no stride that matters). A layout this misses is tracked
    byte by byte, which is only slower."""
    base, shape, strides = layout
    if base != 0:
        return False
    expected = 1
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent == 1:
            continue
        if stride != expected:
            return False
        expected *= extent
    return expected == nbytes
