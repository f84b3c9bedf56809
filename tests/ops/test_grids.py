"""Tile grids and stream buffers (NKI 0.7): ``nl.tiles``/``nl.blocks`` views, their geometry
and boundary tiles, ``.data`` operands and when a selection is one, ``nl.alloc_tiles`` /
``nl.alloc_blocks`` storage (compact in HBM, a dense rank-two tile in SBUF),
``nl.empty_like`` of a grid, ``nl.alloc_stream_buffers`` slot pools, and a tiled matmul
software pipeline. Kernels run in both backends against numpy; errors assert code, words
and file:line."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiTypeError, NkiValidationError, NkiValueError


def _jit(kernel, **options):
    return nki.jit(kernel, cache=False, **options)


def _err(code, *words):
    return "(?s)" + code + ".*" + ".*".join(words) + r".*test_grids\.py:\d+"


def _ref_tiles(n: int, t: int) -> list[tuple[int, int]]:
    """numpy's view of a tiling: the [start, stop) of each tile along one dimension."""
    return [(s, min(s + t, n)) for s in range(0, n, t)]


def _token(x):
    """A one-element output: kernels that only record trace-time geometry still return."""
    out = nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x[0:1, 0:1])
    return out


# ----- geometry (trace-time attributes) ---------------------------------------------------
def _geometry(x, record):
    g = nl.tiles(x, tile_shape=(128, 256))
    record["shape"], record["tile"] = g.shape, g.tile_shape
    record["last"] = g[g.shape[0] - 1, g.shape[1] - 1].element_shape
    record["row"], record["col"] = g[1, :].element_shape, g[:, 2].element_shape
    record["rem"] = (g[0, 0].is_remainder, g[g.shape[0] - 1, 0].is_remainder)
    record["steps"] = (g.index_step_elements, g[:, ::2].index_step_elements)
    b = nl.blocks(x, tile_shape=(128, 256), block_shape=(2, 3))
    record["blocks"] = (b.shape, b.block_shape, b[1, 0].element_shape, b[1, 1].is_remainder)
    inner = nl.tiles(b[1, 1])
    record["inner"] = (inner.shape, inner[0, 0].element_shape)
    regrouped = nl.blocks(g, block_shape=(1, 2))
    record["regrouped"] = (regrouped.shape, regrouped[0, 1].element_shape)
    record["types"] = (type(g).__name__, type(b).__name__, isinstance(b, nl.NkiGrid),
                       g.buffer is x.buffer, g.dtype == x.dtype)
    return _token(x)


def test_tile_and_block_geometry():
    x = np.zeros((500, 1000), np.float32)
    record = {}
    _jit(_geometry)(x, record)
    rows, cols = _ref_tiles(500, 128), _ref_tiles(1000, 256)
    assert record["shape"] == (len(rows), len(cols)) and record["tile"] == (128, 256)
    assert record["last"] == (rows[-1][1] - rows[-1][0], cols[-1][1] - cols[-1][0])
    assert record["row"] == (128, 1000) and record["col"] == (500, 256)
    assert record["rem"] == (False, True)
    assert record["steps"] == ((128, 256), (128, 512))
    brows, bcols = _ref_tiles(500, 256), _ref_tiles(1000, 768)
    assert record["blocks"] == ((len(brows), len(bcols)), (2, 3),
                                (brows[1][1] - brows[1][0], 768), True)
    assert record["inner"] == ((2, 1), (128, 232))
    assert record["regrouped"] == ((4, 2), (128, 1000 - 512))
    assert record["types"] == ("NkiTileGrid", "NkiBlockGrid", True, True, True)


def _slabs(x, record):
    g = nl.tiles(x, tile_shape=(128, 256))
    record["3d"] = (g.shape, g[1, 0, 0].element_shape, g[:, 0, 1].element_shape,
                    g[1].shape)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.tiles(out, tile_shape=(128, 256))
    for b in range(g.shape[0]):
        for i in range(g.shape[1]):
            for j in range(g.shape[2]):
                t = nl.ndarray(g[b, i, j].element_shape, dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=g[b, i, j].data)
                nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=float(b))
                nisa.dma_copy(dst=dst[b, i, j].data, src=t.data)
    return out


