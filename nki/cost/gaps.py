"""Busy intervals of the compute engines and their shared ports, for the reordering schedule.

In program order (the default) an engine is one "free at" time. When the model stands in for
the compiler's instruction scheduler (``order="reorder"``), a ready instruction may run in an
earlier gap of its engine, before instructions that come earlier in the program but wait for
their data: a greedy list schedule in program-order priority. A compute instruction is not
split (unlike a DMA packet, nki/cost/schedule.py's ``DmaEngines``): it needs one gap as long
as itself on its engine and on every port it holds. Only the last ``KEEP`` intervals of a
resource are kept; older ones become a floor nothing starts before (conservative: it can only
delay an instruction).
"""

from __future__ import annotations

from bisect import insort

KEEP = 64


class Gaps:
    """One resource's busy intervals ``(start, end, index, is_matmul)``, sorted by start."""

    __slots__ = ("busy", "floor")

    def __init__(self) -> None:
        self.busy: list[tuple[float, float, int, bool]] = []
        self.floor = 0.0

    def first_fit(self, t: float, dur: float) -> float:
        """The earliest start ``>= t`` where ``[start, start + dur)`` is free."""
        t = max(t, self.floor)
        for s, e, _, _ in self.busy:
            if e <= t:
                continue
            if s >= t + dur:
                break
            t = e
        return t

    def occupy(self, start: float, end: float, index: int, matmul: bool = False) -> None:
        insort(self.busy, (start, end, index, matmul))
        if len(self.busy) > KEEP:
            self.floor = max(self.floor, self.busy.pop(0)[1])

    def ending_at(self, t: float):
        """The interval that ends exactly at ``t`` (what held an instruction back), or None."""
        for iv in reversed(self.busy):
            if iv[1] == t:
                return iv
        return None


def common_fit(resources: list[Gaps], t: float, dur: float) -> float:
    """The earliest start ``>= t`` free for ``dur`` on every one of ``resources``."""
    while True:
        fits = [r.first_fit(t, dur) for r in resources]
        best = max(fits)
        if best == t:
            return t
        t = best
