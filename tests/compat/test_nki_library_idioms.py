"""Idioms of nki-library's kernels that its test suite (simulation mode) exercises, written
here as our own small kernels: each one a cause of failures found running the suite against
``nki``, checked against a numpy reference on both backends."""

from __future__ import annotations

import math

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


def _sharding():
    """nki-library's ``get_program_sharding_info``: (grid size, programs, this program)."""
    n = nl.num_programs(axes=0) if nl.program_ndim() > 0 else 1
    return n, n, nl.program_id(0) if nl.program_ndim() > 0 else 0


def row_shards(x):
    """Rows split ceil-wise over the LNC programs, so the last program may get none (3 rows:
    core 0 gets 2, core 1 gets 1; 1 row: core 1 gets none and writes nothing)."""
    _, n_prgs, prg = _sharding()
    b, n = x.shape
    out = nl.ndarray((b, n), dtype=x.dtype, buffer=nl.shared_hbm)
    per = math.ceil(b / n_prgs)
    rows = min(per, b - prg * per)
    if rows > 0:                       # plain Python on trace-time ints, as nki-library does
        _exp_rows(out[nl.ds(prg * per, rows), :], x[nl.ds(prg * per, rows), :])
    return out


def _exp_rows(dst, src):
    """``dst = exp(src)`` for an HBM view of rows, through one SBUF tile."""
    t = nl.ndarray(tuple(src.shape), dtype=src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src)
    nisa.activation(dst=t, op=nl.exp, data=t)
    nisa.dma_copy(dst=dst, src=t)


def row_views_first(x):
    """cross_entropy_forward's sharding: each core takes a view of its rows before looking
    at how many it got (the last core takes the remainder), so with one row the first core's
    views are empty; its batch loop then runs zero times."""
    _, n_prgs, prg = _sharding()
    b, n = x.shape
    out = nl.ndarray((b, n), dtype=x.dtype, buffer=nl.shared_hbm)
    nominal = b // n_prgs
    rows = b - prg * nominal if prg == n_prgs - 1 else nominal
    mine, mine_out = x[nl.ds(prg * nominal, rows)], out[nl.ds(prg * nominal, rows)]
    for start in range(0, rows, 2):
        size = min(2, rows - start)
        _exp_rows(mine_out[start:start + size], mine[start:start + size])
    return out


@pytest.mark.parametrize("b", [1, 3, 5])
@pytest.mark.parametrize("kernel", ["row_shards", "row_views_first"])
def test_an_lnc_core_with_no_share_writes_nothing(backend, kernel, b):
    """row_views_first: the core with no rows holds empty views it never uses."""
    x = np.random.default_rng(b).standard_normal((b, 64)).astype(np.float32)
    out = nki.jit(globals()[kernel], backend=backend)[2](x)
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-5)


def copies_an_empty_view(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[0:0], src=x[0:0])
    return out


def test_an_instruction_on_an_empty_view_is_an_error():
    with pytest.raises(nki.errors.NkiValidationError,
                       match=r"(?s)err_tensor_access_out_of_bound.*empty view.*"
                             r"test_nki_library_idioms.py:\d+"):
        nki.jit(copies_an_empty_view, backend="python")(np.zeros((4, 8), np.float32))


def no_core_writes(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    return out


def test_an_output_no_core_writes_is_still_an_error(backend):
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(nki.errors.NkiValidationError, match="err_tensor_output_not_written_to"):
        nki.jit(no_core_writes, backend=backend)[2](x)


def sub_block_gather(cache, table, resize: int):
    """attention_tkg's block KV cache: the cache is re-viewed in sub-blocks (``resize`` per
    block) and gathered by sub-block index through ``.ap(vector_offset=, indirect_dim=0)``
    of the reshaped view, with oob_mode.error."""
    blocks, block_len, d = cache.shape
    rows, sub = table.shape[0], block_len // resize * d
    view = cache.reshape((blocks * resize, sub))
    idx = nl.ndarray((rows, 1), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=table)
    got = nl.ndarray((rows, sub), dtype=cache.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=got, src=view.ap([[sub, rows], [1, sub]], offset=0, vector_offset=idx,
                                       indirect_dim=0), oob_mode=nisa.oob_mode.error)
    out = nl.ndarray((rows, sub), dtype=cache.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=got)
    return out


def test_indirect_dim_counts_in_the_reshaped_view(backend):
    rng = np.random.default_rng(3)
    cache = rng.standard_normal((8, 16, 4)).astype(np.float32)
    table = rng.permutation(8 * 4)[:32].reshape(32, 1).astype(np.uint32)   # past block 7
    out = nki.jit(sub_block_gather, backend=backend)(cache, table, 4)
    np.testing.assert_array_equal(out, cache.reshape(32, 16)[table[:, 0]])


def scalar_offset_rows(flat, start):
    """indexed_flatten's idiom: a 1-D tensor viewed as 2-D and moved by a register along
    dim 1 of the view (the base tensor has no dim 1)."""
    n = flat.shape[0]
    view = flat.reshape((1, n))
    reg = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=reg, src=start)
    r = nisa.register_alloc()
    nisa.register_load(r, reg)
    got = nl.ndarray((1, 4), dtype=flat.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=got, src=view.ap([[n, 1], [1, 4]], offset=0, scalar_offset=r,
                                       indirect_dim=1))
    out = nl.ndarray((1, 4), dtype=flat.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=got)
    return out