def test_untiled_leading_dims_are_slabs(backend):
    x = np.random.default_rng(1).standard_normal((3, 256, 300)).astype(np.float32)
    record = {}
    y = _jit(_slabs, backend=backend)(x, record)
    assert record["3d"] == ((3, 2, 2), (128, 256), (3, 128, 300 - 256), (2, 2))
    np.testing.assert_array_equal(y, x + np.arange(3, dtype=np.float32)[:, None, None])


# ----- data movement with remainders ------------------------------------------------------
def _scale_kernel(src, factor):
    """AWS's tile-grid example: scale each tile independently (empty_like of a tile)."""
    dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    src_tiles = nl.tiles(src, tile_shape=(128, 128))
    dst_tiles = nl.tiles(dst, tile_shape=(128, 128))
    for i in range(src_tiles.shape[0]):
        for j in range(src_tiles.shape[1]):
            tile = nl.empty_like(src_tiles[i, j], buffer=nl.sbuf)
            nisa.dma_copy(tile.data, src_tiles[i, j].data)
            nisa.tensor_scalar(tile.data, tile.data, nl.multiply, factor)
            nisa.dma_copy(dst_tiles[i, j].data, tile.data)
    return dst


@pytest.mark.parametrize("shape", [(512, 512), (300, 200)], ids=["even", "remainders"])
def test_scale_each_tile(backend, shape):
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(_jit(_scale_kernel, backend=backend)(x, 2.5),
                                  x * np.float32(2.5))


def _rows_through_sbuf_grid(src):
    """One DMA per tile row into an alloc_tiles SBUF grid (a row of tiles is one operand
    of the dense layout), a per-tile add of the tile's column index, one DMA back."""
    dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    src_tiles = nl.tiles(src, tile_shape=(128, 128))
    dst_tiles = nl.tiles(dst, tile_shape=(128, 128))
    for i in range(src_tiles.shape[0]):
        row = nl.alloc_tiles(tile_shape=(128, 128), element_shape=src_tiles[i, :].element_shape,
                             buffer=nl.sbuf, dtype=src.dtype)
        assert row.is_data_representable
        nisa.dma_copy(dst=row.data, src=src_tiles[i, :].data)
        for j in range(row.shape[1]):
            nisa.tensor_scalar(dst=row[0, j].data, data=row[0, j].data, op0=nl.add,
                               operand0=float(j))
        nisa.dma_copy(dst=dst_tiles[i, :].data, src=row.data)
    return dst


@pytest.mark.parametrize("shape", [(256, 384), (200, 300)], ids=["even", "remainders"])
def test_tile_rows_through_an_sbuf_grid(backend, shape):
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    col_tile = np.arange(shape[1]) // 128
    np.testing.assert_array_equal(_jit(_rows_through_sbuf_grid, backend=backend)(x),
                                  x + col_tile.astype(np.float32)[None, :])


def _blocks_copy(src):
    """A block grid copied block by block through an alloc_blocks SBUF block; tiles of each
    block are moved one by one (a 2x2 block spans two partition tiles)."""
    dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    sb = nl.blocks(src, tile_shape=(128, 128), block_shape=(2, 2))
    db = nl.blocks(dst, tile_shape=(128, 128), block_shape=(2, 2))
    for i in range(sb.shape[0]):
        for j in range(sb.shape[1]):
            block = nl.alloc_blocks(tile_shape=(128, 128), block_shape=(2, 2),
                                    element_shape=sb[i, j].element_shape, buffer=nl.sbuf,
                                    dtype=src.dtype)
            # one operand only when the block holds a single partition tile
            assert block.is_data_representable == (sb[i, j].element_shape[0] <= 128)
            src_t, blk_t, dst_t = nl.tiles(sb[i, j]), nl.tiles(block), nl.tiles(db[i, j])
            for a in range(src_t.shape[0]):
                nisa.dma_copy(dst=blk_t[a, :].data, src=src_t[a, :].data)
                nisa.tensor_scalar(dst=blk_t[a, :].data, data=blk_t[a, :].data,
                                   op0=nl.multiply, operand0=-1.0)
                nisa.dma_copy(dst=dst_t[a, :].data, src=blk_t[a, :].data)
    return dst


