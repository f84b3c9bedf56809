"""Tiles of a runtime loop's own body (nki/jit/liveness.py): a tile first used in the body by
an instruction that overwrites all of it shares bytes with the body's other tiles, so a body
may hold more short-lived PSUM tiles over one pass than PSUM has banks; a tile carried from
one pass to the next keeps its bytes for the whole loop. Against numpy, both backends."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.ir.affine import Affine
from nki.ir.nodes import Access, Instr, TensorDecl
from nki.ir.ops import OobMode, Opcode
from nki.ir.types import FLOAT32, Memory
from nki.jit.liveness import overwrites_whole, plain_write

TILES, F, PROJ = 3, 512, 12


def _count(n):
    sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=n)
    reg = nisa.register_alloc()
    nisa.register_load(reg, sb)
    return reg


def projections_kernel(x, w, n, parts=1):
    """out[i] = sum_j w[j].T @ x[i] for the first n row tiles, a runtime loop whose body makes
    12 one-bank PSUM tiles one after another (16 KiB of PSUM holds 8), each written by
    ``parts`` matmuls of a column slice (a body's own tile written in parts, ``plain_write``)."""
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    ws = [nl.ndarray((128, 128), dtype=w.dtype, buffer=nl.sbuf) for _ in range(PROJ)]
    for j in range(PROJ):
        nisa.dma_copy(dst=ws[j], src=w[j])

    def body(i):
        xt = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[nl.ds(i * 128, 128), :])
        total = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=total, value=0.0)
        for j in range(PROJ):
            ps = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.psum)
            for c in range(0, F, F // parts):
                nisa.nc_matmul(dst=ps[:, c:c + F // parts], stationary=ws[j],
                               moving=xt[:, c:c + F // parts])
            nisa.tensor_tensor(dst=total, data1=total, data2=ps, op=nl.add)
        nisa.dma_copy(dst=out[nl.ds(i * 128, 128), :], src=total)

    nl.fori_loop(0, _count(n), body)
    return out


def _inputs(seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((TILES * 128, F)).astype(np.float32)
    w = rng.standard_normal((PROJ, 128, 128)).astype(np.float32)
    return x, w


@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("n", [TILES, 1])
def test_a_body_may_hold_more_psum_tiles_than_banks_over_one_pass(backend, n, parts):
    x, w = _inputs()
    got = nki.jit(projections_kernel, backend=backend)(x, w, np.array([[n]], np.int32),
                                                       parts)
    want = np.zeros((TILES * 128, F))
    for i in range(n):
        rows = x[i * 128:(i + 1) * 128].astype(np.float64)
        want[i * 128:(i + 1) * 128] = sum(w[j].astype(np.float64).T @ rows for j in range(PROJ))
    np.testing.assert_allclose(got[:n * 128], want[:n * 128], rtol=1e-4, atol=1e-3)


def running_sum_kernel(x, n):
    """out[i] = x[0] + ... + x[i] (row tiles): ``carry`` crosses passes, ``tmp`` does not."""
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    carry = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=carry, value=0.0)

    def body(i):
        tmp = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tmp, src=x[nl.ds(i * 128, 128), :])
        nisa.tensor_tensor(dst=carry, data1=carry, data2=tmp, op=nl.add)
        scaled = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=scaled, data=carry, op0=nl.multiply, operand0=1.0)
        nisa.dma_copy(dst=out[nl.ds(i * 128, 128), :], src=scaled)

    nl.fori_loop(0, _count(n), body)
    return out


def test_a_carried_tile_keeps_its_bytes_across_passes(backend):
    x, _ = _inputs(2)
    got = nki.jit(running_sum_kernel, backend=backend)(x, np.array([[TILES]], np.int32))
    want = np.cumsum(x.reshape(TILES, 128, F), axis=0, dtype=np.float32).reshape(x.shape)
    np.testing.assert_array_equal(got, want)


def _tile_and_view(offset=0, dims=((1, 128), (1, F))):
    decl = TensorDecl(1, "t1", Memory.SBUF, (128, F), FLOAT32)
    return decl, Access(1, FLOAT32, Affine(offset), dims)


def _instr(opcode, dst, reads=(), attrs=()):
    return Instr(opcode, (("dst", dst),), reads, attrs, None)


def test_only_whole_plain_overwrites_make_a_tile_the_bodys_own():
    decl, whole = _tile_and_view()
    other = Access(2, FLOAT32, Affine(0), ((1, 128), (1, F)))
    assert overwrites_whole(_instr(Opcode.TENSOR_COPY, whole, (("src", other),)), "dst",
                            whole, decl)
    assert overwrites_whole(_instr(Opcode.DMA_COPY, whole, (("src", other),),
                                   (("oob_mode", OobMode.error),)), "dst", whole, decl)
    refused = [
        (_instr(Opcode.NC_MATMUL, whole, (("moving", other),), (("accumulate", True),)), whole),
        (_instr(Opcode.TENSOR_TENSOR, whole, (("data1", whole), ("data2", other))), whole),
        (_instr(Opcode.DMA_COPY, whole, (("src", other),), (("oob_mode", OobMode.skip),)),
         whole),
        (_instr(Opcode.TENSOR_COPY_PREDICATED, whole, (("src", other),)), whole),
        (_instr(Opcode.TENSOR_COPY, _tile_and_view(8)[1]), _tile_and_view(8)[1]),
        (_instr(Opcode.TENSOR_COPY, _tile_and_view(0, ((1, 64), (1, F)))[1]),
         _tile_and_view(0, ((1, 64), (1, F)))[1]),
        (_instr(Opcode.TENSOR_COPY, _tile_and_view(0, ((1, 128), (2, F // 2)))[1]),
         _tile_and_view(0, ((1, 128), (2, F // 2)))[1]),
    ]
    for instr, acc in refused:
        assert not overwrites_whole(instr, "dst", acc, decl), instr


# ----- tiles written in parts (plain_write) ---------------------------------------------------
def test_plain_write_case_by_case():
    """Writes in parts, at fixed places, whenever the instruction runs: a body's own tile may
    be filled by them (flash_paged_attn_varlen's buffers, tile by tile)."""
    half = Access(1, FLOAT32, Affine(F // 2), ((1, 128), (1, F // 2)))
    moved = Access(1, FLOAT32, Affine.var(-1 - 3, F // 2), ((1, 128), (1, F // 2)))
    assert plain_write(_instr(Opcode.TENSOR_COPY, half), "dst", half)
    assert plain_write(_instr(Opcode.NC_MATMUL, half), "dst", half)
    refused = [
        (_instr(Opcode.NC_MATMUL, half, (), (("accumulate", True),)), half),
        (_instr(Opcode.DMA_COPY, half, (), (("oob_mode", OobMode.skip),)), half),
        (_instr(Opcode.DMA_INDIRECT, half), half),
        (_instr(Opcode.TENSOR_COPY_PREDICATED, half), half),
        (_instr(Opcode.TENSOR_COPY, moved), moved),
    ]
    for instr, acc in refused:
        assert not plain_write(instr, "dst", acc), instr
    assert not plain_write(_instr(Opcode.TENSOR_COPY, half), "reduce_res", half)
