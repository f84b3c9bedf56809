"""Direct allocation (``ncc.sbuf/psum.alloc``/``mod_alloc`` → ``address=``), DMA
read-modify-write (``nisa.dma_copy(dst_rmw_op=np.add)``, ``nl.atomic_rmw``) and
``oob_mode`` on legacy indirect DMAs: kernels of our own against numpy, both backends."""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest

from nki.errors import NkiValidationError

# ----- direct allocation ----------------------------------------------------------------------


def aliased_kernel(a, b):
    """Two tiles the kernel places on the same SBUF bytes: the second load overwrites the
    first, so storing the first tile yields ``b`` (proof that the address is honoured)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray((nl.par_dim(a.shape[0]), a.shape[1]), dtype=a.dtype,
                   buffer=ncc.sbuf.mod_alloc(base_addr=512))
    x[...] = nl.load(a)
    y = nl.ndarray((nl.par_dim(a.shape[0]), a.shape[1]), dtype=a.dtype,
                   buffer=ncc.sbuf.alloc(lambda idx, pdim, fbytes: (0, 512)))
    y[...] = nl.load(b)
    nl.store(out, value=x)
    return out


def test_direct_sbuf_address_is_honoured(backend, rng):
    a, b = (rng.standard_normal((32, 16)).astype(np.float32) for _ in range(2))
    out = nki.jit(aliased_kernel, backend=backend)(a, b)
    np.testing.assert_array_equal(out, b)


def blocked_transpose_kernel(a, tiles):
    """a [128*T, 128] -> a.T through identity matmuls into a PSUM tile at bank 3 and
    SBUF block tensors placed by mod_alloc (``tiles`` physical tiles for 4 blocks)."""
    n, m = a.shape
    nb = n // 128
    out = nl.ndarray((m, n), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:128]
    ident = nl.shared_constant(np.identity(128, dtype=np.float32), dtype=nl.float32)
    eye = nl.ndarray((nl.par_dim(128), 128), dtype=nl.float32,
                     buffer=ncc.sbuf.mod_alloc(base_addr=0))
    eye[i_p, i_f] = nl.load(ident)
    blocks = nl.ndarray((nb, nl.par_dim(128), m), dtype=a.dtype,
                        buffer=ncc.sbuf.mod_alloc(base_addr=1024, num_free_tiles=(tiles,)))
    for t in nl.affine_range(nb):
        blocks[t, i_p, i_f] = nl.load(a[t * 128 + i_p, i_f])
        ps = nl.ndarray((nl.par_dim(128), 128), dtype=nl.float32,
                        buffer=ncc.psum.mod_alloc(base_bank=3))
        ps[i_p, i_f] = nisa.nc_matmul(blocks[t, i_p, i_f], eye)
        nl.store(out[i_p, t * 128 + i_f], value=nl.copy(ps, dtype=a.dtype))
    return out


@pytest.mark.parametrize("tiles", [4, 1])     # one tile per block, or all blocks on one
def test_mod_alloc_blocks_and_psum_bank(backend, rng, tiles):
    a = rng.standard_normal((512, 128)).astype(np.float32)
    out = nki.jit(blocked_transpose_kernel, backend=backend)(a, tiles)
    np.testing.assert_allclose(out, a.T, rtol=1e-6, atol=1e-6)


def zeros_direct_kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    z = nl.zeros(a.shape, dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))  # zinit
    nl.store(out, value=z)
    return out


def test_init_value_with_direct_allocation_is_an_error():
    with pytest.raises(NkiValidationError) as err:
        nki.jit(zeros_direct_kernel)(np.ones((8, 8), np.float32))
    assert "err_tensor_creation_on_scratchpad_with_init_value_not_supported" in str(err.value)
    assert "test_legacy_alloc_rmw.py" in str(err.value) and "zinit" in str(err.value)


# ----- DMA read-modify-write and oob_mode -----------------------------------------------------


def rmw_kernel(base, upd, rows, gather_rows):
    """out = base; out[:k] += upd (dst_rmw_op); out[rows[p]] += upd[p] (atomic_rmw,
    repeated rows accumulate); a gather with oob_mode=skip keeps -1 where gather_rows >= N."""
    n, f = base.shape
    out = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.shared_hbm)
    got = nl.ndarray(upd.shape, dtype=base.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=base)
    i_p, i_f = nl.mgrid[0:upd.shape[0], 0:f]
    u = nl.load(upd)
    nisa.dma_copy(dst=out[i_p, i_f], src=u, dst_rmw_op=np.add)
    idx = nl.load(rows)
    nl.atomic_rmw(out[idx, i_f], value=u, op=np.add)
    g = nisa.memset(shape=upd.shape, value=-1.0, dtype=base.dtype)
    nisa.dma_copy(dst=g, src=base[nl.load(gather_rows), i_f], oob_mode=nisa.oob_mode.skip)
    nl.store(got, value=g)
    return out, got


def test_dma_rmw_atomic_rmw_and_oob_skip(backend, rng):
    n, f, k = 40, 24, 16
    base = rng.standard_normal((n, f)).astype(np.float32)
    upd = rng.standard_normal((k, f)).astype(np.float32)
    rows = np.array([3, 7, 3, 0, 39, 7, 7, 12, 1, 2, 3, 4, 5, 6, 8, 9], np.int32)[:, None]
    out, got = nki.jit(rmw_kernel, backend=backend)(base, upd, rows, rows)
    ref = base.copy()
    ref[:k] += upd
    np.add.at(ref, rows[:, 0], upd)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got, base[rows[:, 0]])

    far = rows.copy()
    far[[2, 5]] = n + 3                                  # out of range: skipped rows keep -1
    _, got = nki.jit(rmw_kernel, backend=backend)(base, upd, rows, far)
    ref_got = base[np.minimum(far[:, 0], n - 1)].copy()
    ref_got[[2, 5]] = -1.0
    np.testing.assert_array_equal(got, ref_got)


# ----- PSUM accumulation groups on directly allocated / uninitialised PSUM -------------------


def psum_group_kernel(a, b):
    """Two K-tile accumulation groups: into a bank placed by mod_alloc (block tensor, the
    ``ps[0] += ...`` form) and into a plain never-zeroed nl.ndarray PSUM tile; the first
    matmul of each group starts it. A block transpose with is_transpose=True into fp32
    PSUM (the trn1 form) and a column a[0:128, j] as a per-partition scalar."""
    K, M = a.shape
    out = nl.ndarray((M, b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    out2 = nl.ndarray((M, b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    out_t = nl.ndarray((M, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((1, nl.par_dim(M), b.shape[1]), dtype=nl.float32,
                    buffer=ncc.psum.mod_alloc(base_bank=5, num_bank_tiles=(1,)))
    ps2 = nl.ndarray((M, b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        at = nl.load(a[k * 128:(k + 1) * 128, :])
        bt = nl.load(b[k * 128:(k + 1) * 128, :])
        ps[0] += nisa.nc_matmul(at, bt)
        ps2 += nisa.nc_matmul(at, bt)
    nl.store(out, value=nl.copy(ps[0]))
    nl.store(out2, value=nl.copy(ps2))
    eye = nl.shared_constant(np.identity(128, dtype=np.float32), dtype=nl.float32)
    tp = nl.ndarray((M, 128), dtype=nl.float32, buffer=nl.psum)
    tp[...] = nisa.nc_matmul(nl.load(a[0:128, :]), nl.load(eye), is_transpose=True)
    col = nl.load(a[0:M, 3])                                # a [M, 1] column
    nl.store(out_t, value=nl.multiply(tp, col))
    return out, out2, out_t


def test_psum_accumulation_groups_and_trn1_transpose(backend, rng):
    a = rng.standard_normal((384, 64)).astype(np.float32)
    b = rng.standard_normal((384, 96)).astype(np.float32)
    out, out2, out_t = nki.jit(psum_group_kernel, backend=backend)(a, b)
    np.testing.assert_allclose(out, a.T @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out2, a.T @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out_t, a[0:128, :].T * a[0:64, 3:4], rtol=1e-6, atol=1e-6)


def current_address_psum_kernel(a, b):
    """The current dialect: accumulate=None into a PSUM tile placed by address= accumulates
    after the group's first matmul (the tracer tracks matmul writes of placed PSUM)."""
    import nki.isa as cisa
    import nki.language as cl

    out = cl.ndarray((64, 96), dtype=cl.float32, buffer=cl.shared_hbm)
    ps = cl.ndarray((64, 96), dtype=cl.float32, buffer=cl.psum, address=(0, 2048))
    for k in range(3):
        at = cl.ndarray((128, 64), cl.float32)
        bt = cl.ndarray((128, 96), cl.float32)
        cisa.dma_copy(at, a[k * 128:(k + 1) * 128, :])
        cisa.dma_copy(bt, b[k * 128:(k + 1) * 128, :])
        cisa.nc_matmul(ps, at, bt)
    o = cl.ndarray((64, 96), cl.float32)
    cisa.tensor_copy(o, ps)
    cisa.dma_copy(out, o)
    return out


