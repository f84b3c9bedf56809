"""``nki.compiler``: per-kernel configuration passed to ``nki.jit`` (NKI 0.7/0.8).

    @nki.jit(compile_config=CompileConfig(allocation=Allocation.LINEAR),
             specialization_config=SpecializationConfig())
    def kernel(x): ...

What reaches the simulator (``nki/jit/kernel.py``, ``nki/jit/specialize.py``):

* ``allocation=Allocation.LINEAR`` places every on-chip tile from its first write to its
  last read (``nki.jit.allocate.linear_ranges``); the default (``None`` or ``COLORING``,
  the compiler's graph colouring after the trace) keeps the simulator's usual placement.
  An out-of-memory under ``LINEAR`` falls back to the default placement unless
  ``nki_alloc_fallback=False``, which raises the linear allocator's error.
* ``SpecializationConfig.allow_nested_config_override`` decides what happens when a kernel
  calls another ``@nki.jit`` kernel whose configuration differs.

Every other option changes only how AWS's compiler generates code (engine choice, DMA
prefetching, instruction order, dead-code passes): the simulator runs every instruction
in program order with exact numerics, which those options do not change. They are
accepted, type-checked, checked for the mode they need, and recorded on the
specialization (``kernel.specialize(...).compile_config``), never silently misapplied.

Which mode each option needs follows AWS's CompileConfig reference and troubleshooting
pages: ``scheduling=True`` needs ``allocation=Allocation.LINEAR``; the optimizations of
the new flow act only when NKI allocates (``LINEAR``); the scheduling heuristic acts only
when NKI schedules. Errors are raised when the config is built, as AWS's are.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass, fields

from nki.errors import NkiTypeError, NkiValueError


class Allocation(enum.Enum):
    """How on-chip tiles get addresses (``CompileConfig.allocation``).

    * ``COLORING``: the current flow; the compiler colours a graph after the trace (what
      the simulator's default placement stands for).
    * ``LINEAR``: NKI's linear scan before the rest of compilation; a tile takes an address
      at its first write and gives it back after its last read.
    """

    COLORING = "coloring"
    LINEAR = "linear"


class AddressRotation(enum.Enum):
    """Whether the backend may rotate a tensor's address for a better layout (code
    generation only)."""

    DISABLED = "disabled"
    ENABLED = "enabled"


class OptLevel(enum.Enum):
    """How many optimizations the new flow applies (``CompileConfig.opt_level``); the
    current flow is the same at every level. Code generation only."""

    O0 = 0
    O1 = 1
    O2 = 2


class AllocationMode(enum.Enum):
    """How NKI allocation picks an address (``experimental_allocation_mode``): ``RING``
    (fresh addresses, reuse after wrap-around), ``FAST`` (stack nested lifetimes, best fit
    otherwise), ``MAX_REUSE`` (always best fit). The simulator places by first fit over
    the same live ranges; the mode is recorded."""

    RING = "ring"
    FAST = "fast"
    MAX_REUSE = "max_reuse"


class SchedulingHeuristic(enum.Enum):
    """How NKI scheduling picks the next ready instruction
    (``experimental_scheduling_heuristic``). The simulator runs program order
    (``TRIVIAL``'s order), which every heuristic keeps for dependent instructions."""

    ASAP = "asap"
    CRITICAL_PATH = "critical_path"
    DMA_PREFETCH = "dma_prefetch"
    TRIVIAL = "trivial"


# options that act only when NKI allocates (allocation=LINEAR) / only when NKI schedules
_NEEDS_LINEAR = ("prefetch_auto", "split_reused_buffers", "tensor_copy_elim", "dma_copy_elim",
                 "element_widening", "engine_balancing", "register_load_reuse",
                 "remove_unused_instructions", "remove_overwritten_writes",
                 "experimental_allocation_mode")
_NEEDS_SCHEDULING = ("experimental_scheduling_heuristic",)
_ENUMS = {"allocation": Allocation, "opt_level": OptLevel,
          "experimental_allocation_mode": AllocationMode,
          "experimental_scheduling_heuristic": SchedulingHeuristic}


def _loc():
    """The user's line: the innermost frame outside nki and outside the ``__init__`` that
    ``dataclasses`` generates (compiled from ``<string>``)."""
    from nki.errors import SourceLoc
    from nki.lang.tracer import _is_internal

    frame = sys._getframe(1)
    while frame is not None and (_is_internal(frame.f_code.co_filename)
                                 or frame.f_code.co_filename == "<string>"):
        frame = frame.f_back
    if frame is None:
        return None
    return SourceLoc(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


@dataclass(frozen=True)
class CompileConfig:
    """Options that change downstream compilation (``@nki.jit(compile_config=...)``).

    ``allocation`` and ``nki_alloc_fallback`` change where the simulator places tiles (see
    the module docstring); every other option only changes AWS's code generation and is
    validated and recorded.

    Raises:
        NkiTypeError (a ``TypeError``): an enum option given a value of another type.
        NkiValueError (a ``ValueError``): an option set without the mode it needs.

    Example:
        >>> CompileConfig(allocation=Allocation.LINEAR, prefetch_auto=True).allocation
        <Allocation.LINEAR: 'linear'>
    """

    allocation: Allocation | None = None
    scheduling: bool = False
    opt_level: OptLevel | None = None
    experimental_allocation_mode: AllocationMode | None = None
    experimental_scheduling_heuristic: SchedulingHeuristic | None = None
    address_rotation: AddressRotation | None = None
    barrier_check: bool = False
    dead_code_elim: bool = False
    nki_alloc_fallback: bool = True
    sbuf_allocation_fallback: bool = True
    non_ssa_legalization: bool = False
    prefetch_auto: bool = False
    split_reused_buffers: bool = False
    tensor_copy_elim: bool = False
    dma_copy_elim: bool = False
    element_widening: bool = False
    engine_balancing: bool = False
    register_load_reuse: bool = False
    remove_unused_instructions: bool = False
    remove_overwritten_writes: bool = False

    def __post_init__(self) -> None:
        self._check_types()
        linear = self.allocation is Allocation.LINEAR
        if self.scheduling and not linear:
            detail = ("scheduling=True needs an allocation; set allocation=Allocation.LINEAR "
                      "as well." if self.allocation is None else
                      f"scheduling=True needs allocation=Allocation.LINEAR, got "
                      f"allocation={self.allocation}")
            raise NkiValueError("nki_invalid_compile_config", detail, _loc())
        for name in _NEEDS_LINEAR:
            if not linear and self._is_set(name):
                raise NkiValueError("nki_invalid_compile_config", f"{name} acts only when NKI "
                                    "allocates; it cannot be set with "
                                    "allocation=Allocation.COLORING.", _loc())
        for name in _NEEDS_SCHEDULING:
            if not self.scheduling and self._is_set(name):
                raise NkiValueError("nki_invalid_compile_config", f"{name} acts only when NKI "
                                    "schedules; set scheduling=True as well.", _loc())

    def _check_types(self) -> None:
        for name, enum_type in _ENUMS.items():
            value = getattr(self, name)
            if value is not None and not isinstance(value, enum_type):
                raise NkiTypeError("nki_invalid_compile_config", f"{name} must be an "
                                   f"nki.compiler.{enum_type.__name__} or None, got "
                                   f"{value!r}", _loc())
        if self.address_rotation is not None and \
                not isinstance(self.address_rotation, AddressRotation):
            raise NkiTypeError("nki_invalid_compile_config", "address_rotation must be an "
                               f"nki.compiler.AddressRotation, got {self.address_rotation!r}",
                               _loc())
        for f in fields(self):
            if f.name not in _ENUMS and f.name != "address_rotation" and \
                    not isinstance(getattr(self, f.name), bool):
                raise NkiTypeError("nki_invalid_compile_config", f"{f.name} must be a bool, "
                                   f"got {getattr(self, f.name)!r}", _loc())

    def _is_set(self, name: str) -> bool:
        default = next(f.default for f in fields(self) if f.name == name)
        return getattr(self, name) != default

    @property
    def linear(self) -> bool:
        """Whether NKI's linear-scan allocation places the tiles."""
        return self.allocation is Allocation.LINEAR


@dataclass(frozen=True)
class SpecializationConfig:
    """Options of the specialisation phase (``@nki.jit(specialization_config=...)``).

    ``allow_nested_config_override``: when this kernel is the top-level kernel, a nested
    ``@nki.jit`` kernel whose compile config disagrees is inlined under this kernel's
    config with a warning, instead of raising.

    Example:
        >>> SpecializationConfig(allow_nested_config_override=True)
        SpecializationConfig(allow_nested_config_override=True)
    """

    allow_nested_config_override: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.allow_nested_config_override, bool):
            raise NkiTypeError("nki_invalid_compile_config", "allow_nested_config_override "
                               f"must be a bool, got {self.allow_nested_config_override!r}",
                               _loc())


__all__ = ["Allocation", "AddressRotation", "AllocationMode", "CompileConfig", "OptLevel",
           "SchedulingHeuristic", "SpecializationConfig"]
