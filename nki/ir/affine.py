"""Affine integer expressions over loop variables.

Loop variables are numbered *slots* (``i0``, ``i1``, ...): slot k is the k-th enclosing IR loop.
Offsets, partition starts and trip counts are all ``const + sum(coef * i_slot)``, which is what
rerolled new-dialect loops produce and what legacy ``affine_range`` indices are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nki._frozen import fast_init


@fast_init
@dataclass(frozen=True)
class Affine:
    """``const + sum(coef * i_slot for slot, coef in terms)``; terms sorted, no zero coefs."""

    const: int = 0
    terms: tuple[tuple[int, int], ...] = ()

    @staticmethod
    def of(value: int | Affine) -> Affine:
        return value if isinstance(value, Affine) else Affine(int(value))

    @staticmethod
    def var(slot: int, coef: int = 1) -> Affine:
        return Affine(0, ((slot, coef),) if coef else ())

    @property
    def is_const(self) -> bool:
        return not self.terms

    def coef(self, slot: int) -> int:
        for s, c in self.terms:
            if s == slot:
                return c
        return 0

    def slots(self) -> tuple[int, ...]:
        return tuple(s for s, _ in self.terms)

    def __add__(self, other: int | Affine) -> Affine:
        # fast paths: an unrolled trace adds constants to constant offsets ~10^5 times
        if type(other) is int:
            return Affine(self.const + other, self.terms) if other else self
        other = Affine.of(other)
        if not other.terms or not self.terms:
            return Affine(self.const + other.const, self.terms or other.terms)
        coefs = dict(self.terms)
        for s, c in other.terms:
            coefs[s] = coefs.get(s, 0) + c
        return Affine(self.const + other.const,
                      tuple(sorted((s, c) for s, c in coefs.items() if c)))

    __radd__ = __add__

    def __neg__(self) -> Affine:
        return self * -1

    def __sub__(self, other: int | Affine) -> Affine:
        return self + (-Affine.of(other))

    def __mul__(self, k: int) -> Affine:
        k = int(k)
        if k == 0:
            return Affine(0)
        return Affine(self.const * k, tuple((s, c * k) for s, c in self.terms))

    __rmul__ = __mul__

    def substitute(self, slot: int, value: int | Affine) -> Affine:
        """Replace ``i_slot`` by ``value``."""
        c = self.coef(slot)
        if not c:
            return self
        rest = Affine(self.const, tuple(t for t in self.terms if t[0] != slot))
        return rest + Affine.of(value) * c

    def evaluate(self, env: Mapping[int, int] | Sequence[int]) -> int:
        return self.const + sum(c * env[s] for s, c in self.terms)

    def bounds(self, trips: Mapping[int, int]) -> tuple[int, int]:
        """Min and max over ``0 <= i_slot < trips[slot]`` (constant trips only)."""
        lo = hi = self.const
        for s, c in self.terms:
            span = c * (trips[s] - 1)
            lo += min(0, span)
            hi += max(0, span)
        return lo, hi

    def __str__(self) -> str:
        parts = []
        for s, c in self.terms:
            parts.append(f"i{s}" if c == 1 else f"{c}*i{s}")
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")
