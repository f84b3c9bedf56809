"""Legacy ``nki.compiler`` (``ncc``): allocation and compiler directives.

``ncc.sbuf.auto_alloc()`` / ``ncc.psum.auto_alloc()`` are the plain buffers. Direct
allocation (``ncc.sbuf.alloc(func)``, ``ncc.sbuf.mod_alloc(...)`` and the PSUM pair) maps to
the current dialect's ``address=`` placement: the allocation function gives the start
partition and byte address of each block of the tensor (PSUM: bank, partition, address in
the bank). Blocks laid out one after another become one placed tensor; blocks that share
bytes (a modulo allocation with fewer physical tiles than blocks) or sit anywhere else become
one placed tile per block, so they alias exactly as on hardware. Compiler-pass decorators
leave the kernel unchanged.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
from functools import reduce
from operator import mul

from nki.ir.types import Memory
from nki.lang.tracer import validation

PSUM_BANK_BYTES = 2048


class DirectAlloc:
    """A buffer placed by the kernel: ``memory`` and ``func(idx, pdim_size, fdim_size)``
    returning ``(partition, byte address)`` (SBUF) or ``(bank, partition, address)``
    (PSUM) for block index ``idx``."""

    def __init__(self, memory: Memory, func):
        if not callable(func):
            raise validation("nki_invalid_argument", f"ncc.{memory.name.lower()}.alloc takes "
                             f"an allocation function, got {type(func).__name__}")
        self.memory, self.func = memory, func

    def address(self, idx: tuple[int, ...], pdim: int, fbytes: int) -> tuple[int, int]:
        """(start partition, byte offset in the partition) of block ``idx``."""
        got = tuple(int(v) for v in self._call(idx, pdim, fbytes))
        if self.memory is Memory.PSUM:
            if len(got) != 3:
                raise validation("nki_invalid_argument", "a PSUM allocation function returns "
                                 f"(bank, partition, address), got {got}")
            return got[1], got[0] * PSUM_BANK_BYTES + got[2]
        if len(got) != 2:
            raise validation("nki_invalid_argument", "an SBUF allocation function returns "
                             f"(partition, address), got {got}")
        return got

    def _call(self, idx: tuple[int, ...], pdim: int, fbytes: int):
        """The allocation function called by its documented parameter names (kernels bind
        extra leading arguments with ``functools.partial``), or positionally."""
        try:
            params = inspect.signature(self.func).parameters
        except (TypeError, ValueError):
            params = {}
        if {"idx", "pdim_size", "fdim_size"} <= set(params):
            return self.func(idx=idx, pdim_size=pdim, fdim_size=fbytes)
        return self.func(idx, pdim, fbytes)

    def addresses(self, blocks: tuple[int, ...], pdim: int,
                  fbytes: int) -> dict[tuple[int, ...], tuple[int, int]]:
        """The (partition, byte offset) of every block index."""
        return {idx: self.address(idx, pdim, fbytes)
                for idx in itertools.product(*(range(b) for b in blocks))}


def linear_base(addrs: dict, fbytes: int) -> tuple[int, int] | None:
    """The address of block 0 when the blocks lie one after another in index order (one
    tensor then holds them all), else None."""
    items = list(addrs.values())
    first = items[0]
    if all(a == (first[0], first[1] + k * fbytes) for k, a in enumerate(items)):
        return first
    return None


def _modulo(base: int, tiles: tuple[int, ...], scale: int, idx: tuple[int, ...]) -> int:
    """``base + scale * linear(idx mod tiles)``; no ``tiles`` folds every block onto one."""
    tiles = tuple(tiles) or (1,) * len(idx)
    mod = [i % t for i, t in zip(idx, tiles)]
    return base + scale * sum(m * reduce(mul, tiles[k + 1:], 1) for k, m in enumerate(mod))


class _Buffer:
    def __init__(self, memory: Memory):
        self._memory = memory

    def auto_alloc(self) -> Memory:
        """The buffer with automatic placement (what ``nl.sbuf``/``nl.psum`` are)."""
        return self._memory

    def alloc(self, func) -> DirectAlloc:
        """Direct allocation by ``func(idx, pdim_size, fdim_size)``."""
        return DirectAlloc(self._memory, func)

    def mod_alloc(self, base_addr: int = 0, *, base_partition: int = 0, num_par_tiles=(),
                  num_free_tiles=()) -> DirectAlloc:
        """Modulo allocation: block ``idx`` at ``base + size * linear(idx mod tiles)`` for
        the partition and the byte address."""
        def func(idx, pdim_size, fdim_size):
            return (_modulo(base_partition, num_par_tiles, pdim_size, idx),
                    _modulo(base_addr, num_free_tiles, fdim_size, idx))

        return DirectAlloc(self._memory, func)


class _Psum(_Buffer):
    def mod_alloc(self, base_bank: int = 0, *, base_addr: int = 0, base_partition: int = 0,
                  num_bank_tiles=(), num_par_tiles=(), num_free_tiles=()) -> DirectAlloc:
        """Modulo allocation over banks, partitions and addresses in a bank."""
        def func(idx, pdim_size, fdim_size):
            return (_modulo(base_bank, num_bank_tiles, 1, idx),
                    _modulo(base_partition, num_par_tiles, pdim_size, idx),
                    _modulo(base_addr, num_free_tiles, fdim_size, idx))

        return DirectAlloc(self._memory, func)


sbuf = _Buffer(Memory.SBUF)
psum = _Psum(Memory.PSUM)


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


__all__ = ["allocation_scope", "enable_stack_allocator", "force_auto_alloc", "multi_buffer",
           "no_reorder", "psum", "sbuf", "skip_middle_end_transformations"]