def test_blocks_round_trip(backend):
    x = np.random.default_rng(4).standard_normal((384, 640)).astype(np.float32)
    np.testing.assert_array_equal(_jit(_blocks_copy, backend=backend)(x), -x)


# ----- what .data can and cannot represent -------------------------------------------------
def _representable(x, record):
    g = nl.alloc_tiles(tile_shape=(128, 64), element_shape=(256, 256), buffer=nl.sbuf,
                       dtype=nl.float32)
    record["sbuf"] = (g[0, :].is_data_representable, g[0, 1:3].is_data_representable,
                      g[:, 0].is_data_representable, g.is_data_representable,
                      g[0, ::2].is_data_representable)
    record["sbuf_data"] = (g[0, 1:3].data.shape, g[1, 3].data.shape)
    g3 = nl.alloc_tiles(tile_shape=(128, 2, 32), element_shape=(128, 4, 64), buffer=nl.sbuf,
                        dtype=nl.float32)
    record["3d"] = (g3[0, 0, 0].is_data_representable, g3[0, :, 0].is_data_representable,
                    g3[0, 0, :].is_data_representable)
    h = nl.tiles(x, tile_shape=(128, 128))
    record["hbm"] = (h.is_data_representable, h[:, 1].is_data_representable,
                     h[::2, :].is_data_representable)
    try:
        _ = g[:, 0].data
    except NkiValidationError as e:
        record["error"] = str(e)
    return _token(x)


def test_which_selections_are_one_operand():
    record = {}
    _jit(_representable)(np.zeros((384, 384), np.float32), record)
    # SBUF: a row of (128, x) tiles is contiguous in the free dim; tiles stacked along the
    # partition dim are separate slots starting at partition 0
    assert record["sbuf"] == (True, True, False, False, False)
    assert record["sbuf_data"] == ((128, 128), (128, 64))
    # 3-D tiles: slots of (2, 32) elements are adjacent only along the last tile dim when
    # the middle tile dim has one tile
    assert record["3d"] == (True, False, False)
    assert record["hbm"] == (True, True, False)
    assert "nki_invalid_grid" in record["error"] and "partition dimension" in record["error"]
    assert "test_grids.py" in record["error"]


# ----- stream buffers and a pipelined tiled matmul ----------------------------------------
def _pipelined_matmul(a_t, b, slots):
    """C[M, N] = A @ B with A given as A^T (K, M): both operands stream their K tiles
    through ``slots``-deep pools, the load of step k+1 issued before the matmul of step k."""
    K, M = a_t.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    at_tiles = nl.tiles(a_t, tile_shape=(128, M))
    b_tiles = nl.tiles(b, tile_shape=(128, N))
    a_bufs = nl.alloc_stream_buffers(at_tiles[:, 0], buffer=nl.sbuf, dim=0, num_slots=slots)
    b_bufs = nl.alloc_stream_buffers(b_tiles[:, 0], buffer=nl.sbuf, dim=0, num_slots=slots)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    steps = at_tiles.shape[0]
    nisa.dma_copy(dst=a_bufs[0].data, src=at_tiles[0, 0].data)
    nisa.dma_copy(dst=b_bufs[0].data, src=b_tiles[0, 0].data)
    for k in range(steps):
        if k + 1 < steps:
            nisa.dma_copy(dst=a_bufs[k + 1].data, src=at_tiles[k + 1, 0].data)
            nisa.dma_copy(dst=b_bufs[k + 1].data, src=b_tiles[k + 1, 0].data)
        nisa.nc_matmul(dst=acc, stationary=a_bufs[k].data, moving=b_bufs[k].data,
                       accumulate=k > 0)
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


