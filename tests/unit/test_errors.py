"""Rule violations found while tracing: each names its code, the rule, and the user's line."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import NkiCapacityError, NkiSpillWarning, NkiTypeError, NkiValidationError
from nki.ir.target import get_target
from nki.jit.allocate import allocate
from nki.jit.specialize import trace_core

X = np.zeros((256, 64), np.float32)


def _spec(fn, *args, **kw):
    return nki.jit(fn, cache=False, **kw).specialize(*args)


def test_api_outside_kernel():
    with pytest.raises(NkiValidationError, match=r"err_nki_api_outside_of_nki_kernel"
                       r"(.|\n)*test_errors.py:\d+"):
        nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)


def test_partition_limit_on_ndarray():
    def k(x):
        nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.sbuf)
    with pytest.raises(NkiValidationError, match=r"err_num_partition_exceed_arch_limit.*"
                       r"256 exceeds(.|\n)*test_errors.py:\d+"):
        _spec(k, X)


def test_partition_mismatch():
    def k(x):
        a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
    with pytest.raises(NkiValidationError, match=r"err_num_partition_mismatch(.|\n)*"
                       r"test_errors.py:\d+: +nisa.tensor_tensor"):
        _spec(k, X)


def test_both_inputs_in_psum():
    def k(x):
        a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_tensor(dst=a, data1=a, data2=a, op=nl.add)
    with pytest.raises(NkiValidationError, match=r"err_unsupported_memory.*both be in PSUM"):
        _spec(k, X)


def test_gpsimd_cannot_touch_psum():
    def k(x):
        a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=a, value=0.0, engine=nisa.gpsimd_engine)
    with pytest.raises(NkiValidationError, match=r"err_unsupported_memory.*GpSimd"):
        _spec(k, X)


def test_dma_rejects_psum():
    def k(x):
        a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.dma_copy(dst=a, src=x[0:128, :])
    with pytest.raises(NkiValidationError, match=r"err_unsupported_memory.*'dst'.*psum"):
        _spec(k, X)


def test_static_out_of_bounds_slice():
    def k(x):
        a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[200:328, :])
    with pytest.raises(NkiValidationError, match=r"err_tensor_access_out_of_bound.*200:328"
                       r"(.|\n)*test_errors.py:\d+"):
        _spec(k, X)


def test_bad_argument_dtype_is_rejected_with_the_accepted_list():
    def k(x):
        return x
    with pytest.raises(NkiTypeError, match=r"nki_unsupported_dtype.*float64.*accepted: "
                       r"float32, bfloat16"):
        _spec(k, np.zeros((4, 4)))


def test_output_never_written():
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        return out
    with pytest.raises(NkiValidationError, match=r"err_tensor_output_not_written_to"):
        _spec(k, X)


def test_shared_hbm_inside_loop():
    def k(x):
        for _ in nl.affine_range(2):
            nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    with pytest.raises(NkiValidationError, match=r"err_shared_hbm_must_in_kernel_level"):
        _spec(k, X)


def test_truth_value_of_a_handle_is_plain_python():
    """``if bias is not None and bias:`` (nki-library's guard) takes the branch, as it does for
    any Python object; a kernel that branches on it still traces."""
    def k(x, bias=None):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        if x and not (bias is not None and bias):
            t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[0:128, :])
            nisa.dma_copy(dst=out[0:128, :], src=t)
        return out
    assert _spec(k, X).num_instructions == 2


@pytest.mark.parametrize("value", ["load", "add", "max"])
def test_truth_value_of_a_computed_tensor(value):
    def k(x):
        t = nl.load(x[0:128, :])
        computed = {"load": lambda: t, "add": lambda: nl.add(t, t),
                    "max": lambda: nl.max(t, axis=1)}[value]()
        if computed:
            pass
    with pytest.raises(NkiValidationError,
                       match=r"err_ambiguous_tensor_truth_value.*computed by the kernel"):
        _spec(k, X)


def _eight_big_tiles(x):
    tiles = []
    for i in nl.affine_range(8):   # 8 x 32 KiB per partition > 240 KiB on trn3
        t = nl.ndarray((128, 8192), dtype=nl.float32, buffer=nl.sbuf, name=f"big{i}")
        nisa.memset(dst=t, value=0.0)
        tiles.append(t)
    for t in tiles:
        nisa.tensor_tensor(dst=t, data1=t, data2=t, op=nl.add)


def test_sbuf_capacity_spills_with_neuronx_cc():
    with pytest.warns(NkiSpillWarning, match=r"nki_sbuf_spill(.|\n)*  big\d \(created at "
                      r"test_errors.py:\d+\): 32768 B/partition x 128 partitions, 1 stores and "
                      r"1 reloads"):
        _spec(_eight_big_tiles, X, target="trn3")


def test_sbuf_capacity_without_spilling():
    kernel = nki.jit(_eight_big_tiles, cache=False, target="trn3")
    program = trace_core(_eight_big_tiles, (X,), {}, kernel._tensor_args((X,)),
                         get_target("trn3"), 0, 1, kernel.settings())[0]
    with pytest.raises(NkiCapacityError, match=r"nki_sbuf_capacity_exceeded.*big7(.|\n)*"
                       r"short by \d+ B(.|\n)*big0: 32768 B/partition"):
        allocate(program, get_target("trn3"), spill=False)


def test_uninitialized_read_is_an_error_when_checked():
    def k(x):
        out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, name="fresh")
        nisa.dma_copy(dst=out, src=a)
        return out
    with pytest.raises(NkiValidationError, match=r"nki_uninitialized_read.*'fresh'"
                       r"(.|\n)*test_errors.py:\d+"):
        _spec(k, X, check_uninit=True)


def test_uninitialized_read_names_the_variable_of_an_unnamed_tile():
    def k(x):
        out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        accumulator = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=out, src=accumulator)
        return out
    with pytest.raises(NkiValidationError, match=r"nki_uninitialized_read.*'accumulator'"
                       r"(.|\n)*test_errors.py:\d+"):
        _spec(k, X, check_uninit=True)
