"""Legacy ``nki.compiler`` (``ncc``): the directives the simulator can honour or ignore.

Automatic allocation is the only mode simulated: ``ncc.sbuf.auto_alloc()`` /
``ncc.psum.auto_alloc()`` are the plain buffers, compiler-pass decorators leave the kernel
unchanged, and direct allocation (``ncc.sbuf.alloc``/``mod_alloc``) is not implemented.
"""

from __future__ import annotations

import contextlib

from nki.errors import NkiUnsupportedError, fail
from nki.ir.types import Memory
from nki.lang.tracer import user_loc


class _Buffer:
    def __init__(self, memory: Memory):
        self._memory = memory

    def auto_alloc(self) -> Memory:
        """The buffer with automatic placement (what ``nl.sbuf``/``nl.psum`` are)."""
        return self._memory

    def _direct(self, *args, **kwargs):
        raise fail("nki_not_implemented", "direct allocation (ncc.sbuf/psum.alloc, "
                   "mod_alloc) is not simulated; use automatic allocation", user_loc(),
                   NkiUnsupportedError)

    alloc = mod_alloc = _direct


sbuf = _Buffer(Memory.SBUF)
psum = _Buffer(Memory.PSUM)


def _identity(func=None, **kwargs):
    """A compiler directive with no effect on simulated results."""
    if func is None:
        return lambda f: f
    return func


skip_middle_end_transformations = enable_stack_allocator = force_auto_alloc = _identity


@contextlib.contextmanager
def _scope(*args, **kwargs):
    yield


allocation_scope = no_reorder = _scope


def multi_buffer(factor: int = 2):
    """Buffering hint: no effect in the simulator."""
    return factor
