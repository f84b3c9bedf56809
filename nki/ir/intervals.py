"""Byte intervals as numpy arrays of starts and ends (``[start, end)``), shared by the race
checks (nki/jit/races.py) and the trace's record of written HBM bytes (nki/lang/byteruns.py).
"""

from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint, sorted union of a list of intervals (touching ones merged).

    Example:
        >>> union(np.array([10, 0, 4]), np.array([20, 6, 8]))
        (array([ 0, 10]), array([ 8, 20]))
    """
    if len(starts) <= 1:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), np.bool_)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], reach[last]
