"""One protocol for "where does a kernel's time go", whichever tool measured it.

Two tools answer that question with different kinds of time:

* ``Kernel.profile(...)`` (:class:`nki.sim.profile.InstructionProfile`): **host** time, how
  long *this simulator* spends on each instruction on this CPU;
* ``nki.estimate(...)`` (:class:`nki.cost.estimate.Estimate`): **model** time, what the cost
  model says a NeuronCore would take.

Both are :class:`KernelResult`: ``kind`` says which of the two it is, ``table()`` is the
summary text, ``by_line()`` the time per source line (rows with a ``location``, longest
first, ``str()`` a table) and ``save_trace(path)`` a Chrome/Perfetto trace-event file. Code
that reads a result can take either and must look at ``kind`` before comparing numbers: a
host second and a model microsecond are not the same quantity.
"""

from __future__ import annotations

import gzip
import json
import os
from typing import Literal, Protocol, runtime_checkable

HOST: Literal["host"] = "host"
MODEL: Literal["model"] = "model"
KINDS = (HOST, MODEL)


@runtime_checkable
class KernelResult(Protocol):
    """What ``Kernel.profile``'s and ``nki.estimate``'s results both provide."""

    kind: str   # HOST or MODEL

    def table(self) -> str:
        """The summary as text (what ``print(result)`` shows)."""
        ...

    def by_line(self) -> list:
        """Time per source line, longest first; each row has ``location`` (``file.py:42``)."""
        ...

    def save_trace(self, path: str) -> str:
        """Write a trace-event JSON (gzip when ``path`` ends in ``.gz``); returns ``path``."""
        ...


def write_trace(data: dict, path: str) -> str:
    """Write trace-event ``data`` as compact JSON to ``path``, gzip-compressed for ``.gz``;
    returns the absolute path."""
    payload = json.dumps(data, separators=(",", ":")).encode()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(payload)
    return os.path.abspath(path)
