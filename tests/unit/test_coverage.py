"""Every public name of the current NKI dialect in spec §3 (``nki.language``), §4
(``nki.isa``) and §2 (``nki.collectives``) exists in our namespaces.

The lists are copied by hand from /work/shared/nki-spec.md (sections cited per group); the
only names left out are in EXCLUDED, each with its reason.
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
    "§1.5/§4.1 registers": "register_alloc register_move register_load register_store",
    "§4.2 enums": "engine reduce_cmd dge_mode oob_mode matmul_perf_mode nc_version dma_engine "
                  "tensor_engine vector_engine scalar_engine gpsimd_engine unknown_engine "
                  "get_nc_version get_nc_sub_version fp32",
}

COLLECTIVES = {
    "§2 nki.collectives": "all_reduce all_gather all_gather_v reduce_scatter all_to_all "
                          "all_to_all_v collective_permute collective_permute_implicit "
                          "collective_permute_implicit_reduce rank_id ReplicaGroup",
}

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
                           ("nki.collectives", COLLECTIVES)):
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
