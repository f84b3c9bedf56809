"""Build (once) and load the torch bridge's C++ extensions.

Each extension is compiled by ``torch.utils.cpp_extension`` into
``<NKI_TORCH_BUILD_DIR or <cache>/torch-ext>/<name>-<digest>``, the digest covering its
sources, torch's version and the compiler flags, so an edit or a torch upgrade rebuilds and
nothing stale loads. A finished build leaves a marker file; later processes import the
library directly (no ninja run). Concurrent first builds are serialised by cpp_extension's
lock file in the build folder.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType

import torch

from nki import config

CSRC = Path(__file__).resolve().parent / "csrc"
HEADERS = ("neuron.h",)
EXTENSIONS = {
    "device": ("device.cpp", "fallback.cpp", "overrideable.cpp", "autocast.cpp",
               "module.cpp"),
    "c10d": ("c10d.cpp",),
}
CFLAGS = ("-O2", "-std=c++17")
_loaded: dict[str, ModuleType] = {}
compiled_seconds: dict[str, float] = {}  # extensions this process compiled, and how long it took


class BuildError(RuntimeError):
    """The C++ extension could not be compiled (no compiler, no ninja, or a compile error)."""


def module_name(kind: str) -> str:
    return f"nki_torch_{kind}"


def digest(kind: str) -> str:
    """Hash of what the compiled library depends on."""
    h = hashlib.sha256()
    for name in (*EXTENSIONS[kind], *HEADERS):
        h.update(name.encode() + b"\0" + (CSRC / name).read_bytes())
    h.update(f"{torch.__version__}|{sys.version}|{CFLAGS}".encode())
    return h.hexdigest()[:16]


def build_dir(kind: str) -> Path:
    return Path(config.torch_build_dir()) / f"{kind}-{digest(kind)}"


def is_built(kind: str) -> bool:
    d = build_dir(kind)
    return (d / "built").exists() and (d / f"{module_name(kind)}.so").exists()


def load(kind: str) -> ModuleType:
    """The extension's Python module, compiled first if this source version never was."""
    if kind in _loaded:
        return _loaded[kind]
    if is_built(kind):
        module = _import_library(kind)
    else:
        module = _compile(kind)
    _loaded[kind] = module
    return module


def _import_library(kind: str) -> ModuleType:
    name = module_name(kind)
    spec = importlib.util.spec_from_file_location(name, build_dir(kind) / f"{name}.so")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile(kind: str) -> ModuleType:
    from torch.utils import cpp_extension

    d = build_dir(kind)
    d.mkdir(parents=True, exist_ok=True)
    print(f"nki.torch: compiling the '{kind}' C++ extension into {d} (once per source "
          "version; about a minute on 2 cores)", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try:
        module = cpp_extension.load(
            name=module_name(kind), sources=[str(CSRC / s) for s in EXTENSIONS[kind]],
            extra_cflags=list(CFLAGS), extra_include_paths=[str(CSRC)],
            build_directory=str(d), verbose=False)
    except (RuntimeError, OSError, ImportError) as e:
        raise BuildError(
            f"nki.torch could not build its '{kind}' C++ extension in {d}: {e}\n"
            "It needs a C++17 compiler (g++) and ninja (`pip install ninja`).") from e
    compiled_seconds[kind] = time.perf_counter() - t0
    marker = d / f"built.{os.getpid()}.tmp"
    marker.write_text(f"{compiled_seconds[kind]:.1f} s\n")
    os.replace(marker, d / "built")
    return module


def build_all() -> dict[str, float]:
    """Compile (or load) every extension; compile seconds per extension, 0.0 if it was built
    before this process."""
    import torch.distributed  # noqa: F401  (the c10d module subclasses its pybind types)

    for kind in EXTENSIONS:
        load(kind)
    return {kind: compiled_seconds.get(kind, 0.0) for kind in EXTENSIONS}
