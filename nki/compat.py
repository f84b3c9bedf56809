"""The foreign import names nki answers to, and how they stay out of AWS's way.

Kernels and test suites written for AWS's tools import names that belong to AWS's
distributions: ``neuronxcc.nki`` (the legacy dialect, in ``neuronx-cc``), ``nki_cpu_simulator``
(AWS's CPU simulator), ``neuron_dtypes`` (AWS's host dtypes). nki answers to each, but never
as a top-level package of its own wheel: pip does not detect two distributions writing the
same file, so ours would overwrite theirs and uninstalling ours would delete it. Instead the
packages live in ``nki/foreign-names/`` (a folder name no import can spell) and a one-line
``nki-foreign-names.pth`` *appends* that folder to ``sys.path`` at start-up: a real AWS
package found anywhere earlier on the path always wins, and no file of theirs is written.

Each foreign package is a few lines that alias our modules into ``sys.modules``, so a foreign
name and our own spelling are one module object, never two copies:

| foreign name | our spelling |
|---|---|
| ``neuronxcc.nki`` (+ ``.language``, ``.isa``, ...) | ``nki.legacy`` |
| ``nki_cpu_simulator.nki`` | ``nki`` itself |
| ``neuron_dtypes`` | ``nki.host_dtypes`` |
| ``torch_neuronx`` | ``nki.torch.neuronx`` (its import enables the ``neuron`` device) |
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import warnings
from types import ModuleType

FOREIGN_DIR = os.path.join(os.path.dirname(__file__), "foreign-names")

# foreign top-level name -> the AWS distribution that owns it
AWS_DISTRIBUTIONS = {"neuronxcc": "neuronx-cc", "nki_cpu_simulator": "nki-cpu-simulator",
                     "neuron_dtypes": "neuron-dtypes", "torch_neuronx": "torch-neuronx"}


def alias_modules(foreign: str, ours: str, submodules: tuple[str, ...] = ()) -> ModuleType:
    """Make ``foreign`` and ``foreign.<sub>`` the modules ``ours`` and ``ours.<sub>``.

    Returns our module. The import system looks in ``sys.modules`` first, so every later
    ``import foreign.sub`` gets our module object itself.
    """
    module = importlib.import_module(ours)
    sys.modules[foreign] = module
    for sub in submodules:
        sys.modules[f"{foreign}.{sub}"] = importlib.import_module(f"{ours}.{sub}")
    return module


def foreign_packages_shadowed() -> list[str]:
    """The AWS distributions whose packages take precedence over ours on ``sys.path`` (their
    import names resolve outside ``nki/foreign-names``). Finding a spec imports nothing."""
    found = []
    for name, distribution in AWS_DISTRIBUTIONS.items():
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        origin = (spec.origin or "") if spec else ""
        locations = list(spec.submodule_search_locations or []) if spec else []
        paths = [origin] + locations
        if spec and not any(p.startswith(FOREIGN_DIR) for p in paths if p):
            found.append(distribution)
    return found


def warn_once_if_aws_installed() -> None:
    """One warning when AWS's own distributions are importable next to ours: their names win,
    so ``neuronxcc.nki`` & co. are AWS's there (use ``nki.legacy`` & co.)."""
    shadowed = foreign_packages_shadowed()
    if shadowed:
        warnings.warn(
            f"AWS's {', '.join(shadowed)} is installed next to nki: its import names win, so "
            "they are not nki's simulator here. nki's own spellings still work (nki.legacy for "
            "neuronxcc.nki, nki.host_dtypes for neuron_dtypes). nki replaces AWS's 'nki' "
            "distribution: keep the two in separate virtual environments.", stacklevel=3)
