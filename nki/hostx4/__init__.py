"""Build (once) and load the C extension that registers the MX x4 numpy dtypes.

``x4dtype.c`` registers ``float8_e4m3fn_x4``, ``float8_e5m2_x4`` and ``float4_e2m1fn_x4`` as
numpy user dtypes (see its header for what they support). It is compiled on first use with
the machine's C compiler (``CC``, default ``gcc``) against numpy's and Python's headers, into
``<NKI_CACHE_DIR>/x4dtype/<digest>/``, the digest covering the source, numpy's version, the
Python ABI and the flags, so an edit or an upgrade rebuilds and nothing stale loads.
Concurrent first builds take turns on a lock file in that folder; the library appears by an
atomic rename, so a reader never sees half of one. Later processes only load it (~1 ms).

:mod:`nki.ir.packed` calls :func:`load` and falls back to opaque void dtypes when it raises
:class:`BuildError`. The scalar types are also attributes of this module (pickle finds them
here).

Example:
    >>> import numpy as np
    >>> ext = load()                                    # doctest: +SKIP
    >>> str(np.zeros(2, ext.float8_e4m3fn_x4).dtype)    # doctest: +SKIP
    'float8_e4m3fn_x4'
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
import threading
import time
from pathlib import Path
from types import ModuleType

import numpy as np

from nki import config

SOURCE = Path(__file__).resolve().parent / "x4dtype.c"
MODULE = "_nki_x4dtype"
CFLAGS = ("-O2", "-fPIC", "-shared")
NAMES = ("float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4")
compiled_seconds: float | None = None   # set when this process compiled the library
_loaded: ModuleType | None = None
_load_lock = threading.Lock()


class BuildError(RuntimeError):
    """The extension could not be compiled or loaded (no compiler, a compile error, an
    unwritable cache folder)."""


def digest() -> str:
    """Hash of what the compiled library depends on."""
    h = hashlib.sha256(SOURCE.read_bytes())
    abi = sysconfig.get_config_var("SOABI") or sys.version
    h.update(f"{np.__version__}|{abi}|{sys.version}|{CFLAGS}".encode())
    return h.hexdigest()[:16]


def build_dir() -> Path:
    return Path(config.from_environment().cache_dir) / "x4dtype" / digest()


def library_path() -> Path:
    return build_dir() / f"{MODULE}.so"


def load() -> ModuleType:
    """The extension module, compiled first if this source version never was.

    Raises:
        BuildError: it could not be built or loaded.
    """
    global _loaded
    with _load_lock:
        if _loaded is None:
            try:
                path = library_path()
            except OSError as e:        # an installed copy without its C source
                raise BuildError(f"cannot read {SOURCE}: {e}") from e
            if not path.exists():
                _build(path)
            _loaded = _import(path)
        return _loaded


def __getattr__(name: str):
    if name in NAMES:
        return getattr(load(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _build(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path.parent / "build.lock"):
            if not path.exists():           # another process built it while we waited
                _compile(path)
    except OSError as e:
        raise BuildError(f"cannot build in {path.parent}: {e}") from e


@contextlib.contextmanager
def _locked(lock_path: Path):
    """An exclusive lock between processes (POSIX ``flock``; without it, the atomic rename
    alone keeps concurrent builds correct, only duplicated)."""
    try:
        import fcntl
    except ImportError:      # Windows
        fcntl = None
    with open(lock_path, "a") as fh:
        if fcntl is not None:
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(fh, fcntl.LOCK_UN)


def _compile(path: Path) -> None:
    import subprocess  # only a first build pays for it

    global compiled_seconds
    cc = config.c_compiler()
    tmp = path.with_name(f"{MODULE}.{os.getpid()}.tmp.so")
    includes = {np.get_include(), sysconfig.get_paths()["include"],
                sysconfig.get_paths()["platinclude"]}
    link = ["-undefined", "dynamic_lookup"] if sys.platform == "darwin" else []
    cmd = [*cc, *CFLAGS, *link, *(f"-I{d}" for d in sorted(includes)), str(SOURCE),
           "-o", str(tmp)]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except FileNotFoundError as e:
        raise BuildError(f"no C compiler: {cc[0]!r} was not found (set CC to one)") from e
    except subprocess.TimeoutExpired as e:
        raise BuildError(f"{cc[0]} took over {e.timeout:.0f} s") from e
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    os.replace(tmp, path)
    compiled_seconds = time.perf_counter() - t0


def _import(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
    spec = importlib.util.spec_from_file_location(MODULE, path, loader=loader)
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except (ImportError, RuntimeError, SystemError, TypeError) as e:
        raise BuildError(f"{path} does not load: {e}") from e
    sys.modules[MODULE] = module
    return module
