"""``nki.compiler``: per-kernel configuration passed to ``nki.jit`` (NKI 0.7).

``@nki.jit(compile_config=CompileConfig(...), specialization_config=SpecializationConfig(...))``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Allocation(enum.Enum):
    """Who places on-chip tensors: ``COLORING`` (neuronx-cc's graph colouring after the trace,
    the default) or ``LINEAR`` (NKI's linear scan: a tile takes an address at its first write
    and gives it back after its last read)."""

    COLORING = "coloring"
    LINEAR = "linear"


class AddressRotation(enum.Enum):
    """Whether the backend may rotate a tensor's address for a better layout."""

    DISABLED = "disabled"
    ENABLED = "enabled"


@dataclass(frozen=True)
class CompileConfig:
    """Options that change downstream compilation (``@nki.jit(compile_config=...)``)."""

    allocation: Allocation = Allocation.COLORING
    scheduling: bool = False
    address_rotation: AddressRotation | None = None
    barrier_check: bool = False
    dead_code_elim: bool = False
    nki_alloc_fallback: bool = True
    non_ssa_legalization: bool = False
    prefetch_auto: bool = False


@dataclass(frozen=True)
class SpecializationConfig:
    """Options of the specialisation phase (``@nki.jit(specialization_config=...)``)."""


__all__ = ["Allocation", "AddressRotation", "CompileConfig", "SpecializationConfig"]
