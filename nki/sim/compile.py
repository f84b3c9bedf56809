"""Compiling generated sources with Numba.

The source is written to a file (in the program cache when enabled) and imported, so Numba's
own on-disk cache can key it, and tracebacks through ``linecache`` show the generated lines.
"""

from __future__ import annotations

import hashlib
import importlib.util
import linecache
import os
import sys
import tempfile

from numba import njit

_HEADER = "from nki.sim.native import run_instr\n\n"


def source_dir() -> str:
    """Where generated sources (and Numba's caches of them) live: one folder per version of
    the shared helper sources, so two nki installs never use each other's machine code."""
    from nki._digest import shared_digest
    from nki.config import from_environment

    base = from_environment().cache_dir or tempfile.gettempdir()
    path = os.path.join(base, "programs", shared_digest()[:16])
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def compile_source(name: str, source: str):
    """Compile ``source`` (defining function ``name``) with ``numba.njit(nogil=True)``."""
    text = _HEADER + source
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    modname = f"nki_prog_{digest}"
    path = os.path.join(source_dir(), modname + ".py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    module = sys.modules.get(modname)
    if module is None:
        spec = importlib.util.spec_from_file_location(modname, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[modname] = module
    linecache.checkcache(path)
    fn = getattr(module, name)
    return njit(nogil=True, cache=True)(fn)
