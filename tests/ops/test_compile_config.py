"""``nki.compiler`` (NKI 0.7/0.8) accepted by ``nki.jit``: CompileConfig's documented errors,
``Allocation.LINEAR`` placing tiles from first write to last read (it fits where the
default placement does not, and shares bytes the default keeps apart), ``nki_alloc_fallback``,
the config recorded on the specialization, and nested kernels under
``SpecializationConfig.allow_nested_config_override``. Both backends; numpy references."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.compiler import (
    AddressRotation,
    Allocation,
    AllocationMode,
    CompileConfig,
    OptLevel,
    SchedulingHeuristic,
    SpecializationConfig,
)
from nki.errors import (
    NkiCapacityError,
    NkiSpillWarning,
    NkiTypeError,
    NkiValidationError,
    NkiValueError,
)
from nki.ir.target import get_target

LINEAR = CompileConfig(allocation=Allocation.LINEAR)


def _err(code, *words):
    return "(?s)" + code + ".*" + ".*".join(words) + r".*test_compile_config\.py:\d+"


# ----- the documented configuration errors --------------------------------------------------
@pytest.mark.parametrize("kwargs,cls,words", [
    ({"scheduling": True}, NkiValueError,
     ("scheduling=True needs an allocation; set allocation=Allocation.LINEAR as well.",)),
    ({"scheduling": True, "allocation": Allocation.COLORING}, NkiValueError,
     ("scheduling=True needs allocation=Allocation.LINEAR, got allocation=Allocation.COLORING",)),
    ({"prefetch_auto": True}, NkiValueError,
     ("prefetch_auto acts only when NKI allocates; it cannot be set with "
      "allocation=Allocation.COLORING.",)),
    ({"split_reused_buffers": True, "allocation": Allocation.COLORING}, NkiValueError,
     ("split_reused_buffers acts only when NKI allocates",)),
    ({"experimental_allocation_mode": AllocationMode.FAST}, NkiValueError,
     ("experimental_allocation_mode acts only when NKI allocates",)),
    ({"allocation": Allocation.LINEAR,
      "experimental_scheduling_heuristic": SchedulingHeuristic.ASAP}, NkiValueError,
     ("experimental_scheduling_heuristic acts only when NKI schedules; set scheduling=True "
      "as well.",)),
    ({"experimental_allocation_mode": "FAST", "allocation": Allocation.LINEAR}, NkiTypeError,
     ("experimental_allocation_mode must be an nki.compiler.AllocationMode or None",)),
    ({"allocation": "linear"}, NkiTypeError,
     ("allocation must be an nki.compiler.Allocation or None",)),
    ({"opt_level": 2}, NkiTypeError, ("opt_level must be an nki.compiler.OptLevel or None",)),
    ({"address_rotation": True}, NkiTypeError,
     ("address_rotation must be an nki.compiler.AddressRotation",)),
    ({"dead_code_elim": 1}, NkiTypeError, ("dead_code_elim must be a bool",)),
])
def test_config_errors(kwargs, cls, words):
    with pytest.raises(cls, match=_err("nki_invalid_compile_config", *words)):
        CompileConfig(**kwargs)


def test_config_errors_are_python_errors_too():
    with pytest.raises(ValueError):
        CompileConfig(scheduling=True)
    with pytest.raises(TypeError):
        CompileConfig(opt_level="O2")


def test_valid_configs_and_jit_type_checks():
    full = CompileConfig(allocation=Allocation.LINEAR, scheduling=True,
                         opt_level=OptLevel.O2, prefetch_auto=True, split_reused_buffers=True,
                         experimental_allocation_mode=AllocationMode.RING,
                         experimental_scheduling_heuristic=SchedulingHeuristic.CRITICAL_PATH,
                         address_rotation=AddressRotation.ENABLED, barrier_check=True,
                         nki_alloc_fallback=False)
    assert full.linear and not CompileConfig(opt_level=OptLevel.O0).linear
    with pytest.raises(NkiTypeError, match=_err("nki_invalid_compile_config",
                                                "compile_config must be an "
                                                "nki.compiler.CompileConfig")):
        nki.jit(_scale, compile_config={"allocation": "linear"})
    with pytest.raises(NkiTypeError, match=_err("nki_invalid_compile_config",
                                                "specialization_config must be")):
        nki.jit(_scale, specialization_config=True)


def _scale(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=3.0)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_codegen_only_options_run_unchanged_and_are_recorded(backend):
    cfg = CompileConfig(allocation=Allocation.LINEAR, scheduling=True, opt_level=OptLevel.O2,
                        dma_copy_elim=True, element_widening=True, engine_balancing=True,
                        experimental_scheduling_heuristic=SchedulingHeuristic.DMA_PREFETCH)
    kernel = nki.jit(_scale, compile_config=cfg, backend=backend, cache=False)
    x = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(kernel(x), x * np.float32(3.0))
    assert kernel.specialize(x).compile_config is cfg


# ----- Allocation.LINEAR: first write to last read -----------------------------------------
def _late_buffer(x):
    """``late`` is created first but written only after ``early``'s last read (inside a
    loop, so the default placement keeps it live from its creation)."""
    late = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf, name="late")
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    early = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf, name="early")
    nisa.dma_copy(dst=early, src=x)
    nisa.tensor_scalar(dst=early, data=early, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=early)
    for _ in nl.sequential_range(1):
        nisa.dma_copy(dst=late, src=out)
        nisa.tensor_scalar(dst=late, data=late, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=out, src=late)
    return out


def _cols(fraction: float) -> int:
    """Columns of fp32 so that one tile takes ``fraction`` of a partition of SBUF."""
    return int(get_target("trn3").sbuf_bytes_per_partition * fraction) // 4


def test_capacity_counts_live_ranges_not_the_placement(backend):
    """Two 0.6-partition tiles never live at once fit under either allocator, with no spill:
    capacity is a property of the live ranges (nki/jit/capacity.py), not of our packing."""
    x = np.random.default_rng(1).standard_normal((128, _cols(0.6))).astype(np.float32)
    expect = x * np.float32(2.0) + np.float32(1.0)
    for config in (None, LINEAR):
        with warnings.catch_warnings():
            warnings.simplefilter("error", NkiSpillWarning)
            y = nki.jit(_late_buffer, compile_config=config, backend=backend, cache=False)(x)
        np.testing.assert_array_equal(y, expect)


def test_linear_reuses_the_bytes_of_a_dead_tile():
    x = np.ones((128, 256), np.float32)

    def addresses(config):
        spec = nki.jit(_late_buffer, compile_config=config, cache=False).specialize(x)
        tensors = {t.name: t.address for t in spec.cores[0].program.tensors}
        return tensors["early"], tensors["late"]

    early, late = addresses(None)
    assert early != late                      # live together under the default placement
    early, late = addresses(LINEAR)
    assert early == late                      # late takes early's bytes after its last read


def _too_big(x):
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf, name="first")
    b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf, name="second")
    nisa.dma_copy(dst=a, src=x)
    nisa.dma_copy(dst=b, src=x)
    nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=a)
    return out


def test_linear_out_of_memory_with_and_without_fallback():
    x = np.ones((128, _cols(0.6)), np.float32)
    strict = CompileConfig(allocation=Allocation.LINEAR, nki_alloc_fallback=False)
    with pytest.raises(NkiCapacityError, match=_err(
            "nki_sbuf_capacity_exceeded", "NKI allocation \\(Allocation.LINEAR, "
            "nki_alloc_fallback=False\\) ran out of memory", "Largest live tensors",
            "first")):
        nki.jit(_too_big, compile_config=strict, cache=False)(x)
    with pytest.warns(UserWarning, match="falling back to the default placement"):
        with pytest.raises(NkiCapacityError, match="nki_sbuf_capacity_exceeded"):
            nki.jit(_too_big, compile_config=LINEAR, cache=False)(x)


# ----- nested kernels -----------------------------------------------------------------------
@nki.jit(compile_config=CompileConfig(allocation=Allocation.LINEAR))
def _linear_sub(t):
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=5.0)


@nki.jit
def _plain_sub(t):
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)


def _caller(x, sub):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    sub(t)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_nested_kernels_inline(backend):
    x = np.random.default_rng(2).standard_normal((64, 32)).astype(np.float32)
    y = nki.jit(_caller, backend=backend, cache=False)(x, _plain_sub)
    np.testing.assert_array_equal(y, x * np.float32(2.0))
    same = nki.jit(_caller, compile_config=LINEAR, backend=backend, cache=False)
    np.testing.assert_array_equal(same(x, _linear_sub), x + np.float32(5.0))


def test_nested_config_disagreement_raises_unless_overridden(backend):
    x = np.ones((64, 32), np.float32)
    with pytest.raises(NkiValidationError, match=_err(
            "nki_invalid_compile_config", "Kernel '_linear_sub' is called from inside another "
            "kernel but sets compile config", "allocation=<Allocation.LINEAR",
            "allow_nested_config_override")):
        nki.jit(_caller, backend=backend, cache=False)(x, _linear_sub)
    lenient = nki.jit(_caller, backend=backend, cache=False,
                      specialization_config=SpecializationConfig(
                          allow_nested_config_override=True))
    with pytest.warns(UserWarning, match="inlined under the top-level kernel's config"):
        y = lenient(x, _linear_sub)
    np.testing.assert_array_equal(y, x + np.float32(5.0))


def test_nested_kernel_with_a_launch_grid_is_an_error():
    with pytest.raises(NkiValidationError, match=_err("err_nested_kernel_with_spmd_grid",
                                                      "_plain_sub", "kernel\\[2\\]")):
        nki.jit(_caller, cache=False)(np.ones((4, 4), np.float32), _plain_sub[2])
