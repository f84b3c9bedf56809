"""Every public name of the current NKI dialect in spec §3 (``nki.language``), §4
(``nki.isa``), §2 (``nki.collectives``) and §10 (NKI 0.7/0.8: tile grids and stream
buffers, ``nki.lnc``, the prepare/trigger collectives, ``nki.compiler``,
``nki.multi_rank_simulate``) exists in our namespaces.

The lists are copied by hand from /work/shared/nki-spec.md and, for §10, from AWS's newest
API reference pages (Neuron 2.33/2.34: nki.language.tiles / blocks / alloc_tiles /
alloc_blocks / alloc_stream_buffers / NkiGrid / NkiTileGrid / NkiBlockGrid /
NkiStreamBuffers, nki.lnc, nki.collectives.*_prepare / *_trigger, nki.compiler.*); the only
names left out are in EXCLUDED, each with its reason.
"""

from __future__ import annotations

import importlib

import pytest

LANGUAGE = {
    "§1.2 buffers": "sbuf psum private_hbm shared_hbm hbm is_sbuf is_psum is_hbm is_on_chip",
    "§2 device_print": "device_print",
    "§3.1 memory": "load store load_transpose2d copy broadcast_to gather_flattened expand_dims",
    "§3.2 creation": "ndarray zeros ones full zeros_like empty_like rand random_seed "
                     "shared_constant shared_identity_matrix",
    "§3.3 iterators": "affine_range sequential_range static_range dynamic_range fori_loop "
                      "while_loop ds program_id num_programs program_ndim no_reorder",
    "§3.4 binary": "add subtract multiply divide power maximum minimum mod fmod abs_max abs_min",
    "§3.4 unary": "abs negative sign trunc floor ceil square reciprocal sqrt rsqrt exp log sin "
                  "cos tan arctan tanh",
    "§3.4 activations": "sigmoid relu gelu gelu_dx gelu_apprx_tanh gelu_apprx_sigmoid "
                        "gelu_apprx_sigmoid_dx silu silu_dx erf erf_dx softplus mish prelu "
                        "bypass average",
    "§3.4 comparison/logical/bitwise": "equal not_equal greater greater_equal less less_equal "
                                       "logical_and logical_or logical_xor logical_not "
                                       "bitwise_and bitwise_or bitwise_xor invert left_shift "
                                       "right_shift where",
    "§3.5 reductions": "sum max min mean prod var all softmax rms_norm dropout matmul "
                       "transpose",
    "§3.7 dtypes": "bool_ int8 int16 int32 uint8 uint16 uint32 float16 float32 bfloat16 "
                   "tfloat32 float8_e4m3 float8_e5m2 float8_e4m3fn float8_e8m0fnu "
                   "float8_e5m2_x4 float8_e4m3fn_x4 float4_e2m1fn_x4 fp32 bfp16 tile_size",
    "§8 classes": "NkiTensor NKIObject",
    "§10 tile grids (0.7)": "tiles blocks alloc_tiles alloc_blocks NkiGrid NkiTileGrid "
                            "NkiBlockGrid",
    "§10 stream buffers (0.7)": "alloc_stream_buffers NkiStreamBuffers",
}

ISA = {
    "§4.1 tensor engine": "nc_matmul nc_matmul_mx nc_transpose",
    "§4.1 scalar engine": "activation activation_reduce activate2",
    "§4.1 vector engine": "tensor_tensor tensor_scalar scalar_tensor_tensor tensor_scalar_reduce "
                          "tensor_scalar_cumulative tensor_reduce tensor_partition_reduce "
                          "tensor_tensor_scan tensor_copy tensor_copy_predicated reciprocal "
                          "exponential memset bn_stats bn_aggr max8 nc_find_index8 "
                          "nc_match_replace8 nc_stream_shuffle dropout quantize_mx",
    "§4.1 gpsimd": "iota affine_select range_select select_reduce local_gather nc_n_gather "
                   "sequence_bounds nonzero_with_count topk",
    "§4.1 dma": "dma_copy dma_transpose dma_compute",
    "§4.1 rng": "rng rand2 set_rng_seed rand_set_state rand_get_state",
    "§4.1 cross-core": "core_barrier sendrecv",
    "§10 deprecated LNC spellings (0.8)": "sendrecv_compute",
    "§1.5/§4.1 registers": "register_alloc register_move register_load register_store",
    "§4.2 enums": "engine reduce_cmd dge_mode oob_mode matmul_perf_mode nc_version dma_engine "
                  "tensor_engine vector_engine scalar_engine gpsimd_engine unknown_engine "
                  "get_nc_version get_nc_sub_version fp32",
}

COLLECTIVES = {
    "§2 nki.collectives": "all_reduce all_gather all_gather_v reduce_scatter all_to_all "
                          "all_to_all_v collective_permute collective_permute_implicit "
                          "collective_permute_implicit_reduce rank_id ReplicaGroup",
    "§10 prepare/trigger (0.7)": "all_to_all_v_prepare all_to_all_v_trigger "
                                 "all_gather_v_prepare all_gather_v_trigger",
}

