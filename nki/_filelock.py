"""Advisory file locks (``flock``) that the background compilers hold for their life: the
simulator's helper builder (nki/sim/tier.py) and the cost model's loop (nki/cost/loop_tier.py)."""

from __future__ import annotations

import fcntl
import os


def held_elsewhere(path: str) -> bool:
    """Whether some open file (another process's, or a child's inherited one) holds the lock
    on ``path``; False when the file cannot even be opened (nothing can hold it then)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False
