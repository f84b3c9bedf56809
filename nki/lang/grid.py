"""Tile grids (NKI 0.7): ``nl.tiles`` / ``nl.blocks`` views of a tensor in tile or block
coordinates, and ``nl.alloc_tiles`` / ``nl.alloc_blocks`` storage laid out as a grid.

A grid is pure trace-time geometry: creating, indexing or regrouping one allocates nothing
and emits no instruction. It is a *region* (per source dimension: an element origin and
extent, a coordinate unit = tile or block span, and a selected coordinate range) over a
*layout* that says where each logical element lives:

* ``_ViewLayout``: elements are those of an existing ``NkiTensor`` view (``nl.tiles(x)``,
  and HBM allocations, whose backing is the compact logical tensor).
* ``_TiledLayout``: SBUF/PSUM allocations are one dense rank-two tile: the first tiled
  dimension is the partition, every tile is a slot of ``prod(tile free extents)`` elements,
  slots laid out in row-major tile order (untiled leading dimensions count as tiles of
  extent 1). Boundary tiles keep a full slot and expose their clamped extent.

``grid.data`` is the selection as one ``NkiTensor`` operand when one strided view can
address it exactly (``is_data_representable``); otherwise it raises ``nki_invalid_grid``.
Integer indexing consumes a coordinate (an untiled dimension then drops out of
``element_shape``; a tiled one keeps its element extent). Stream buffers (slot pools):
``nki/lang/stream.py``.
"""

from __future__ import annotations

import operator

from nki.errors import NkiTypeError, NkiValueError
from nki.ir.types import Memory
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import user_loc, validation


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def exact_shape(value, role: str, api: str) -> tuple[int, ...]:
    """A tuple of exact positive Python ints (AWS raises TypeError / ValueError)."""
    if not isinstance(value, tuple) or not all(type(v) is int for v in value):
        raise NkiTypeError("nki_invalid_grid", f"{api}: {role} must be a tuple of exact Python "
                           f"ints, got {value!r}", user_loc())
    if any(v <= 0 for v in value):
        raise NkiValueError("nki_invalid_grid", f"{api}: every entry of {role} must be "
                            f"positive, got {value}", user_loc())
    return value


# ----- layouts --------------------------------------------------------------------------------
class _ViewLayout:
    """Logical elements are the elements of ``source`` (any NkiTensor view)."""

    def __init__(self, source: NkiTensor):
        self.source = source

    def view(self, runs: list, present: list[bool]) -> NkiTensor | str:
        key = tuple(slice(a, b) if keep else a for (a, b), keep in zip(runs, present))
        try:
            return self.source[key]
        except Exception as e:  # noqa: BLE001 - the view rule says why: that is the reason
            return getattr(e, "detail", str(e))


