"""numpy twins of the ``@njit`` sub-functions that loop per element (see ``pure.py``).

Each gives the bits its compiled original gives; only copies and index arithmetic are
vectorised here, never arithmetic whose rounding could differ.
"""

from __future__ import annotations