def test_scalar_offset_along_a_dim_only_the_view_has(backend):
    flat = np.arange(16, dtype=np.float32)
    out = nki.jit(scalar_offset_rows, backend=backend)(flat, np.array([[5]], np.int32))
    np.testing.assert_array_equal(out, flat[None, 5:9])


def gathered_transpose(cache, table):
    """attention_tkg's DMA-transpose path: the blocks named by ``table`` gathered from the
    cache and transposed in one ``dma_transpose`` of a 4-D indirect source (software DGE)."""
    blocks, block_len, d = cache.shape
    rows = table.shape[0]
    idx = nl.ndarray((rows, 1), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=table)
    cache4 = cache.reshape((blocks, 1, block_len, d))
    got = nl.ndarray((d, 1, block_len, rows), dtype=cache.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=got, src=cache4.ap([[block_len * d, rows], [1, 1], [d, block_len],
                                               [1, d]], offset=0, vector_offset=idx,
                                              indirect_dim=0),
                       axes=(3, 1, 2, 0), dge_mode=nisa.dge_mode.swdge)
    out = nl.ndarray((d, 1, block_len, rows), dtype=cache.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=got)
    return out


def test_dma_transpose_of_gathered_blocks(backend):
    import ml_dtypes

    rng = np.random.default_rng(4)
    cache = rng.standard_normal((40, 4, 16)).astype(ml_dtypes.bfloat16)
    table = rng.integers(0, 40, (32, 1)).astype(np.uint32)
    out = nki.jit(gathered_transpose, backend=backend)(cache, table)
    want = cache[table[:, 0]].reshape(32, 1, 4, 16).transpose(3, 1, 2, 0)
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))


def rank_slice(table):
    """test_collectives' rank_id idiom: ``ncc.rank_id()`` (a trace-time int) as the
    ``scalar_offset`` of ``.ap``, so each rank copies its own slice of ``table``."""
    import nki.collectives as ncc

    _, h, w = table.shape
    out = nl.ndarray((h, w), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=table.ap(pattern=[[w, h], [1, w]], scalar_offset=ncc.rank_id(),
                                        indirect_dim=0))
    return out


def test_an_int_scalar_offset_moves_the_view_per_rank(backend):
    table = np.arange(2 * 4 * 8, dtype=np.float32).reshape(2, 4, 8)
    kernel = nki.jit(rank_slice, backend=backend)
    outs = nki.multi_rank_simulate(kernel, world_size=2, per_rank_inputs=[((table,), {})] * 2)
    for rank, out in enumerate(outs):
        np.testing.assert_array_equal(out, table[rank])


def int_offset_past_the_end(table):
    out = nl.ndarray(table.shape[1:], dtype=table.dtype, buffer=nl.shared_hbm)
    _, h, w = table.shape
    nisa.dma_copy(dst=out, src=table.ap(pattern=[[w, h], [1, w]], scalar_offset=2,
                                        indirect_dim=0))
    return out


def test_an_int_scalar_offset_past_the_end_is_an_error(backend):
    table = np.zeros((2, 4, 8), np.float32)
    with pytest.raises(nki.errors.NkiError, match="nki_"):
        nki.jit(int_offset_past_the_end, backend=backend)(table)


