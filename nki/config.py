"""Settings: the only place nki reads environment variables.

| variable | meaning | default |
|---|---|---|
| ``NKI_NC_VERSION`` | gen2/gen3/gen4, as AWS's simulator reads it; wins over the next | unset |
| ``NEURON_PLATFORM_TARGET_OVERRIDE`` | trn1/inf2/gen2, trn2/gen3, trn3/gen4 | trn3 |
| ``NKI_PRECISE_FP`` | 1: bf16/fp8 tiles hold exact low-precision bits; 0: keep them in fp32 | 1 |
| ``NKI_BACKEND`` | ``numba`` or ``python`` | numba |
| ``NKI_CACHE_DIR`` | where compiled programs are cached | ``~/.cache/nki`` |
| ``NKI_CACHE`` | 0 disables the on-disk program cache | 1 |
| ``NKI_CHECK_UNINIT`` | 1: reading never-written SBUF/PSUM/accumulators/registers raises | 0 |
| ``NKI_CHECK_RACES`` | 1: two ``nl.affine_range`` iterations writing one location raise | 0 |
| ``NKI_LOOP_BUDGET`` | iterations one run of a runtime loop may take before it raises | 0 (none) |
| ``NKI_SIMULATOR`` | accepted for compatibility with AWS (every call simulates here) | 1 |
| ``NKI_TORCH_ROUTING`` | 0: aten mm/bmm/addmm/SDPA on ``neuron`` stay on CPU kernels | 1 |
| ``NKI_TORCH_BUILD_DIR`` | where nki.torch's C++ extensions are built | ``<cache>/torch-ext`` |
| ``NKI_TORCH_AUTOLOAD`` | 1: ``import torch`` enables the ``neuron`` device | 0 |
| ``NEURON_SIM_DEVICE_COUNT`` | how many simulated ``neuron`` devices torch sees | 8 |
| ``CC`` | C compiler (flags allowed) for the MX x4 dtypes and the bf16 unit's GEMM | ``gcc`` |
| ``NKI_TIER`` | ``auto`` (plain Python while helpers compile), ``compiled``, ``python`` | auto |
| ``NKI_ROW_CHAINS`` | 0: no row chains (``nki/sim/rowchain.py``; the same bits either way) | 1 |
| ``NKI_BF16_UNIT`` | 0: bf16/fp8 matmuls never use the CPU's bf16 dot unit (fp32 sgemm) | 1 |

Every field can also be overridden per kernel by the keyword of the same name on ``nki.jit``.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, fields, replace
from pathlib import Path


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def _count(name: str) -> int:
    value = os.environ.get(name, "").strip() or "0"
    if not value.isdigit():
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "nki")


@dataclass(frozen=True)
class Settings:
    """Execution settings of one kernel call."""

    target: str = "trn3"
    precise_fp: bool = True
    backend: str = "numba"
    cache_dir: str = ""
    cache: bool = True
    check_uninit: bool = False
    check_races: bool = False
    loop_budget: int = 0
    row_chains: bool = True

    def with_overrides(self, **kw) -> Settings:
        known = {f.name for f in fields(self)}
        return replace(self, **{k: v for k, v in kw.items() if k in known and v is not None})


def _target_from_environment() -> str:
    """The generation the environment names. ``NKI_NC_VERSION`` (the simulator's own variable,
    which nki-library's harness sets before every call) wins over the compiler's
    ``NEURON_PLATFORM_TARGET_OVERRIDE``; both take any spelling ``get_target`` knows."""
    for name in ("NKI_NC_VERSION", "NEURON_PLATFORM_TARGET_OVERRIDE"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return "trn3"


def from_environment() -> Settings:
    """Read the environment once per call site that needs it (cheap; no global state)."""
    return Settings(
        target=_target_from_environment(),
        precise_fp=_flag("NKI_PRECISE_FP", True),
        backend=os.environ.get("NKI_BACKEND", "") or "numba",
        cache_dir=os.environ.get("NKI_CACHE_DIR", "") or _default_cache_dir(),
        cache=_flag("NKI_CACHE", True),
        check_uninit=_flag("NKI_CHECK_UNINIT", False),
        check_races=_flag("NKI_CHECK_RACES", False),
        loop_budget=_count("NKI_LOOP_BUDGET"),
        row_chains=_flag("NKI_ROW_CHAINS", True),
    )


def torch_routing_enabled() -> bool:
    """Whether the torch bridge starts with aten ops on ``neuron`` routed to NKI kernels (it is
    not a kernel setting, so it stays out of :class:`Settings` and the program cache keys)."""
    return _flag("NKI_TORCH_ROUTING", True)


def torch_build_dir() -> str:
    """Root folder of the torch bridge's compiled C++ extensions (one subfolder per source
    digest, so an edited source never loads a stale build)."""
    return os.environ.get("NKI_TORCH_BUILD_DIR", "") or str(
        Path(from_environment().cache_dir) / "torch-ext")


def neuron_sim_device_count() -> int:
    """How many simulated ``neuron`` devices (NeuronCores) torch sees; 1..64."""
    value = os.environ.get("NEURON_SIM_DEVICE_COUNT", "").strip() or "8"
    if not value.isdigit() or not 1 <= int(value) <= 64:
        raise ValueError(f"NEURON_SIM_DEVICE_COUNT must be an integer in 1..64, got {value!r}")
    return int(value)


def c_compiler() -> list[str]:
    """The command that compiles nki's small C extension (the MX x4 numpy dtypes,
    :mod:`nki.hostx4`): ``CC`` split like a shell would, else ``gcc``."""
    return shlex.split(os.environ.get("CC", "").strip()) or ["gcc"]


BF16_UNIT_KINDS = ("auto", "amx_bf16", "avx512_bf16")


def bf16_unit_enabled() -> bool:
    """Whether bf16/fp8 matmuls may run on a CPU bf16 dot unit (:mod:`nki.sim.bf16`):
    ``NKI_BF16_UNIT`` off (``0``) or not; read once per process, when that module is
    imported."""
    value = os.environ.get("NKI_BF16_UNIT", "").strip().lower()
    return value in BF16_UNIT_KINDS or _flag("NKI_BF16_UNIT", True)


def bf16_unit_kind() -> str:
    """Which unit: ``NKI_BF16_UNIT=amx_bf16`` or ``avx512_bf16`` picks one (where the CPU has
    it), anything else that is not off means ``auto`` (AMX where found)."""
    value = os.environ.get("NKI_BF16_UNIT", "").strip().lower()
    return value if value in BF16_UNIT_KINDS else "auto"


TIERS = ("auto", "compiled", "python")


def tier() -> str:
    """Which helpers a ``numba``-backend call runs (``nki/sim/tier.py``): ``auto`` (compiled
    once built, plain Python while they build in the background), ``compiled`` (always; a
    cold call waits for the compile) or ``python`` (never compiled). Not a kernel setting:
    the tiers give the same bits, so it stays out of the program cache keys."""
    value = os.environ.get("NKI_TIER", "").strip().lower() or "auto"
    if value not in TIERS:
        raise ValueError(f"NKI_TIER must be one of {', '.join(TIERS)}, got {value!r}")
    return value