def test_current_dialect_address_psum_accumulates(backend, rng):
    import nki as current

    a = rng.standard_normal((384, 64)).astype(np.float32)
    b = rng.standard_normal((384, 96)).astype(np.float32)
    out = current.jit(current_address_psum_kernel, backend=backend)(a, b)
    np.testing.assert_allclose(out, a.T @ b, rtol=1e-4, atol=1e-4)


def block_alias_kernel(a, tiles):
    """Three blocks on ``tiles`` physical tiles (modulo allocation): with one tile every
    block is the same bytes, so block 0 read after block 2 was written holds block 2's data;
    with three tiles the blocks are distinct."""
    out = nl.ndarray((3, 32, 16), dtype=a.dtype, buffer=nl.shared_hbm)
    blk = nl.ndarray((3, nl.par_dim(32), 16), dtype=a.dtype,
                     buffer=ncc.sbuf.mod_alloc(base_addr=256, num_free_tiles=(tiles,)))
    for b in nl.affine_range(3):
        blk[b] = nl.load(a[b])
    for b in nl.affine_range(3):
        nl.store(out[b], value=blk[b])
    return out


@pytest.mark.parametrize("tiles", [1, 3])
def test_modulo_blocks_alias_like_hardware(backend, rng, tiles):
    a = rng.standard_normal((3, 32, 16)).astype(np.float32)
    out = nki.jit(block_alias_kernel, backend=backend)(a, tiles)
    np.testing.assert_array_equal(out, a if tiles == 3 else np.stack([a[2]] * 3))


def bank_map_kernel(a, b):
    """PSUM blocks placed by an allocation function taking a bank map through
    functools.partial (called with idx=, pdim_size=, fdim_size= as AWS's compiler does)."""
    import functools

    def by_bank(bank_map, idx, pdim_size, fdim_size):
        return bank_map[idx], 0, 0

    out = nl.ndarray((2, 64, 96), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((2, nl.par_dim(64), 96), dtype=nl.float32,
                    buffer=ncc.psum.alloc(functools.partial(by_bank,
                                                            bank_map={(0,): 6, (1,): 2})))
    for g in nl.affine_range(2):
        ps[g] = nisa.nc_matmul(nl.load(a[g]), nl.load(b[g]))
        nl.store(out[g], value=nl.copy(ps[g]))
    return out


def test_allocation_function_with_partial(backend, rng):
    a = rng.standard_normal((2, 128, 64)).astype(np.float32)
    b = rng.standard_normal((2, 128, 96)).astype(np.float32)
    out = nki.jit(bank_map_kernel, backend=backend)(a, b)
    np.testing.assert_allclose(out, np.einsum("gkm,gkn->gmn", a, b), rtol=1e-4, atol=1e-4)
