"""What a cost model needs is in the IR (issue 15 §2): the ``engine=``, ``dge_mode=``,
``priority=``, ``perf_mode=``, ``name=`` a kernel passes, ``depends_on`` edges,
``with_schedule`` pairs and SPMD/LNC boundaries survive tracing, placement and reroll, and
:func:`nki.ir.nodes.engine_of` names the engine of every instruction. Each kernel also runs
and is checked against numpy, so recording changes nothing it computes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.ir.nodes import Instr, Loop, engine_fixed, engine_of, walk
from nki.ir.ops import DgeMode, Engine, MatmulPerfMode, Opcode


def _instrs(spec, core: int = 0) -> list[Instr]:
    return [s for s, _ in walk(spec.cores[core].program.body) if isinstance(s, Instr)]


def _only(instrs: list[Instr], opcode: Opcode) -> list[Instr]:
    return [i for i in instrs if i.opcode is opcode]


def _copy_kernel(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :], dge_mode=nisa.dge_mode.hwdge,
                      priority=1, name="load")
        u = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=u, src=t, engine=nisa.engine.gpsimd, name="cp")
        nisa.tensor_scalar(dst=u, data=u, op0=nl.multiply, operand0=2.0,
                           engine=nisa.engine.unknown)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=u)
    return out


def test_keywords_reach_the_rerolled_ir(backend, rng):
    x = rng.standard_normal((512, 64)).astype(np.float32)
    kern = nki.jit(_copy_kernel, backend=backend)
    np.testing.assert_array_equal(kern(x), 2 * x)
    spec = kern.specialize(x)
    loops = [s for s, _ in walk(spec.cores[0].program.body) if isinstance(s, Loop)]
    assert len(loops) == 1 and loops[0].trip.const == 4      # still one rerolled loop
    load, store = _only(_instrs(spec), Opcode.DMA_COPY)
    assert (load.name, load.dge_mode, load.priority) == ("load", DgeMode.hwdge, 1)
    assert (store.name, store.dge_mode, store.priority) == ("", None, None)
    assert load.hint("api") == "nisa.dma_copy"
    (copy,) = _only(_instrs(spec), Opcode.TENSOR_COPY)
    assert copy.name == "cp" and engine_of(copy) is Engine.gpsimd and engine_fixed(copy)
    (scale,) = _only(_instrs(spec), Opcode.TENSOR_SCALAR)
    # engine=unknown is the documented default, and not a choice the kernel fixed
    assert engine_of(scale) is Engine.vector and not engine_fixed(scale)
    assert scale.hint("engine") is Engine.unknown
    assert engine_of(load) is Engine.dma and load.engine is Engine.dma
    assert "{name='load' priority=1 dge_mode=hwdge}" in spec.ir
    assert "{name='cp' engine=gpsimd}" in spec.ir


def test_a_hint_that_differs_per_iteration_is_kept_per_iteration(backend, rng):
    """Two iterations asking for different priorities are not folded into one instruction
    that would claim the first one's priority for both."""
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            t = nl.ndarray((128, 8), x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :], priority=i)
            nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=t)
        return out

    x = rng.standard_normal((256, 8)).astype(np.float32)
    kern = nki.jit(kernel, backend=backend)
    np.testing.assert_array_equal(kern(x), x)
    loads = [i for i in _only(_instrs(kern.specialize(x)), Opcode.DMA_COPY)
             if i.priority is not None]
    assert sorted(i.priority for i in loads) == [0, 1]


