"""nki's own source digest, and the guard that keeps Numba's caches of nki's code in step with it.

Numba keys a cached function by its own file's timestamp only. A helper in
``nki/sim/emit/vector.py`` that inlines ``nki/sim/helpers/memory.py`` keeps its cache entry
when ``memory.py`` changes, and then runs stale machine code (seen here as a segfault after the
operand layout changed). So the first import of ``nki.sim`` compares the digest of the shared helper
sources with a stamp next to the caches and, if it differs, deletes nki's Numba cache files
(only nki's: the ``__pycache__`` folders of nki's packages). Generated programs and helper
entries live in a folder named by the same digest (``nki.sim.modules.source_dir``).
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent
_DIGEST: str | None = None
_STAMP = "nki-sources.digest"


def nki_digest() -> str:
    """Hash of every nki source file."""
    global _DIGEST
    if _DIGEST is None:
        h = hashlib.sha256()
        for path in sorted(ROOT.rglob("*.py")):
            h.update(str(path.relative_to(ROOT)).encode())
            h.update(path.read_bytes())
        _DIGEST = h.hexdigest()
    return _DIGEST


# the modules every compiled helper inlines; a change to one of them can leave another
# module's cached machine code stale. (A helper's own module is covered by Numba's own file
# stamp, and its C entry module is named by a hash of the helper's source.)
SHARED = ("sim/helpers/*.py", "sim/numerics.py", "sim/blas.py", "sim/transcend/*.py",
          "sim/layout.py", "ir/types.py")
# never inlined into machine code: the registry only names and wraps helpers (each entry
# module is named by a hash of its own text); the pure tier's modules are plain Python that
# only the compile-free tier runs, so editing a numpy twin rebuilds no helper
NOT_INLINED = ("sim/helpers/registry.py", "sim/helpers/pure.py", "sim/helpers/pure_twins.py",
               "sim/helpers/pure_transcend.py")


@functools.lru_cache(maxsize=1)
def shared_digest() -> str:
    """Hash of the sources every helper's machine code depends on (computed once)."""
    h = hashlib.sha256()
    for pattern in SHARED:
        for path in sorted(ROOT.glob(pattern)):
            if str(path.relative_to(ROOT)) in NOT_INLINED:
                continue
            h.update(str(path.relative_to(ROOT)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _numba_cache_files():
    for pyc in ROOT.rglob("__pycache__"):
        yield from pyc.glob("*.nb[ic]")


def refresh_numba_caches() -> None:
    """Drop nki's Numba caches if the shared helper sources changed since they were written."""
    stamp = ROOT / "sim" / "__pycache__" / _STAMP
    digest = shared_digest()
    try:
        if stamp.read_text() == digest:
            return
    except OSError:
        pass
    for f in _numba_cache_files():
        try:
            f.unlink()
        except OSError:
            pass
    try:
        stamp.parent.mkdir(exist_ok=True)
        tmp = stamp.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(digest)
        os.replace(tmp, stamp)
    except OSError:
        pass  # a read-only install: Numba then caches in its user-wide folder
