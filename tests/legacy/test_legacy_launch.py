"""Legacy launch paths and less common calls: pass-by-reference outputs, nt annotations,
baremetal/benchmark decorators, indirect row gathers/scatters, more old ISA signatures."""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt
import numpy as np
from neuronxcc.nki import baremetal, benchmark, simulate_kernel


def scale_in_place(x: nt.tensor[128, 64], out: nt.mutable_tensor):
    i_p, i_f = nl.mgrid[0:128, 0:64]
    out[i_p, i_f] = nl.load(x[i_p, i_f]) * 3.0    # an HBM destination: stored via SBUF
    return None


def test_pass_by_reference_output(backend, rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    out = np.zeros_like(x)
    assert nki.jit(scale_in_place, backend=backend, kernel_return=False)(x, out) is None
    np.testing.assert_array_equal(out, x * 3)


def copy_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:x.shape[1]]
    nl.store(out[i_p, i_f], value=nl.load(x[i_p, i_f]))
    return out


def test_baremetal_and_benchmark_decorators(rng):
    x = rng.standard_normal((128, 32)).astype(np.float32)
    np.testing.assert_array_equal(baremetal(copy_kernel)(x), x)
    bench = benchmark(warmup=1, iters=2)(copy_kernel)
    np.testing.assert_array_equal(bench(x), x)
    assert bench.benchmark_result.nc_latency.get_latency_percentile(50) > 0
    np.testing.assert_array_equal(simulate_kernel(copy_kernel, x), x)


def gather_scatter(table, idx):
    out = nl.ndarray((2, 128, 32), dtype=table.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:32]
    rows = nl.load(idx[i_p, nl.arange(1)[None, :]])
    g = nl.load(table[rows[i_p, 0], i_f])            # gather rows idx[p]
    nl.store(out[0, i_p, i_f], value=g)
    scratch = nl.ndarray((256, 32), dtype=table.dtype, buffer=nl.hbm)
    nl.store(scratch[nl.mgrid[0:128, 0:32]], value=nl.zeros((128, 32), nl.float32))
    nl.store(scratch[128 + i_p, i_f], value=nl.zeros((128, 32), nl.float32))
    nl.store(scratch[rows[i_p, 0], i_f], value=g)    # scatter them back
    nl.store(out[1, i_p, i_f], value=nl.load(scratch[i_p, i_f]))
    return out


def test_indirect_gather_and_scatter(backend, rng):
    table = rng.standard_normal((256, 32)).astype(np.float32)
    idx = rng.permutation(128).astype(np.int32).reshape(128, 1)
    out = nki.jit(gather_scatter, backend=backend)(table, idx)
    np.testing.assert_array_equal(out[0], table[idx[:, 0]])
    np.testing.assert_array_equal(out[1], table[:128])


