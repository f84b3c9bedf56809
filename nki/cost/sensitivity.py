"""How much an estimate moves when a constant the docs do not give moves.

For each assumed constant of :data:`~nki.cost.facts.SENSITIVITY` the estimate is redone at
its default -50% and +50% (integer constants rounded, at least 1) and, when they differ,
the table's stated range; the rows say how far the latency moves. Read estimates against it:
a conclusion that flips within these ranges is not one the model supports."""

from __future__ import annotations

from dataclasses import dataclass

from nki.cost.estimate import estimate_spec
from nki.cost.facts import SENSITIVITY, cost_facts

_INTEGER = {"rotation_depth"}


@dataclass(frozen=True)
class SensitivityRow:
    constant: str
    default: float
    low: float
    high: float
    latency_low_pct: float      # change of the latency at ``low``, percent of the default's
    latency_high_pct: float


def _scaled(name: str, value: float, factor: float) -> float:
    v = value * factor
    return max(1, round(v)) if name in _INTEGER else v


def sensitivity(spec, target: str, name: str = "kernel") -> list[SensitivityRow]:
    """One row per assumed constant: the latency change at default ±50%."""
    base = estimate_spec(spec, target, False, name).latency_ns
    facts = cost_facts(target)
    rows = []
    for const, _, _ in SENSITIVITY:
        default = facts[const]
        low, high = _scaled(const, default, 0.5), _scaled(const, default, 1.5)
        at = [estimate_spec(spec, target, False, name, {const: v}).latency_ns
              for v in (low, high)]
        rows.append(SensitivityRow(const, default, low, high,
                                   100 * (at[0] - base) / base, 100 * (at[1] - base) / base))
    return rows


def sensitivity_text(rows: list[SensitivityRow]) -> str:
    out = [f"{'constant':26s} {'default':>8s} {'-50%':>8s} {'+50%':>8s}"]
    for r in rows:
        out.append(f"{r.constant:26s} {r.default:8g} {r.latency_low_pct:+7.1f}% "
                   f"{r.latency_high_pct:+7.1f}%")
    return "\n".join(out)