@pytest.mark.parametrize("k,slots", [(512, 2), (448, 3)], ids=["K512-2slots", "K448-3slots"])
def test_pipelined_matmul(backend, k, slots):
    rng = np.random.default_rng(5)
    a_t = rng.standard_normal((k, 64)).astype(np.float32)
    b = rng.standard_normal((k, 96)).astype(np.float32)
    got = _jit(_pipelined_matmul, backend=backend)(a_t, b, slots)
    want = a_t.astype(np.float64).T @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def _stream_geometry(x, record):
    g = nl.tiles(x, tile_shape=(128, 128))
    bufs = nl.alloc_stream_buffers(g, buffer=nl.sbuf, dim=1, num_slots=2, name="cols")
    views = [bufs[k] for k in range(g.shape[1])]
    record["slots"] = [v._storage().decl.id for v in views]
    record["shapes"] = [v.element_shape for v in views]
    record["types"] = {type(v).__name__ for v in views}
    record["n"] = (bufs.num_slots, bufs.num_steps)
    t = nl.alloc_stream_buffers(x[0:128, :].reshape((128, 6, 50)), buffer=nl.sbuf, dim=1,
                                num_slots=3, transpose_axes=(1, 0))
    record["tensor"] = (t[0].shape, t[1].decl.id != t[0].decl.id, t[3].decl.id == t[0].decl.id)
    for bad in (-1, 1.0, g.shape[1]):
        try:
            bufs[bad]
        except NkiValidationError as e:
            record.setdefault("errors", []).append(str(e))
    for action in (len, iter):
        try:
            action(bufs)
        except NkiValidationError as e:
            record.setdefault("errors", []).append(str(e))
    return _token(x)


def test_stream_buffers_rotate_and_clamp():
    record = {}
    _jit(_stream_geometry)(np.zeros((256, 300), np.float32), record)
    assert record["slots"][0::2] == [record["slots"][0]] * 2
    assert record["slots"][1] != record["slots"][0]
    cols = _ref_tiles(300, 128)
    assert record["shapes"] == [(256, b - a) for a, b in cols]
    assert record["types"] == {"NkiTileGrid"} and record["n"] == (2, 3)
    assert record["tensor"] == ((50, 128), True, True)
    errors = record["errors"]
    assert len(errors) == 5 and all("test_grids.py" in e for e in errors)
    assert "non-negative compile-time Python ints" in errors[0] and "-1" in errors[0]
    assert "non-negative compile-time Python ints" in errors[1]
    assert "err_tensor_access_out_of_bound" in errors[2]
    assert "no len()" in errors[3] and "cannot be iterated" in errors[4]


# ----- errors ---------------------------------------------------------------------------------
def _bad(kind):
    def kernel(x):
        if kind == "tile-list":
            nl.tiles(x, tile_shape=[128, 128])
        elif kind == "tile-rank":
            nl.alloc_tiles(tile_shape=(128,), element_shape=(128, 4), buffer=nl.sbuf,
                           dtype=nl.float32)
        elif kind == "nonpositive":
            nl.alloc_tiles(tile_shape=(128, 0), element_shape=(128, 4), buffer=nl.sbuf,
                           dtype=nl.float32)
        elif kind == "buffer":
            nl.alloc_tiles(tile_shape=(128, 4), element_shape=(128, 4), buffer="sbuf",
                           dtype=nl.float32)
        elif kind == "block-rank":
            nl.blocks(x, tile_shape=(128, 128), block_shape=(2,))
        elif kind == "index":
            nl.tiles(x, tile_shape=(128, 128))[-1, 0]
        elif kind == "range":
            nl.tiles(x, tile_shape=(128, 128))[0, 5]
        elif kind == "zeros_like":
            nl.zeros_like(nl.tiles(x, tile_shape=(128, 128)))
        return _token(x)
    return kernel


@pytest.mark.parametrize("kind,cls,code,words", [
    ("tile-list", NkiTypeError, "nki_invalid_grid", ("tile_shape must be a tuple of exact",)),
    ("tile-rank", NkiValueError, "nki_invalid_grid", ("at least two dimensions",)),
    ("nonpositive", NkiValueError, "nki_invalid_grid", ("must be positive",)),
    ("buffer", NkiTypeError, "nki_invalid_grid", ("buffer must be an NKI MemoryRegion",)),
    ("block-rank", NkiValueError, "nki_invalid_grid", ("block_shape \\(2,\\)", "rank")),
    ("index", NkiValidationError, "err_tensor_access_out_of_bound", ("coordinate -1",)),
    ("range", NkiValidationError, "err_tensor_access_out_of_bound", ("coordinate 5",)),
    ("zeros_like", NkiValidationError, "nki_invalid_grid", ("nl.empty_like",)),
])
def test_grid_rules(kind, cls, code, words):
    with pytest.raises(cls, match=_err(code, *words)):
        _jit(_bad(kind))(np.zeros((256, 256), np.float32))
