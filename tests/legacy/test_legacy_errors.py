"""Legacy-dialect rule violations: each raises its NKI error code at the kernel's line."""

from __future__ import annotations

from pathlib import Path

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest

from nki.errors import NkiError

_SOURCE = Path(__file__).read_text().splitlines()


def _line(marker: str) -> int:
    """The line of this file carrying ``# <marker>``."""
    return next(i for i, s in enumerate(_SOURCE, 1) if s.rstrip().endswith(f"# {marker}"))


def _raises(kernel, code: str, marker: str, *args):
    x = np.zeros((256, 64), np.float32)
    with pytest.raises(NkiError) as info:
        nki.jit(kernel).specialize(*(args or (x,)))
    err = info.value
    assert err.code == code, str(err)
    assert err.loc is not None and err.loc.lineno == _line(marker), str(err)
    assert f"test_legacy_errors.py:{_line(marker)}" in str(err)
    return err


def k_1d(x):
    i = nl.arange(128)
    return nl.load(x[i, 0])  # 1d


def test_1d_arange():
    err = _raises(k_1d, "err_1d_arange_not_supported", "1d")
    assert "[:, None]" in str(err)


def k_mixing(x):
    i_p = nl.arange(128)[:, None]
    return nl.load(x[i_p, 0:64])  # mixing


def test_mixing_basic_and_advanced():
    _raises(k_mixing, "err_unsupported_mixing_basic_advanced_tensor_indexing", "mixing")


def k_oob(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    t = nl.load(x[200 + i_p, i_f])  # oob
    nl.store(out[i_p, i_f], value=t)
    return out


def test_out_of_bounds_index_tile():
    err = _raises(k_oob, "err_tensor_access_out_of_bound", "oob")
    assert "200..327" in str(err) and "size 256" in str(err)


def k_oob_mask_too_wide(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    t = nl.load(x[200 + i_p, i_f], mask=(i_p < 100))  # widemask
    nl.store(out[i_p, i_f], value=t)
    return out


def test_mask_that_does_not_cover_the_overhang():
    err = _raises(k_oob_mask_too_wide, "err_tensor_access_out_of_bound", "widemask")
    assert "200..299" in str(err)


def k_triangle(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    t = nl.load(x[i_p, i_f])
    nl.store(out[i_p, i_f], value=nl.exp(t, mask=(i_f < i_p)))  # triangle
    return out


def test_non_rectangular_mask():
    err = _raises(k_triangle, "nki_not_implemented", "triangle")
    assert "rectangle" in str(err) and "affine_select" in str(err)


def k_pstride_sbuf(x):
    t = nl.ndarray((128, 64), dtype=nl.float32)
    i_p, i_f = nl.mgrid[0:64, 0:64]
    t[2 * i_p, i_f] = 0.0  # pstride_sbuf
    return None


def test_partition_stride_on_chip():
    _raises(k_pstride_sbuf, "nki_invalid_view", "pstride_sbuf")


def k_or_mask(x):
    i_p, i_f = nl.mgrid[0:128, 0:64]
    return nl.load(x[i_p, i_f], mask=(i_p < 10) | (i_f < 3))  # ormask


def test_or_in_mask():
    _raises(k_or_mask, "err_unsupported_expression_in_mask", "ormask")


def k_bool_arange(x):
    i_p = nl.arange(128)[:, None]
    if i_p < 64:  # ifarange
        pass


def test_control_flow_on_arange():
    _raises(k_bool_arange, "err_control_flow_condition_depending_on_arange", "ifarange")


def k_assign_index(x):
    i_p = nl.arange(128)[:, None]
    i_p[0, 0] = 1  # assignindex


def test_index_is_read_only():
    _raises(k_assign_index, "err_cannot_assign_to_index", "assignindex")


def k_operator_pbroadcast(x):
    a = nl.load(x[nl.mgrid[0:128, 0:64]])
    b = nl.load(x[nl.mgrid[0:1, 0:64]])
    return a + b  # pbcast


def test_operators_do_not_broadcast_partitions():
    err = _raises(k_operator_pbroadcast, "nki_shape_mismatch", "pbcast")
    assert "partition" in str(err)


def k_shared_hbm_in_loop(x):
    for _ in nl.affine_range(2):
        nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)  # hbmloop


def test_shared_hbm_in_loop():
    _raises(k_shared_hbm_in_loop, "err_shared_hbm_must_in_kernel_level", "hbmloop")


def k_block_unindexed(x):
    t = nl.zeros((2, nl.par_dim(128), 64), dtype=nl.float32)
    return nl.exp(t)  # block


def test_compute_on_block_tensor():
    _raises(k_block_unindexed, "err_failed_to_infer_tile_from_local_tensor", "block")


def k_nested_grid(x):
    return inner[2](x)  # nested


@nki.jit
def inner(x):
    return x


def test_nested_kernel_with_grid():
    _raises(k_nested_grid, "err_nested_kernel_with_spmd_grid", "nested")


def k_affine_select_and(x):
    i_p, i_f = nl.mgrid[0:128, 0:64]
    t = nl.load(x[i_p, i_f])
    return nisa.affine_select((i_p > i_f) & (i_p < 9), t, 0.0)  # selectand


def test_affine_select_single_comparison():
    _raises(k_affine_select_and, "err_unsupported_expression_in_mask", "selectand")


def k_late_rule(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(x[nl.mgrid[0:128, 0:64]])
    b = nl.load(x[nl.mgrid[0:64, 0:64]])
    r = nisa.tensor_tensor(a, b, op=np.add)  # late
    nl.store(out[nl.mgrid[0:128, 0:64]], value=r)
    return out


def test_deferred_rule_error_names_the_call_line():
    """The rule runs when the result is stored, but the error names the call."""
    err = _raises(k_late_rule, "err_num_partition_mismatch", "late")
    assert "nisa.tensor_tensor" in str(err)


def k_loop_reduce_unassigned(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x[0:128, :])
    b = nl.loop_reduce(t, op=np.add, loop_indices=[0])  # unassigned
    nl.store(out, value=b)
    return out


def test_loop_reduce_needs_its_accumulator():
    """It reads its destination, so only ``acc[...] = nl.loop_reduce(...)`` has one."""
    _raises(k_loop_reduce_unassigned, "nki_invalid_argument", "unassigned")


def k_rmw_multiply(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x[0:128, :], dst_rmw_op=np.multiply)  # rmwmul
    return out


def test_dma_rmw_supports_add_only():
    _raises(k_rmw_multiply, "nki_invalid_argument", "rmwmul")
