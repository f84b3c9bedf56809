"""Advisory file locks (``flock``) that the background compilers hold for their life: the
simulator's helper builder (nki/sim/tier.py, nki/warmup.py) and the cost model's loop
(nki/cost/loop_tier.py). A lock belongs to the open file, so a child given the descriptor
holds it on after its parent closed its own copy."""

from __future__ import annotations

import fcntl
import os


def _open(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return None


def _lock(fd: int, wait: bool) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def take(path: str, wait: bool = False) -> int | None:
    """The descriptor of ``path`` with its lock taken, or None when another open file holds
    it (``wait=False``; ``wait=True`` blocks until it is free) or the file cannot be opened."""
    fd = _open(path)
    if fd is not None and not _lock(fd, wait):
        os.close(fd)
        return None
    return fd


def held_elsewhere(path: str) -> bool:
    """Whether some open file (another process's, or a child's inherited one) holds the lock
    on ``path``; False when the file cannot even be opened (nothing can hold it then)."""
    fd = _open(path)
    if fd is None:
        return False
    try:
        return not _lock(fd, False)
    finally:
        os.close(fd)