def many_offset_loads(table, starts):
    """nki-library's MoE idiom: one index tile as ``.ap(scalar_offset=)`` of thousands of
    DMAs (more than the register file holds, one register each), and the tile rewritten
    between two of them (the second must see the new index)."""
    n, w = table.shape
    for _ in range(2000):                      # a kernel already using half the file
        nisa.register_alloc(0)
    idx = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=starts[0:1, 0:1])
    out = nl.ndarray((3, w), dtype=table.dtype, buffer=nl.shared_hbm)
    row = nl.ndarray((1, w), dtype=table.dtype, buffer=nl.sbuf)
    for _ in range(2000):
        nisa.dma_copy(dst=row, src=table.ap([[w, 1], [1, w]], 0, scalar_offset=idx))
    nisa.dma_copy(dst=out[0:1, :], src=row)
    nisa.dma_copy(dst=idx, src=starts[0:1, 1:2])
    nisa.dma_copy(dst=row, src=table.ap([[w, 1], [1, w]], 0, scalar_offset=idx))
    nisa.dma_copy(dst=out[1:2, :], src=row)
    nisa.dma_copy(dst=out[2:3, :], src=table.ap([[w, 1], [1, w]], 0, scalar_offset=idx))
    return out


def test_an_index_tile_used_thousands_of_times_shares_its_register(backend):
    table = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    starts = np.array([[5, 2]], np.int32)
    out = nki.jit(many_offset_loads, backend=backend)(table, starts)
    np.testing.assert_array_equal(out, table[[5, 2, 2]])


def static_vector_transpose(vec, tiles: int):
    """mlp_tkg's and norm_tkg's bias/gamma load: a vector of ``tiles`` x 128 values, viewed
    4-D as (tiles, 1, 1, 128), transposed by DMA onto 128 partitions with ``dge_mode`` given
    as the bare number 3 (``none``: descriptors built before the run)."""
    out = nl.ndarray((128, tiles), dtype=vec.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 1, 1, tiles), dtype=vec.dtype, buffer=nl.sbuf)
    src = vec.reshape((tiles, 1, 1, 128))
    nisa.dma_transpose(dst=t, src=src, dge_mode=3)
    nisa.dma_copy(dst=out, src=t.reshape((128, tiles)))
    return out


@pytest.mark.parametrize("tiles", [1, 3])
def test_a_static_dma_transpose_takes_dge_mode_none(backend, tiles):
    vec = np.random.default_rng(tiles).standard_normal(tiles * 128).astype(np.float16)
    out = nki.jit(static_vector_transpose, backend=backend)(vec, tiles)
    np.testing.assert_array_equal(out, vec.reshape(tiles, 128).T)


def none_mode_gather_transpose(cache, table):
    got = nl.ndarray((16, 32), dtype=cache.dtype, buffer=nl.sbuf)
    idx = nl.ndarray((32, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=table)
    nisa.dma_transpose(dst=got, src=cache.ap([[16, 32], [1, 16]], vector_offset=idx,
                                               indirect_dim=0), dge_mode=nisa.dge_mode.none)
    return got


def test_dge_mode_none_on_a_gathered_transpose_is_an_error(backend):
    cache = np.zeros((64, 16), np.float16)
    table = np.arange(32, dtype=np.uint32).reshape(32, 1)
    with pytest.raises(nki.errors.NkiValidationError, match="nki_invalid_argument.*swdge"):
        nki.jit(none_mode_gather_transpose, backend=backend)(cache, table)


def tiled_copy(x):
    """A whole-tensor copy through SBUF, 128 rows at a time (the shape of any big test)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for r in range(0, x.shape[0], 128):
        t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[r:r + 128, :])
        nisa.dma_copy(dst=out[r:r + 128, :], src=t)
    return out


@pytest.mark.parametrize("mib, kept", [(1, True), (8, False)])
def test_a_large_call_leaves_no_arena_behind(backend, monkeypatch, mib, kept):
    """The suite runs hundreds of differently shaped tests in one process: an arena bigger
    than the pool's cap (lowered here to 4 MiB to stay small) is freed with its last output
    instead of being kept for a next call of the same size that never comes (output_proj_cte
    failed with MemoryError on a few hundred MiB after its multi-GB tests); a mid-sized
    arena is still kept for reuse."""
    import gc
    import weakref

    from nki.jit import hbm
    monkeypatch.setattr(hbm, "_POOL_MAX_BYTES", 4 << 20)
    monkeypatch.setattr(hbm, "_POOL", [])
    x = np.random.default_rng(mib).standard_normal((mib * 2048, 128)).astype(np.float32)
    out = nki.jit(tiled_copy, backend=backend)(x)
    np.testing.assert_array_equal(out, x)
    arena = weakref.ref(out.base)
    del out
    gc.collect()
    assert (arena() is not None) == kept


def target_logits(logits, targets, positions_per_batch):
    """cross_entropy_forward's idiom: each position's target logit gathered by its own DMA,
    moved by ``.ap(scalar_offset=<one element of the targets tile>)``: one new register per
    position (thousands), each read by that one DMA only."""
    n, vocab = logits.shape
    out = nl.ndarray((n, 1), dtype=logits.dtype, buffer=nl.shared_hbm)
    batch_targets = nl.ndarray((positions_per_batch, 1), dtype=nl.int32, buffer=nl.sbuf)
    picked = nl.ndarray((positions_per_batch, 1), dtype=logits.dtype, buffer=nl.sbuf)
    for b in range(n // positions_per_batch):
        first = b * positions_per_batch
        nisa.dma_copy(dst=batch_targets, src=targets[first:first + positions_per_batch])
        for p in range(positions_per_batch):
            nisa.dma_copy(dst=picked[p:p + 1, :],
                          src=logits.ap(pattern=[[vocab, 1], [1, 1]], offset=(first + p) * vocab,
                                        scalar_offset=batch_targets.ap(pattern=[[1, 1], [1, 1]],
                                                                       offset=p),
                                        indirect_dim=1))
        nisa.dma_copy(dst=out[first:first + positions_per_batch], src=picked)
    return out


def test_more_scalar_offset_registers_than_the_register_file(backend):
    from nki.lang.control import MAX_REGISTERS

    n, vocab = 61 * 64, 24
    assert n > MAX_REGISTERS
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((n, vocab)).astype(np.float32)
    targets = rng.integers(0, vocab, (n, 1)).astype(np.int32)
    out = nki.jit(target_logits, backend=backend)(logits, targets, 64)
    np.testing.assert_array_equal(out[:, 0], logits[np.arange(n), targets[:, 0]])


def sized_by_a_wide_pattern(block_to_expert):
    """moe_cte's SHARD_ON_BLOCK sizes an SBUF tile by the ``.shape`` of an ``.ap`` pattern that
    reaches past its tensor (128 x 2 strided positions of 288), then loads a pattern that
    stays inside: only an operand's access must be in bounds."""
    n = block_to_expert.shape[0]
    rows = (n - 2) // 4
    wide = block_to_expert.ap(pattern=[[4, 128], [2, 2]], offset=0)
    t = nl.ndarray(wide.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:rows, 0:2], src=block_to_expert.ap(pattern=[[4, rows], [2, 2]], offset=1))
    out = nl.ndarray((rows, 2), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t[0:rows, 0:2])
    return out


