"""Which bytes of an HBM tensor were written, as sorted byte intervals.

``ByteFlags`` (nki/lang/tracer.py) keeps one flag per byte once a tensor is written in part;
that is fine for an on-chip tile (at most 128 x 192 KiB) but not for an HBM output, whose
table is as large as the tensor: nki-library's output_proj_cte at its large shapes asked for
a 2.6 GiB flag table beside its 2.8 GB output. Kernels write HBM in rows and tiles, so the
written bytes form few intervals: ``ByteRuns`` keeps them as sorted, disjoint ``[start, end)``
pairs and answers the same questions, at a cost that grows with the number of contiguous
runs a write has, not with the tensor.
"""

from __future__ import annotations

import numpy as np

from nki.ir.intervals import union


def _runs(layout, total: int) -> tuple[np.ndarray, np.ndarray]:
    """The byte intervals a ``Trace._layout`` triple touches (None: ``[0, total)``), merged."""
    if layout is None:
        return np.array([0], np.int64), np.array([total], np.int64)
    base, shape, strides = layout
    if 0 in shape:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    run, outer = 1, []
    dims = [(n, s) for n, s in zip(shape, strides) if n != 1]
    while dims and dims[-1][1] == run:       # innermost dims that continue the run
        run *= dims.pop()[0]
    for n, s in dims:
        outer.append(np.arange(n, dtype=np.int64) * s)
    starts = np.array([base], np.int64)
    for offsets in outer:
        starts = (starts[:, None] + offsets[None, :]).reshape(-1)
    return union(starts, starts + run)


class ByteRuns:
    """Written bytes of a ``(1, nbytes)`` tensor as intervals; ``ByteFlags``'s interface.

    Example:
        >>> r = ByteRuns((1, 128))
        >>> r.set((0, (16, 4), (4, 1)), True)
        >>> r.state(None), r.state((0, (8, 4), (4, 1)))
        ('some', 'all')
    """

    __slots__ = ("shape", "starts", "ends")

    def __init__(self, shape: tuple[int, int]):
        self.shape = shape
        self.starts = np.zeros(0, np.int64)
        self.ends = np.zeros(0, np.int64)

    @property
    def _total(self) -> int:
        return self.shape[0] * self.shape[1]

    def set(self, layout, value: bool) -> None:
        s, e = _runs(layout, self._total)
        if value:
            self.starts, self.ends = union(np.concatenate([self.starts, s]),
                                            np.concatenate([self.ends, e]))
            return
        # clear: keep the pieces of each interval outside every cleared run
        cuts = np.unique(np.concatenate([self.starts, self.ends, s, e]))
        lo, hi = cuts[:-1], cuts[1:]
        inside = _covering(self.starts, self.ends, lo) & ~_covering(s, e, lo)
        self.starts, self.ends = union(lo[inside], hi[inside])

    def state(self, layout) -> str:
        """``"all"``, ``"some"`` or ``"none"`` of the bytes under ``layout`` written."""
        s, e = _runs(layout, self._total)
        if len(s) == 0:
            return "all"                       # no bytes at all: vacuously all
        if len(self.starts) == 0:
            return "none"
        k = np.searchsorted(self.ends, s, side="right")   # first interval ending after s
        hit = k < len(self.starts)
        k = np.minimum(k, len(self.starts) - 1)
        if (hit & (self.starts[k] <= s) & (self.ends[k] >= e)).all():
            return "all"
        return "some" if (hit & (self.starts[k] < e)).any() else "none"


def _covering(starts: np.ndarray, ends: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Whether each point lies in one of the sorted disjoint intervals."""
    k = np.searchsorted(starts, points, side="right") - 1
    ok = k >= 0
    k = np.maximum(k, 0)
    return ok & (points < ends[k]) if len(starts) else np.zeros(len(points), bool)