def isa_misc(a, b):
    out = nl.ndarray((6, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    i_1 = nl.arange(1)[None, :]
    x, y = nl.load(a[i_p, i_f]), nl.load(b[i_p, i_f])
    nl.store(out[0, i_p, i_f], value=nisa.tensor_tensor_scan(x, y, 0.0, np.multiply, np.add))
    red = nl.ndarray((128, 1), dtype=nl.float32)
    t = nisa.tensor_scalar_reduce(data=x, op0=np.multiply, operand0=2.0, reduce_op=np.add,
                                  reduce_res=red)
    nl.store(out[1, i_p, i_f], value=t)
    nl.store(out[2, i_p, i_1], value=red)
    s = nl.ndarray((128, 1), dtype=nl.float32)
    e = nisa.activation_reduce(op=nl.exp, data=x, reduce_op=nl.add, reduce_res=s)
    nl.store(out[3, i_p, i_f], value=e)
    nl.store(out[3, i_p, i_1], value=s)
    nl.store(out[4, i_p, i_f], value=nisa.scalar_tensor_tensor(
        data=x, op0=np.multiply, operand0=3.0, op1=np.subtract, operand1=y))
    nisa.dma_copy(dst=out[5, i_p, i_f], src=nl.rms_norm(x, y, axis=1, n=64))
    return out


def test_more_old_isa_signatures(backend, rng):
    a = rng.uniform(0.5, 1.0, (128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    out = nki.jit(isa_misc, backend=backend)(a, b)
    scan = np.zeros_like(a)
    r = np.zeros(128, np.float32)
    for i in range(64):
        r = r * a[:, i] + b[:, i]
        scan[:, i] = r
    np.testing.assert_allclose(out[0], scan, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out[1], a * 2)
    np.testing.assert_allclose(out[2, :, 0], (a * 2).sum(1), rtol=1e-5)
    np.testing.assert_allclose(out[3, :, 1:], np.exp(a)[:, 1:], rtol=1e-5)
    np.testing.assert_allclose(out[3, :, 0], np.exp(a).sum(1), rtol=1e-5)
    np.testing.assert_allclose(out[4], a * 3 - b, rtol=1e-6, atol=1e-6)
    rms = a / np.sqrt((a * a).sum(1, keepdims=True) / 64 + 1e-6) * b
    np.testing.assert_allclose(out[5], rms, rtol=1e-5, atol=1e-5)


def isa_select8(a, b):
    out = nl.ndarray((4, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    i_8 = nl.arange(8)[None, :]
    x, y = nl.load(a[i_p, i_f]), nl.load(b[i_p, i_f])
    top = nisa.max8(src=x)
    nl.store(out[0, i_p, i_8], value=top)
    nl.store(out[1, i_p, i_8], value=nisa.nc_find_index8(data=x, vals=top, dtype=nl.uint32))
    dst = nl.copy(y)
    nisa.tensor_copy_predicated(src=x, dst=dst, predicate=nl.greater(x, y, dtype=nl.uint8))
    nl.store(out[2, i_p, i_f], value=dst)
    i_q, i_r = nl.mgrid[0:64, 0:64]
    nl.store(out[3, i_q, i_r], value=nisa.dma_transpose(a[i_q, i_r]))
    return out


def test_top8_predicated_copy_dma_transpose(backend, rng):
    a = rng.permutation(128 * 64).reshape(128, 64).astype(np.float32)
    b = rng.permutation(128 * 64).reshape(128, 64).astype(np.float32)
    out = nki.jit(isa_select8, backend=backend)(a, b)
    top = -np.sort(-a, axis=1)[:, :8]
    np.testing.assert_array_equal(out[0, :, :8], top)
    np.testing.assert_array_equal(out[1, :, :8], np.argsort(-a, axis=1)[:, :8])
    np.testing.assert_array_equal(out[2], np.maximum(a, b))
    np.testing.assert_array_equal(out[3, :64], a[:64, :64].T)


def nc_grid(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:32]
    r = nl.program_id(0) * 128 + i_p
    nl.store(out[r, i_f], value=nl.load(a[r, i_f]) + float(nl.num_programs()))
    return out


def test_nc_grid_dims(backend, rng):
    a = rng.standard_normal((512, 32)).astype(np.float32)
    out = nki.jit(nc_grid, backend=backend)[nl.spmd_dim(nl.nc(2), 2)](a)
    np.testing.assert_array_equal(out, a + 4.0)


def test_disk_cache_hits_for_legacy_kernels(tmp_path, monkeypatch, rng):
    """A second kernel object (as in a new process) loads the traced program from disk:
    deferred emission and the grid wrapper leave the cached dependencies checkable."""
    from nki.jit import cache

    loads = []
    original = cache.ProgramCache.load
    monkeypatch.setattr(cache.ProgramCache, "load",
                        lambda self, key: loads.append(original(self, key)) or loads[-1])
    a = rng.standard_normal((256, 32)).astype(np.float32)
    for _ in range(2):
        out = nki.jit(nc_grid, cache_dir=str(tmp_path))[2](a)
        np.testing.assert_array_equal(out, a + 2.0)
    assert loads[0] is None and loads[1] is not None