def loads_a_wide_pattern(block_to_expert):
    t = nl.ndarray((128, 2), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=block_to_expert.ap(pattern=[[4, 128], [2, 2]], offset=0))
    out = nl.ndarray((128, 2), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_an_ap_pattern_past_its_tensor_may_give_a_shape(backend):
    x = np.arange(288, dtype=np.int32)
    out = nki.jit(sized_by_a_wide_pattern, backend=backend)(x)
    rows = (288 - 2) // 4
    want = x[1 + 4 * np.arange(rows)[:, None] + 2 * np.arange(2)[None, :]]
    np.testing.assert_array_equal(out, want)


def test_an_ap_pattern_past_its_tensor_is_an_error_where_an_instruction_reads_it():
    with pytest.raises(nki.errors.NkiValidationError,
                       match=r"(?s)err_tensor_access_out_of_bound.*0\.\.510.*288 elements.*"
                             r"test_nki_library_idioms.py:\d+"):
        nki.jit(loads_a_wide_pattern, backend="python")(np.zeros(288, np.int32))


def scatter_into_returned_cache(cache, rows, slots):
    """qkv_cte's block KV cache: rows scattered into the cache input by one indirect DMA
    (``.ap(vector_offset=)`` as dst), and the cache returned: every slot not written keeps
    the input's value."""
    n, d = rows.shape
    idx = nl.ndarray((n, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=slots)
    t = nl.ndarray((n, d), dtype=rows.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=rows)
    flat = cache.reshape((cache.shape[0] * cache.shape[1], d))
    nisa.dma_copy(dst=flat.ap(pattern=[[d, n], [1, d]], offset=0, vector_offset=idx,
                              indirect_dim=0), src=t)
    return cache


@pytest.mark.parametrize("blocks", [4, 64])        # 64 KiB and 1 MiB caches
def test_a_returned_input_keeps_the_values_the_kernel_did_not_write(backend, blocks):
    rng = np.random.default_rng(blocks)
    cache = rng.standard_normal((blocks, 64, 64)).astype(np.float32)
    rows = rng.standard_normal((128, 64)).astype(np.float32)
    slots = rng.choice(blocks * 64, 128, replace=False).astype(np.int32).reshape(128, 1)
    want = cache.reshape(-1, 64).copy()
    want[slots[:, 0]] = rows
    out = nki.jit(scatter_into_returned_cache, backend=backend)(cache.copy(), rows, slots)
    np.testing.assert_array_equal(np.asarray(out).reshape(-1, 64), want)