class _TiledLayout:
    """The dense rank-two SBUF/PSUM layout of ``alloc_tiles`` / ``alloc_blocks``."""

    def __init__(self, backing: NkiTensor, tile: tuple[int, ...], counts: tuple[int, ...],
                 first_tiled: int):
        self.backing, self.tile, self.counts, self.q = backing, tile, counts, first_tiled
        rank = len(tile)
        # element strides inside one slot (dims after the partition dim), slot strides in tiles
        self.inner = [0] * rank
        stride = 1
        for d in range(rank - 1, first_tiled, -1):
            self.inner[d] = stride
            stride *= tile[d]
        self.slot = stride
        self.tiles = [0] * rank
        stride = 1
        for d in range(rank - 1, -1, -1):
            self.tiles[d] = stride
            stride *= counts[d]

    def view(self, runs: list, present: list[bool]) -> NkiTensor | str:
        q, tile = self.q, self.tile
        if any(present[d] for d in range(q)):
            return ("an untiled leading dimension is selected with a slice; on chip the "
                    "partition dimension must come first (index it with an int)")
        a, b = runs[q]
        if a // tile[q] != (b - 1) // tile[q]:
            return (f"the selection spans {_ceil(b, tile[q]) - a // tile[q]} tiles along the "
                    "partition dimension; each tile starts at partition 0 of its own slot")
        base = sum((runs[d][0] // tile[d]) * self.tiles[d] for d in range(len(tile)))
        base = base * self.slot + sum((runs[d][0] % tile[d]) * self.inner[d]
                                      for d in range(q + 1, len(tile)))
        dims = [(1, b - a)]
        for d in range(q + 1, len(tile)):
            lo, hi = runs[d]
            if lo // tile[d] != (hi - 1) // tile[d] and \
                    self.tiles[d] * self.slot != tile[d] * self.inner[d]:
                return (f"dimension {d} spans several tiles whose slots are not adjacent in "
                        "the free dimension; select one tile along it")
            dims.append((self.inner[d], hi - lo))
        b0 = self.backing
        return b0._new(tuple(dims), off=b0.offset + base, part=b0._part + a % tile[q])


# ----- grids ----------------------------------------------------------------------------------
class NkiGrid:
    """Base class of tile and block grids: a view of a tensor region in tile or block
    coordinates that keeps its dtype, buffer and storage. Made by :func:`tiles`,
    :func:`blocks`, :func:`alloc_tiles` and :func:`alloc_blocks`, never directly.

    Example:
        >>> g = nl.tiles(x, tile_shape=(128, 256))        # doctest: +SKIP
        >>> nisa.dma_copy(dst=t.data, src=g[1, 2].data)   # doctest: +SKIP
    """

    __slots__ = ("_layout", "_dtype", "_buffer", "_origin", "_extent", "_unit", "_tile",
                 "_block", "_sel", "_kept", "_ntiled")

    def __init__(self, layout, dtype, buffer, origin, extent, tile, block, kept, ntiled,
                 sel=None):
        self._layout, self._dtype, self._buffer = layout, dtype, buffer
        self._origin, self._extent = tuple(origin), tuple(extent)
        self._tile, self._block = tuple(tile), (tuple(block) if block is not None else None)
        self._unit = tuple(t * b for t, b in zip(self._tile, self._block or (1,) * len(tile)))
        self._kept, self._ntiled = tuple(kept), ntiled
        self._sel = tuple(sel) if sel is not None else tuple(
            range(0, _ceil(e, u) if k else 1) for e, u, k in zip(self._extent, self._unit,
                                                                  self._kept))

    # ----- geometry ------------------------------------------------------------------------
    def _tiled(self, d: int) -> bool:
        return d >= len(self._tile) - self._ntiled

    def _present(self) -> list[bool]:
        return [self._kept[d] or self._tiled(d) for d in range(len(self._tile))]

    def _runs(self, d: int) -> list[tuple[int, int]]:
        """Selected source elements along dimension ``d``, as merged [start, stop) runs."""
        out: list[list[int]] = []
        for c in self._sel[d]:
            lo = c * self._unit[d]
            hi = min(lo + self._unit[d], self._extent[d])
            if out and out[-1][1] == self._origin[d] + lo:
                out[-1][1] = self._origin[d] + hi
            else:
                out.append([self._origin[d] + lo, self._origin[d] + hi])
        return [tuple(r) for r in out]

    def _counts(self) -> list[int]:
        return [sum(b - a for a, b in self._runs(d)) for d in range(len(self._tile))]

    @property
    def shape(self) -> tuple[int, ...]:
        """The grid's extent in coordinates (tiles or blocks; slabs for untiled dims)."""
        return tuple(len(s) for s, k in zip(self._sel, self._kept) if k)

    @property
    def tile_shape(self) -> tuple[int, ...]:
        """The nominal source-element shape of one tile."""
        return self._tile[len(self._tile) - self._ntiled:]

    @property
    def element_shape(self) -> tuple[int, ...]:
        """The number of selected elements along each source dimension (consumed untiled
        dimensions left out)."""
        return tuple(c for c, p in zip(self._counts(), self._present()) if p)

    @property
    def index_step_elements(self) -> tuple[int, ...]:
        """Each grid-coordinate step in source elements."""
        return tuple(u * s.step for u, s, k in zip(self._unit, self._sel, self._kept) if k)

    @property
    def is_remainder(self) -> bool:
        """Whether the selection holds a tile or block clamped by the source's extent."""
        return any(c < len(s) * u for c, s, u in zip(self._counts(), self._sel, self._unit))

    @property
    def dtype(self):
        return self._dtype

    @property
    def buffer(self) -> Memory:
        return self._buffer

    def _storage(self) -> NkiTensor:
        """The tensor that backs this grid (the source view, or the allocation)."""
        layout = self._layout
        return layout.source if isinstance(layout, _ViewLayout) else layout.backing

    def _data_or_reason(self) -> NkiTensor | str:
        runs = []
        for d in range(len(self._tile)):
            r = self._runs(d)
            if len(r) != 1:
                return (f"coordinate dimension {d} selects {len(r)} separate element ranges "
                        "(a stepped slice)")
            runs.append(r[0])
        return self._layout.view(runs, self._present())

    @property
    def is_data_representable(self) -> bool:
        """Whether :attr:`data` can represent this selection exactly."""
        return isinstance(self._data_or_reason(), NkiTensor)

    @property
    def data(self) -> NkiTensor:
        """The whole selection as one native tensor operand (raises when one strided view
        cannot address it: check :attr:`is_data_representable`)."""
        view = self._data_or_reason()
        if not isinstance(view, NkiTensor):
            raise validation("nki_invalid_grid", f"{type(self).__name__}.data: this selection "
                             f"(element_shape {self.element_shape}) is not one tensor view: "
                             f"{view}; index smaller pieces")
        return view

    # ----- indexing ------------------------------------------------------------------------
    def __getitem__(self, key) -> NkiGrid:
        keys = list(key) if isinstance(key, tuple) else [key]
        if Ellipsis in keys:
            i = keys.index(Ellipsis)
            keys[i:i + 1] = [slice(None)] * (len(self.shape) - len(keys) + 1)
        kept = [d for d, k in enumerate(self._kept) if k]
        if len(keys) > len(kept):
            raise validation("nki_invalid_grid", f"{len(keys)} indices for a grid of "
                             f"shape {self.shape}")
        sel, consumed = list(self._sel), list(self._kept)
        for d, k in zip(kept, keys):
            sel[d], consumed[d] = _index(self._sel[d], k, d)
        return self._with(sel=sel, kept=consumed)

    def __iter__(self):
        raise validation("nki_invalid_grid", "iterating over a grid is not supported; loop "
                         "over range(grid.shape[i]) and index it")

    def _with(self, **changes) -> NkiGrid:
        out = object.__new__(type(self))
        for name in NkiGrid.__slots__:
            object.__setattr__(out, name, changes.get(name.lstrip("_"), getattr(self, name)))
        return out

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(shape={self.shape}, tile_shape={self.tile_shape}, "
                f"element_shape={self.element_shape}, buffer={self._buffer.value})")


def _index(coords: range, k, d: int) -> tuple[range, bool]:
    """Coordinates left after indexing one grid dimension, and whether it stays a dim."""
    if isinstance(k, slice):
        picked = coords[k]
        if len(picked) == 0:
            raise validation("nki_invalid_grid", f"the slice {k} selects nothing of the "
                             f"{len(coords)} coordinates")
        return picked, True
    if isinstance(k, bool) or not hasattr(k, "__index__"):
        raise validation("nki_invalid_grid", f"grid coordinates must be Python ints or slices "
                         f"(known while tracing), got {k!r}")
    k = operator.index(k)
    if not 0 <= k < len(coords):
        raise validation("err_tensor_access_out_of_bound", f"coordinate {k} is outside "
                         f"[0, {len(coords)}) of grid dimension {d}")
    c = coords[k]
    return range(c, c + 1), False


class NkiTileGrid(NkiGrid):
    """A tensor view navigated in tile coordinates; ``data`` is the selection as one
    ``NkiTensor``.

    Example:
        >>> tiles = nl.tiles(src, tile_shape=(128, 256))    # doctest: +SKIP
        >>> tiles[1, :].element_shape                       # doctest: +SKIP
        (128, 1024)
    """

    __slots__ = ()


class NkiBlockGrid(NkiGrid):
    """A tensor view navigated in block coordinates (a block groups ``block_shape`` tiles);
    ``nl.tiles(block)`` exposes a block's tiles.

    Example:
        >>> b = nl.blocks(src, tile_shape=(128, 256), block_shape=(2, 2))  # doctest: +SKIP
    """

    __slots__ = ()

    @property
    def block_shape(self) -> tuple[int, ...]:
        """Tiles per block along each tiled dimension."""
        return self._block[len(self._block) - self._ntiled:]


# ----- factories ------------------------------------------------------------------------------
def _full(rank: int, tiled: tuple[int, ...]) -> tuple[int, ...]:
    return (1,) * (rank - len(tiled)) + tuple(tiled)


def _check_tile(tile_shape, rank: int, api: str) -> tuple[int, ...]:
    tile = exact_shape(tile_shape, "tile_shape", api)
    if not 2 <= len(tile) <= rank:
        raise NkiValueError("nki_invalid_grid", f"{api}: tile_shape {tile} needs at least two "
                            f"dimensions and at most the {rank} of the tensor", user_loc())
    return tile


def _check_block(block_shape, ntiled: int, api: str) -> tuple[int, ...]:
    block = exact_shape(block_shape, "block_shape", api)
    if len(block) != ntiled:
        raise NkiValueError("nki_invalid_grid", f"{api}: block_shape {block} must have the "
                            f"rank of tile_shape ({ntiled})", user_loc())
    return block


def _over_tensor(source: NkiTensor, tile_shape, block_shape, api: str) -> NkiGrid:
    if tile_shape is None:
        raise validation("nki_invalid_grid", f"{api}: tile_shape is required for a tensor")
    tile = _check_tile(tile_shape, source.ndim, api)
    block = None if block_shape is None else _check_block(block_shape, len(tile), api)
    cls = NkiTileGrid if block is None else NkiBlockGrid
    return cls(_ViewLayout(source), source.dtype, source.buffer, (0,) * source.ndim,
               source.shape, _full(source.ndim, tile),
               None if block is None else _full(source.ndim, block),
               (True,) * source.ndim, len(tile))


def _regroup(grid: NkiGrid, tile_shape, block_shape, api: str) -> NkiGrid:
    """A new grid over ``grid``'s selected region and layout (tiles of a block, a re-tiling,
    or new block groups)."""
    rank, nt = len(grid._tile), grid._ntiled
    runs = [grid._runs(d) for d in range(rank)]
    if any(len(r) != 1 for r in runs):
        raise validation("nki_invalid_grid", f"{api}: the grid selects separate ranges (a "
                         "stepped slice); regroup a contiguous selection")
    tile = grid._tile if tile_shape is None else _full(rank, _check_tile(tile_shape, nt, api))
    if tile_shape is not None and len(tile_shape) != nt:
        raise NkiValueError("nki_invalid_grid", f"{api}: tile_shape {tile_shape} must keep the "
                            f"grid's {nt} tiled dimensions", user_loc())
    block = None if block_shape is None else _full(rank, _check_block(block_shape, nt, api))
    kept = [grid._kept[d] or grid._tiled(d) for d in range(rank)]
    cls = NkiTileGrid if block is None else NkiBlockGrid
    return cls(grid._layout, grid._dtype, grid._buffer, [r[0][0] for r in runs],
               [r[0][1] - r[0][0] for r in runs], tile, block, kept, nt)


def _grid_of(api: str, source, tile_shape, block_shape) -> NkiGrid:
    if isinstance(source, NkiGrid):
        return _regroup(source, tile_shape, block_shape, api)
    if not isinstance(source, NkiTensor):
        raise validation("nki_invalid_grid", f"{api}: source must be an NkiTensor or a "
                         f"grid, got {type(source).__name__}")
    return _over_tensor(source, tile_shape, block_shape, api)


def tiles(source, *, tile_shape=None) -> NkiTileGrid:
    """Decompose a tensor (or a grid's selection) into a logical grid of tiles.

    ``tile_shape`` applies to the trailing dimensions; leading untiled dimensions are
    indexed one slab at a time. Without ``tile_shape``, a grid keeps its tile shape (a
    block's interior tiles). No storage, no instruction.

    Example:
        >>> t = nl.tiles(x, tile_shape=(128, 256))          # doctest: +SKIP
        >>> nisa.dma_copy(dst=tile, src=t[i, j].data)       # doctest: +SKIP
    """
    return _grid_of("nl.tiles", source, tile_shape, None)


def blocks(source, *, tile_shape=None, block_shape) -> NkiBlockGrid:
    """A block view: each block groups ``block_shape`` tiles (a coarser transfer grain);
    partial final blocks and tiles are kept and clamped. Indexing keeps a block grid; call
    :func:`tiles` on a block for its tiles.

    Example:
        >>> b = nl.blocks(x, tile_shape=(128, 256), block_shape=(2, 2))  # doctest: +SKIP
    """
    return _grid_of("nl.blocks", source, tile_shape, block_shape)


def _allocate(api: str, tile_shape, block_shape, element_shape, buffer, dtype, address,
              name: str) -> NkiGrid:
    from nki.lang.creation import ndarray

    tile = exact_shape(tile_shape, "tile_shape", api)
    elements = exact_shape(element_shape, "element_shape", api)
    if not 2 <= len(tile) <= len(elements):
        raise NkiValueError("nki_invalid_grid", f"{api}: tile_shape {tile} needs at least two "
                            f"dimensions and at most the {len(elements)} of element_shape",
                            user_loc())
    if not isinstance(buffer, Memory):
        raise NkiTypeError("nki_invalid_grid", f"{api}: buffer must be an NKI MemoryRegion "
                           f"(nl.sbuf, nl.psum, nl.shared_hbm, ...), got {buffer!r}", user_loc())
    block = None if block_shape is None else _check_block(block_shape, len(tile), api)
    rank = len(elements)
    full = _full(rank, tile)
    if buffer.is_hbm:   # the compact logical extent backs an HBM grid
        layout = _ViewLayout(ndarray(elements, dtype, buffer=buffer, name=name,
                                     address=address))
    else:
        q = rank - len(tile)
        counts = tuple(_ceil(e, t) for e, t in zip(elements, full))
        backing = ndarray((full[q], _prod(counts) * _prod(full[q + 1:])), dtype,
                          buffer=buffer, name=name, address=address)
        layout = _TiledLayout(backing, full, counts, q)
    storage = layout.source if isinstance(layout, _ViewLayout) else layout.backing
    cls = NkiTileGrid if block is None else NkiBlockGrid
    return cls(layout, storage.dtype, buffer, (0,) * rank, elements, full,
               None if block is None else _full(rank, block), (True,) * rank, len(tile))


def alloc_tiles(*, tile_shape, element_shape, buffer, dtype, address=None,
                name: str = "") -> NkiTileGrid:
    """Allocate uninitialised storage organised as a grid of tiles (one allocation).

    HBM storage is the compact ``element_shape`` tensor; SBUF/PSUM storage is one dense
    ``(tile_shape[0], tiles x tile free size)`` tile, each tile a full slot (boundary
    tiles clamped). ``.data`` of the whole grid is one operand when one view addresses it.

    Example:
        >>> g = nl.alloc_tiles(tile_shape=(128, 128), element_shape=(128, 512),
        ...                    buffer=nl.sbuf, dtype=nl.float32)     # doctest: +SKIP
    """
    return _allocate("nl.alloc_tiles", tile_shape, None, element_shape, buffer, dtype,
                     address, name)


def alloc_blocks(*, tile_shape, block_shape, element_shape, buffer, dtype, address=None,
                 name: str = "") -> NkiBlockGrid:
    """:func:`alloc_tiles` plus a block level above the tiles (same physical tile order).

    Example:
        >>> b = nl.alloc_blocks(tile_shape=(128, 128), block_shape=(1, 2),
        ...                     element_shape=(128, 512), buffer=nl.sbuf,
        ...                     dtype=nl.float32)                    # doctest: +SKIP
    """
    return _allocate("nl.alloc_blocks", tile_shape, block_shape, element_shape, buffer, dtype,
                     address, name)


def alloc_like(grid: NkiGrid, dtype, buffer, name: str, address=None,
               counts=None, order=None) -> NkiGrid:
    """New storage with ``grid``'s geometry (``nl.empty_like`` of a grid, stream slots):
    the same tiles (and blocks) over ``counts`` elements per dimension (default: the
    selection's), with the same coordinates consumed. ``order`` permutes the dimensions
    (a transposed stream slot)."""
    rank, nt = len(grid._tile), grid._ntiled
    runs = [grid._runs(d) for d in range(rank)]
    if any(len(r) != 1 for r in runs):
        raise validation("nki_invalid_grid", "new storage needs a contiguous selection (no "
                         "stepped slices)")
    counts = list(counts if counts is not None else grid._counts())
    order = list(order if order is not None else range(rank))
    perm = [counts[d] for d in order]
    tile = tuple(grid._tile[d] for d in order)[rank - nt:]
    block = None if grid._block is None else tuple(grid._block[d] for d in order)[rank - nt:]
    new = _allocate("nl.empty_like", tile, block, tuple(perm), buffer or grid._buffer,
                    dtype or grid._dtype, address, name)
    return new[tuple(slice(None) if grid._kept[d] else 0 for d in order)]


def clamped(grid: NkiGrid, counts) -> NkiGrid:
    """``grid``'s storage and geometry limited to ``counts`` elements per dimension (a
    stream slot serving a partial final step: a zero-copy view of the full slot)."""
    rank = len(grid._tile)
    runs = [grid._runs(d)[0] for d in range(rank)]
    sel = [range(0, _ceil(c, u)) if k else range(0, 1)
           for c, u, k in zip(counts, grid._unit, grid._kept)]
    return grid._with(origin=tuple(r[0] for r in runs), extent=tuple(counts), sel=tuple(sel))


__all__ = ["NkiGrid", "NkiTileGrid", "NkiBlockGrid", "tiles", "blocks", "alloc_tiles",
           "alloc_blocks"]
