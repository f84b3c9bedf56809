"""Stream buffers (NKI 0.7, the tiled-grid streaming guide): ``nl.alloc_stream_buffers``
allocates ``num_slots`` on-chip work areas of one step of a view, and
``NkiStreamBuffers[k]`` maps logical step ``k`` to slot ``k % num_slots``.

A step is the view with coordinate ``dim`` integer-indexed (a tensor loses that dim; a grid
consumes that coordinate). Every slot has the capacity of a full step; a partial final step
gets a clamped zero-copy view of its slot. Slots are ordinary tensors, so the simulator's
program order and placement give exactly the dependencies the compiler enforces (a slot
is not overwritten before its earlier readers ran).
"""

from __future__ import annotations

from nki.ir.types import Memory
from nki.lang.grid import NkiGrid, alloc_like, clamped
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import validation


class NkiStreamBuffers:
    """A reusable pool of on-chip slots addressed by logical stream step.

    Attributes:
        num_slots: the physical slots; ``buffers[k]`` is slot ``k % num_slots``.
        num_steps: the logical steps of the view (``view.shape[dim]``).

    Example:
        >>> bufs = nl.alloc_stream_buffers(a_tiles, buffer=nl.sbuf, dim=0)  # doctest: +SKIP
        >>> for k in range(a_tiles.shape[0]):                               # doctest: +SKIP
        ...     nisa.dma_copy(dst=bufs[k].data, src=a_tiles[k].data)
    """

    __slots__ = ("_view", "_dim", "_slots", "_order", "num_slots", "num_steps")

    def __init__(self, view, dim: int, slots: list, order):
        self._view, self._dim, self._slots, self._order = view, dim, slots, order
        self.num_slots, self.num_steps = len(slots), view.shape[dim]

    def __getitem__(self, k):
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise validation("nki_invalid_grid", f"stream buffer indices must be non-negative "
                             f"compile-time Python ints, got {k!r} (nl.fori_loop indices are "
                             "compiled variables: iterate with range(view.shape[dim]))")
        if k >= self.num_steps:
            raise validation("err_tensor_access_out_of_bound", f"stream step {k} is outside "
                             f"the {self.num_steps} steps of the view along dim {self._dim}")
        slot = self._slots[k % self.num_slots]
        if isinstance(slot, NkiTensor):
            return slot
        counts = _step(self._view, self._dim, k)._counts()
        if self._order is not None:
            counts = [counts[d] for d in self._order]
        return slot if counts == slot._counts() else clamped(slot, counts)

    def __len__(self) -> int:
        raise validation("nki_invalid_grid", "stream buffers have no len(); the view has "
                         f"{self.num_steps} steps along dim {self._dim}")

    def __iter__(self):
        raise validation("nki_invalid_grid", "stream buffers cannot be iterated; index them "
                         "with range(view.shape[dim])")


def _step(view, dim: int, k: int):
    return view[(slice(None),) * dim + (k,)]


def alloc_stream_buffers(view, *, buffer, dim: int, num_slots: int = 2, dtype=None,
                         transpose_axes=None, address=None, name: str = "") -> NkiStreamBuffers:
    """Allocate ``num_slots`` SBUF or PSUM slots of one step of ``view`` along ``dim``.

    ``buffers[k]`` is an ``NkiTensor``, ``NkiTileGrid`` or ``NkiBlockGrid`` like the step;
    ``transpose_axes`` permutes a slot's dimensions relative to the step's (for a
    transposing load); with ``address`` the slots sit one after another from it.

    Example:
        >>> bufs = nl.alloc_stream_buffers(nl.tiles(a, tile_shape=(128, 128)),
        ...                                buffer=nl.sbuf, dim=0, num_slots=3)  # doctest: +SKIP
    """
    api = "nl.alloc_stream_buffers"
    if not isinstance(view, (NkiTensor, NkiGrid)):
        raise validation("nki_invalid_grid", f"{api}: view must be an NkiTensor or a grid, "
                         f"got {type(view).__name__}")
    if buffer not in (Memory.SBUF, Memory.PSUM):
        raise validation("nki_invalid_grid", f"{api}: buffer must be nl.sbuf or nl.psum, got "
                         f"{buffer!r}")
    if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim < len(view.shape):
        raise validation("nki_invalid_grid", f"{api}: dim={dim!r} must index view.shape "
                         f"{view.shape}")
    if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots < 1:
        raise validation("nki_invalid_grid", f"{api}: num_slots must be a positive int, got "
                         f"{num_slots!r}")
    step = _step(view, dim, 0)
    rank = len(step.shape) if isinstance(step, NkiTensor) else len(step._tile)
    order = None
    if transpose_axes is not None:
        order = list(transpose_axes) if isinstance(transpose_axes, tuple) else None
        if order is None or any(type(a) is not int for a in order) or \
                sorted(order) != list(range(rank)) or \
                (isinstance(step, NkiGrid) and step._ntiled != rank):
            raise validation("nki_invalid_grid", f"{api}: transpose_axes {transpose_axes} must "
                             f"permute the step's {rank} dimensions (all of them tiled for a "
                             "grid)")
    slots = []
    for i in range(num_slots):
        slot_name = f"{name or 'stream'}_slot{i}"
        where = None if address is None else (address[0], address[1] + i * _slot_bytes(slots))
        if isinstance(step, NkiTensor):
            shape = step.shape if order is None else tuple(step.shape[d] for d in order)
            from nki.lang.creation import ndarray

            slots.append(ndarray(shape, dtype or step.dtype, buffer=buffer, name=slot_name,
                                 address=where))
        else:
            slots.append(alloc_like(step, dtype, buffer, slot_name, where, order=order))
    return NkiStreamBuffers(view, dim, slots, order)


def _slot_bytes(slots: list) -> int:
    """Bytes per partition of one slot (the slots of an ``address=`` pool sit back to back)."""
    if not slots:
        return 0
    first = slots[0] if isinstance(slots[0], NkiTensor) else slots[0]._storage()
    return first.decl.bytes_per_partition


__all__ = ["NkiStreamBuffers", "alloc_stream_buffers"]
