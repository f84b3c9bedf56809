"""Generated modules on disk: where they live and how they are written and imported.

Both generated programs (nki/sim/compile.py) and helper C entries
(nki/sim/helpers/registry.py) are Python modules written into one folder per version of the
shared helper sources. A leaf module, so that the registry, which compiles entries, and the
program compiler, which uses the registry and the emitters, never import each other.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile


def source_dir() -> str:
    """Where generated sources and their machine code live: one folder per version of the
    shared helper sources, so two nki installs never use each other's machine code."""
    from nki._digest import shared_digest
    from nki.config import from_environment

    base = from_environment().cache_dir or tempfile.gettempdir()
    path = os.path.join(base, "programs", shared_digest()[:16])
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def write_module(folder: str, modname: str, text: str) -> str:
    """Write ``text`` as ``folder/modname.py`` (atomically, once); returns the path."""
    path = os.path.join(folder, modname + ".py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return path


def import_module(modname: str, path: str):
    """Import (once per process) the module at ``path`` under ``modname``."""
    module = sys.modules.get(modname)
    if module is None:
        spec = importlib.util.spec_from_file_location(modname, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[modname] = module   # before exec: Numba records importable module names
        spec.loader.exec_module(module)
    return module