LNC = {"§10 nki.lnc (0.8)": "core_barrier sendrecv sendrecv_compute"}

COMPILER = {
    "§10 nki.compiler (0.7/0.8)": "CompileConfig SpecializationConfig Allocation "
                                  "AddressRotation OptLevel AllocationMode "
                                  "SchedulingHeuristic",
}

TOP = {"§10 nki (0.7)": "jit simulate cpu_simulate multi_rank_simulate multi_rank_execute"}

# CompileConfig's options in AWS's reference (2026-11): each is a field of ours
COMPILE_OPTIONS = ("allocation scheduling opt_level experimental_allocation_mode "
                   "experimental_scheduling_heuristic address_rotation barrier_check "
                   "dead_code_elim nki_alloc_fallback sbuf_allocation_fallback "
                   "non_ssa_legalization prefetch_auto split_reused_buffers tensor_copy_elim "
                   "dma_copy_elim element_widening engine_balancing register_load_reuse "
                   "remove_unused_instructions remove_overwritten_writes")

# the members AWS's reference lists for each nki.compiler enum
ENUM_MEMBERS = {"Allocation": "COLORING LINEAR", "OptLevel": "O0 O1 O2",
                "AllocationMode": "RING FAST MAX_REUSE",
                "SchedulingHeuristic": "ASAP CRITICAL_PATH DMA_PREFETCH TRIVIAL"}

# the attributes AWS's reference lists for the grid classes
GRID_ATTRIBUTES = ("buffer data dtype element_shape index_step_elements "
                   "is_data_representable is_remainder shape tile_shape")

# Names the spec lists that the current dialect does not have (each with the reason).
EXCLUDED = {
    "nki.language.atomic_rmw": "§3.1: removed from the current dialect",
    "nki.language.static_cast": "§3.2: old dialect only",
    "nki.language.finfo": "§3.2: old dialect only",
    "nki.language.arange": "§3.3/§3.6: old dialect only (nki.legacy)",
    "nki.language.mgrid": "§3.3/§3.6: old dialect only (nki.legacy)",
    "nki.language.par_dim": "§3.3/§3.6: old dialect only (nki.legacy)",
    "nki.language.nc": "§3.3/§3.6: old dialect only",
    "nki.language.spmd_dim": "§3.3/§3.6: old dialect only",
    "nki.language.loop_reduce": "§3.5/§3.6: old dialect only",
    "nki.language.all_reduce": "§3.5/§3.6: old dialect only (now nki.collectives.all_reduce)",
    "nki.isa.tensor_copy_dynamic_src": "§4.1: removed in 0.4.0 (use .ap(scalar_offset=))",
    "nki.isa.tensor_copy_dynamic_dst": "§4.1: removed in 0.4.0 (use .ap(scalar_offset=))",
    "nki.isa.builtin_custom_op": "§4.1: old dialect only, undocumented",
}


def _cases():
    for module, groups in (("nki.language", LANGUAGE), ("nki.isa", ISA),
                           ("nki.collectives", COLLECTIVES), ("nki.lnc", LNC),
                           ("nki.compiler", COMPILER), ("nki", TOP)):
        for section, names in groups.items():
            for name in names.split():
                yield pytest.param(module, name, id=f"{module}.{name}[{section}]")


@pytest.mark.parametrize("module,name", list(_cases()))
def test_spec_name_exists(module, name):
    assert f"{module}.{name}" not in EXCLUDED, "listed both as expected and excluded"
    mod = importlib.import_module(module)
    assert hasattr(mod, name), f"{module} lacks {name!r} (spec, see the test's section id)"


def test_exclusions_are_really_absent_or_legacy():
    """An excluded name that exists in the current namespace should move back to the lists."""
    for full in EXCLUDED:
        module, name = full.rsplit(".", 1)
        assert not hasattr(importlib.import_module(module), name), f"{full} exists now"


def test_compile_config_options_and_enums():
    from dataclasses import fields

    from nki import compiler

    ours = {f.name for f in fields(compiler.CompileConfig)}
    missing = set(COMPILE_OPTIONS.split()) - ours
    assert not missing, f"CompileConfig lacks {sorted(missing)}"
    assert [f.name for f in fields(compiler.SpecializationConfig)] == \
        ["allow_nested_config_override"]
    for enum_name, members in ENUM_MEMBERS.items():
        assert [m.name for m in getattr(compiler, enum_name)] == members.split(), enum_name


def test_grid_classes_have_the_documented_attributes():
    import nki.language as nl

    for cls in (nl.NkiGrid, nl.NkiTileGrid, nl.NkiBlockGrid):
        missing = [a for a in GRID_ATTRIBUTES.split() if not hasattr(cls, a)]
        assert not missing, f"{cls.__name__} lacks {missing}"
    assert hasattr(nl.NkiBlockGrid, "block_shape")
    assert issubclass(nl.NkiTileGrid, nl.NkiGrid) and issubclass(nl.NkiBlockGrid, nl.NkiGrid)
    assert hasattr(nl.NkiStreamBuffers, "num_slots")