def test_default_engines_follow_the_isa_table(backend, rng):
    def kernel(a, n):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        iout = nl.ndarray(n.shape, n.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        e = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.activation(dst=e, op=nl.exp, data=t)
        ps = nl.ndarray((a.shape[1], a.shape[1]), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=e, moving=e)
        tp = nl.ndarray((a.shape[1], a.shape[0]), a.dtype, buffer=nl.psum)
        nisa.nc_transpose(dst=tp, data=e)
        ti = nl.ndarray(n.shape, n.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ti, src=n)
        nisa.tensor_tensor(dst=ti, data1=ti, data2=ti, op=nl.add)      # int32: GpSimd
        nisa.tensor_tensor(dst=e, data1=e, data2=t, op=nl.multiply)    # float: Vector
        nisa.dma_copy(dst=out, src=e)
        nisa.dma_copy(dst=iout, src=ti)
        return out, iout

    a = rng.standard_normal((32, 32)).astype(np.float32)
    n = rng.integers(-100, 100, (32, 8)).astype(np.int32)
    kern = nki.jit(kernel, backend=backend)
    out, iout = kern(a, n)
    np.testing.assert_allclose(out, np.exp(a) * a, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(iout, 2 * n)
    engines = {}
    for ins in _instrs(kern.specialize(a, n)):
        engines.setdefault(ins.opcode, set()).add(engine_of(ins))
    assert engines[Opcode.DMA_COPY] == {Engine.dma}
    assert engines[Opcode.ACTIVATION] == {Engine.scalar}
    assert engines[Opcode.NC_MATMUL] == {Engine.tensor}
    assert engines[Opcode.NC_TRANSPOSE] == {Engine.tensor}       # a PSUM dst picks TensorE
    assert engines[Opcode.TENSOR_TENSOR] == {Engine.gpsimd, Engine.vector}


def test_legacy_nl_calls_take_their_instructions_engines():
    import neuronxcc.nki.language as lnl
    from neuronxcc import nki as legacy_nki

    @legacy_nki.jit
    def kernel(a):
        out = lnl.ndarray(a.shape, a.dtype, buffer=lnl.shared_hbm)
        x = lnl.load(a)
        lnl.store(out, lnl.add(lnl.exp(x), x))
        return out

    a = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_allclose(kernel(a), np.exp(a) + a, rtol=1e-5, atol=1e-6)
    # nl.load/nl.store -> dma_copy, nl.exp -> activation, nl.add -> tensor_tensor
    found = {(i.opcode, engine_of(i)) for i in _instrs(kernel.specialize(a))}
    assert found == {(Opcode.DMA_COPY, Engine.dma), (Opcode.ACTIVATION, Engine.scalar),
                     (Opcode.TENSOR_TENSOR, Engine.vector)}


def test_matmul_perf_mode_is_recorded(backend, rng):
    def kernel(s, m):
        out = nl.ndarray((s.shape[2], m.shape[2]), nl.float32, buffer=nl.shared_hbm)
        st = nl.ndarray(s.shape, s.dtype, buffer=nl.sbuf)
        mv = nl.ndarray(m.shape, m.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=st, src=s)
        nisa.dma_copy(dst=mv, src=m)
        ps = nl.ndarray((s.shape[2], m.shape[2]), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=st, moving=mv,
                       perf_mode=nisa.matmul_perf_mode.double_row)
        r = nl.ndarray(ps.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=ps)
        nisa.dma_copy(dst=out, src=r)
        return out

    e4m3 = ml_dtypes.float8_e4m3
    s = rng.integers(-3, 4, (64, 2, 16)).astype(e4m3)     # small integers: exact in fp8
    m = rng.integers(-3, 4, (64, 2, 32)).astype(e4m3)
    kern = nki.jit(kernel, backend=backend, target="trn3")
    expect = np.einsum("kjm,kjn->mn", s.astype(np.float64), m.astype(np.float64))
    np.testing.assert_array_equal(kern(s, m), expect)
    (mm,) = _only(_instrs(kern.specialize(s, m)), Opcode.NC_MATMUL)
    assert mm.perf_mode is MatmulPerfMode.double_row


def test_depends_on_edges_and_with_schedule_are_kept(backend, rng):
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        load = nisa.dma_copy(dst=t, src=x, name="load")
        u = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        bump = nisa.tensor_scalar(dst=u, data=t, op0=nl.add, operand0=1.0, name="bump")
        bump.depends_on(load, kind=nisa.dependency.schedule)
        nisa.dma_copy(dst=out, src=u)
        return out

    x = rng.standard_normal((16, 8)).astype(np.float32)
    kern = nki.jit(kernel, backend=backend).with_schedule([("bump", ["load"])])
    np.testing.assert_allclose(kern(x), x + 1, rtol=1e-6)
    spec = kern.specialize(x)
    ins = _instrs(spec)
    load = next(i for i in ins if i.name == "load")
    bump = next(i for i in ins if i.name == "bump")
    assert bump.hint("depends_on") == ((load.hint("dep_label"), nisa.dependency.schedule),)
    assert dict(spec.cores[0].program.meta)["schedule"] == (("bump", ("load",)),)
    # a kernel without the schedule is its own specialization
    plain = nki.jit(kernel, backend=backend).specialize(x)
    assert "schedule" not in dict(plain.cores[0].program.meta)


def test_legacy_grid_records_its_programs_and_cores():
    import neuronxcc.nki.language as lnl
    from neuronxcc import nki as legacy_nki

    @legacy_nki.jit
    def add(a, b):
        out = lnl.ndarray(a.shape, a.dtype, buffer=lnl.shared_hbm)
        i = lnl.program_id(0)
        ip, jf = lnl.mgrid[0:128, 0:8]
        lnl.store(out[i * 128 + ip, jf], lnl.load(a[i * 128 + ip, jf]) +
                  lnl.load(b[i * 128 + ip, jf]))
        return out

    a, b = (np.random.default_rng(k).standard_normal((512, 8)).astype(np.float32)
            for k in (1, 2))
    for grid, cores in ((4, 1), (lnl.nc(2) * 2, 2), (lnl.spmd_dim(2, lnl.nc(2)), 2)):
        np.testing.assert_allclose(add[grid](a, b), a + b, rtol=1e-6)
        program = add[grid].specialize(a, b).cores[0].program
        assert dict(program.meta)["spmd_grid"] == ((4, cores),)
        loops = [s for s, _ in walk(program.body) if isinstance(s, Loop)]
        assert [lp.spmd_axis for lp in loops] == [0]


@pytest.mark.parametrize("lnc", [1, 2])
def test_lnc_cores_are_programs_of_one_launch(lnc, rng):
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        rows = x.shape[0] // nl.num_programs(0)
        lo = nl.program_id(0) * rows
        t = nl.ndarray((rows, x.shape[1]), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[lo:lo + rows, :])
        nisa.dma_copy(dst=out[lo:lo + rows, :], src=t)
        return out

    x = rng.standard_normal((16, 8)).astype(np.float32)
    kern = nki.jit(kernel, target="trn2")[lnc]
    np.testing.assert_array_equal(kern(x), x)
    spec = kern.specialize(x)
    assert [(c.program.core, c.program.num_cores) for c in spec.cores] == \
        [(k, lnc) for k in range(lnc)]


def test_legacy_isa_keywords_are_recorded():
    import neuronxcc.nki.isa as lisa
    import neuronxcc.nki.language as lnl
    from neuronxcc import nki as legacy_nki

    @legacy_nki.jit
    def kernel(a):
        out = lnl.ndarray(a.shape, a.dtype, buffer=lnl.shared_hbm)
        t = lnl.ndarray(a.shape, a.dtype, buffer=lnl.sbuf)
        lisa.dma_copy(dst=t, src=a, dge_mode=lisa.dge_mode.swdge)
        u = lisa.tensor_copy(t, engine=lisa.gpsimd_engine)
        lnl.store(out, u)
        return out

    a = np.random.default_rng(2).standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_array_equal(kernel(a), a)
    ins = _instrs(kernel.specialize(a))
    assert [i.dge_mode for i in _only(ins, Opcode.DMA_COPY)][0] is DgeMode.swdge
    (copy,) = _only(ins, Opcode.TENSOR_COPY)
    assert engine_of(copy) is Engine.gpsimd and engine_fixed(copy)
