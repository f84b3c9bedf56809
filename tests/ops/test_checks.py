"""The machine's checks, end to end: capacity per target, address= aliasing, tile_size per
target, outputs never written, accumulate on unwritten PSUM, the precise-fp switch, and race
checks on kernels that run. Each error asserts its code, its words and the user's file:line."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.errors import (
    NkiCapacityError,
    NkiRaceWarning,
    NkiSpillWarning,
    NkiUnsupportedError,
    NkiValidationError,
)
from nki.ir.target import TARGETS
from nki.jit.allocate import allocate
from nki.jit.specialize import trace_core

BF16 = ml_dtypes.bfloat16
TARGET_NAMES = ("trn1", "trn2", "trn3")


def _line(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(lines) if text in s)


# ----- SBUF capacity: 95% runs, 105% spills (or fails without spilling), per target --

TILE_F = 8192          # fp32 elements per partition of each full tile (32 KiB)


def _fill_sbuf(x, nbytes):
    """Keep ``nbytes`` per partition of SBUF live at once (memset every tile, then read them
    all), and return each tile's first column."""
    sizes = [TILE_F * 4] * (nbytes // (TILE_F * 4))
    if nbytes % (TILE_F * 4):
        sizes.append(nbytes % (TILE_F * 4) // 4 * 4)
    out = nl.ndarray((128, len(sizes)), dtype=nl.float32, buffer=nl.shared_hbm)
    tiles = []
    for i, size in enumerate(sizes):
        t = nl.ndarray((128, size // 4), dtype=nl.float32, buffer=nl.sbuf)   # the big tiles
        nisa.memset(dst=t, value=float(i))
        tiles.append(t)
    for i, t in enumerate(tiles):
        nisa.dma_copy(dst=out[:, i:i + 1], src=t[:, 0:1])
    return out


@pytest.mark.parametrize("target", TARGET_NAMES)
def test_sbuf_95_percent_runs(backend, target):
    cap = TARGETS[target].sbuf_bytes_per_partition
    x = np.zeros((1, 1), np.float32)
    y = nki.jit(_fill_sbuf, backend=backend, target=target)(x, int(cap * 0.95))
    np.testing.assert_array_equal(y, np.broadcast_to(np.arange(y.shape[1]), y.shape))


@pytest.mark.parametrize("target", TARGET_NAMES)
def test_sbuf_105_percent_spills_and_computes(backend, target):
    cap = TARGETS[target].sbuf_bytes_per_partition
    x = np.zeros((1, 1), np.float32)
    with pytest.warns(NkiSpillWarning, match=rf"\[nki_sbuf_spill\] SBUF on {target}: \d+ "
                      rf"B/partition are live at test_checks.py:\d+, over the {cap} it has"):
        y = nki.jit(_fill_sbuf, backend=backend, target=target, cache=False)(
            x, int(cap * 1.05))
    np.testing.assert_array_equal(y, np.broadcast_to(np.arange(y.shape[1]), y.shape))


@pytest.mark.parametrize("target", TARGET_NAMES)
def test_sbuf_105_percent_fails_where_the_allocator_does_not_spill(target):
    cap = TARGETS[target].sbuf_bytes_per_partition
    line = _line(_fill_sbuf, "the big tiles")
    kernel = nki.jit(_fill_sbuf, target=target, cache=False)
    args = (np.zeros((1, 1), np.float32), int(cap * 1.05))
    program = trace_core(_fill_sbuf, args, {}, kernel._tensor_args(args), TARGETS[target], 0,
                         1, kernel.settings())[0]
    with pytest.raises(NkiCapacityError, match=rf"\[nki_sbuf_capacity_exceeded\] SBUF overflow "
                       rf"on {target}: tensor 't' needs \d+ B/partition while \d+ of {cap} "
                       r"B/partition are live \(short by \d+ B\)(.|\n)*rule: live SBUF tensors "
                       r"exceed the SBUF capacity(.|\n)*"
                       rf"at test_checks.py:{line}: +t = nl.ndarray"):
        allocate(program, TARGETS[target], spill=False)


def _psum_banks(x, n):
    """n one-bank PSUM tiles, each read together with the last one: every read depends on
    the last fill, so all n are live then in any schedule."""
    out = nl.ndarray((128, n), dtype=nl.float32, buffer=nl.shared_hbm)
    banks = []
    for i in range(n):
        p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)    # one bank each
        nisa.memset(dst=p, value=float(i))
        banks.append(p)
    last = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=last, src=banks[-1][:, 0:1])
    for i, p in enumerate(banks):
        t = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=t, data1=p[:, 0:1], data2=last, op=nl.add)
        nisa.dma_copy(dst=out[:, i:i + 1], src=t)
    return out


@pytest.mark.parametrize("target", TARGET_NAMES)
def test_psum_eight_banks_fit_nine_do_not(target):
    x = np.zeros((1, 1), np.float32)
    nki.jit(_psum_banks, target=target, cache=False).specialize(x, 8)
    line = _line(_psum_banks, "one bank each")
    with pytest.raises(NkiCapacityError, match=r"\[nki_psum_capacity_exceeded\] PSUM overflow "
                       rf"on {target}(.|\n)*at test_checks.py:{line}"):
        nki.jit(_psum_banks, target=target, cache=False).specialize(x, 9)


# ----- address= aliasing (beyond tests/ops/test_address.py) ----------------------------------

def _partial_alias(x):
    # b is a [64, 32] int32 window placed inside a: partitions 32..95, bytes 128..255 of
    # a's rows, so b reads a[32:96, 32:64] as bits
    out = nl.ndarray((64, 32), dtype=nl.int32, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, address=(0, 4096))
    b = nl.ndarray((64, 32), dtype=nl.int32, buffer=nl.sbuf, address=(32, 4096 + 128))
    nisa.dma_copy(dst=a, src=x)
    nisa.dma_copy(dst=out, src=b)
    return out


def test_partial_alias_across_partitions_and_bytes(backend):
    x = np.random.default_rng(5).standard_normal((128, 64)).astype(np.float32)
    y = nki.jit(_partial_alias, backend=backend)(x)
    np.testing.assert_array_equal(y, x[32:96, 32:64].view(np.int32))


def _psum_alias(x):
    # a bf16 PSUM view of an fp32 PSUM bank: writes through one are reads through the other
    out = nl.ndarray((128, 16), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    p = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.psum, address=(0, 2048))
    q = nl.ndarray((128, 16), dtype=nl.bfloat16, buffer=nl.psum, address=(0, 2048))
    t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_copy(dst=p, src=t)
    s = nl.ndarray((128, 16), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=s, src=q)
    nisa.dma_copy(dst=out, src=s)
    return out


def test_psum_alias_reinterprets_bits(backend):
    x = np.random.default_rng(6).standard_normal((128, 8)).astype(np.float32)
    y = nki.jit(_psum_alias, backend=backend, target="trn3")(x)
    np.testing.assert_array_equal(y.view(np.uint16), x.view(np.uint16))


# ----- nl.tile_size per target ---------------------------------------------------------------

_SIZES = ("pmax", "psum_fmax", "psum_bank_fmax", "psum_bank_fmax_bytes", "psum_num_banks",
          "gemm_stationary_fmax", "gemm_moving_fmax", "bn_stats_fmax", "psum_min_align",
          "sbuf_min_align", "total_available_sbuf_size", "sbuf_fmax_bytes", "sbuf_size_bytes")
_EXPECTED_SBUF = {"trn1": 180224, "trn2": 212984, "trn3": 245752}


def _read_tile_sizes(seen: dict):
    def kernel(x):
        seen.update({k: getattr(nl.tile_size, k) for k in _SIZES})
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        return out
    return kernel


def _expected(target: str) -> dict:
    sbuf = _EXPECTED_SBUF[target]
    return {"pmax": 128, "psum_fmax": 512, "psum_bank_fmax": 512, "psum_bank_fmax_bytes": 2048,
            "psum_num_banks": 8, "gemm_stationary_fmax": 128, "gemm_moving_fmax": 512,
            "bn_stats_fmax": 512, "psum_min_align": 4, "sbuf_min_align": 1,
            "total_available_sbuf_size": sbuf, "sbuf_fmax_bytes": sbuf,
            "sbuf_size_bytes": sbuf * 128}


@pytest.mark.parametrize("target", TARGET_NAMES)
def test_tile_size_per_target_keyword(target):
    seen: dict = {}
    nki.jit(_read_tile_sizes(seen), target=target, cache=False).specialize(
        np.zeros((1, 1), np.float32))
    assert seen == _expected(target)


@pytest.mark.parametrize("env,target", [("trn1", "trn1"), ("inf2", "trn1"), ("gen3", "trn2"),
                                        ("trn2", "trn2"), ("gen4", "trn3"), ("", "trn3")])
def test_tile_size_follows_platform_target_override(monkeypatch, env, target):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", env)
    seen: dict = {}
    nki.jit(_read_tile_sizes(seen), cache=False).specialize(np.zeros((1, 1), np.float32))
    assert seen == _expected(target)


def test_target_keyword_wins_over_environment(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    seen: dict = {}
    nki.jit(_read_tile_sizes(seen), target="trn1", cache=False).specialize(
        np.zeros((1, 1), np.float32))
    assert seen["total_available_sbuf_size"] == 180224


def _wide_moving(a, b):
    out = nl.ndarray((128, b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    at = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    bt = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=at, src=a)
    nisa.dma_copy(dst=bt, src=b)
    ps = nl.ndarray((128, b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=at, moving=bt)    # the matmul
    res = nl.ndarray((128, b.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=ps)
    nisa.dma_copy(dst=out, src=res)
    return out


@pytest.mark.parametrize("target,ok", [("trn1", False), ("trn2", False), ("trn3", True)])
def test_matmul_moving_limit_is_per_target(target, ok):
    a, b = np.zeros((128, 128), np.float32), np.zeros((128, 1024), np.float32)
    kernel = nki.jit(_wide_moving, target=target, cache=False)
    if ok:
        kernel.specialize(a, b)
        return
    line = _line(_wide_moving, "# the matmul")
    with pytest.raises(NkiValidationError, match=r"\[nki_matmul_free_size_exceeded\] "
                       rf".*moving free size 1024 exceeds the TensorE limit of 512 on {target}"
                       rf"(.|\n)*at test_checks.py:{line}"):
        kernel.specialize(a, b)


def test_partition_limit_per_target():
    def kernel(x):
        nl.ndarray((nl.tile_size.pmax + 1, 4), dtype=nl.float32, buffer=nl.sbuf)   # too tall
    line = _line(kernel, "too tall")
    for target in TARGET_NAMES:
        with pytest.raises(NkiValidationError, match=r"\[err_num_partition_exceed_arch_limit\] "
                           r".*Size of partition dimension 129 exceeds architecture limitation "
                           rf"of 128(.|\n)*at test_checks.py:{line}"):
            nki.jit(kernel, target=target, cache=False).specialize(np.zeros((1, 1), np.float32))


# ----- outputs never written, accumulate on unwritten PSUM -----------------------------------

def test_output_never_written_names_its_creation_line():
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)    # never written
        return out
    line = _line(kernel, "never written")
    with pytest.raises(NkiValidationError, match=r"\[err_tensor_output_not_written_to\] kernel "
                       r"output 't\d+' is never written(.|\n)*rule: a kernel output is never "
                       rf"written(.|\n)*at test_checks.py:{line}"):
        nki.jit(kernel, cache=False).specialize(np.zeros((4, 4), np.float32))


def test_second_output_never_written():
    def kernel(x):
        a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="b_out")
        nisa.dma_copy(dst=a, src=x)
        return a, b
    with pytest.raises(NkiValidationError, match=r"err_tensor_output_not_written_to.*'b_out'"):
        nki.jit(kernel, cache=False).specialize(np.zeros((4, 4), np.float32))


def test_accumulate_true_on_psum_never_written_by_a_matmul_warns():
    def kernel(a, b):
        out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        at = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        bt = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a)
        nisa.dma_copy(dst=bt, src=b)
        ps = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=ps, value=0.0)          # written, but not by a matmul
        nisa.nc_matmul(dst=ps, stationary=at, moving=bt, accumulate=True)   # warns
        res = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=ps)
        nisa.dma_copy(dst=out, src=res)
        return out
    line = _line(kernel, "# warns")
    # NeuronCore-v2/v3 only: v4 accumulates onto memset values (AWS's nc_matmul note)
    with pytest.warns(UserWarning, match=r"\[nki_accumulate_uninitialized\] nisa.nc_matmul: "
                      rf"accumulate=True on PSUM(.|\n)*test_checks.py:{line}"):
        nki.jit(kernel, cache=False, target="trn2").specialize(
            np.zeros((16, 8), np.float32), np.zeros((16, 16), np.float32))


# ----- NKI_PRECISE_FP ------------------------------------------------------------------------

def _bf16_chain(x):
    # fp32 in and out; every intermediate is a bf16 tile
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    for _ in range(3):
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=1.01)
    e = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.activation(dst=e, op=nl.exp, data=t)
    ps = nl.ndarray((x.shape[0], x.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.tensor_copy(dst=ps, src=e)
    nisa.tensor_copy(dst=t, src=ps)
    nisa.dma_copy(dst=out, src=t)
    return out


def _fp32_reference(x: np.ndarray) -> np.ndarray:
    y = x.astype(np.float32)
    for _ in range(3):
        y = (y * np.float32(1.01)).astype(np.float32)
    return np.exp(y.astype(np.float64)).astype(np.float32)


def test_precise_fp_rounds_bf16_tiles_and_imprecise_keeps_fp32(backend, monkeypatch):
    monkeypatch.delenv("NKI_PRECISE_FP", raising=False)
    x = np.random.default_rng(7).standard_normal((64, 32)).astype(np.float32)
    ref = _fp32_reference(x)
    precise = nki.jit(_bf16_chain, backend=backend)(x)
    assert np.abs(precise - ref).max() > 1e-3                 # bf16 rounding shows
    np.testing.assert_array_equal(precise, precise.astype(BF16).astype(np.float32))
    loose = nki.jit(_bf16_chain, backend=backend, precise_fp=False)(x)
    np.testing.assert_allclose(loose, ref, rtol=1e-5, atol=1e-6)
    monkeypatch.setenv("NKI_PRECISE_FP", "0")
    np.testing.assert_array_equal(nki.jit(_bf16_chain, backend=backend)(x), loose)
    kw = nki.jit(_bf16_chain, backend=backend, precise_fp=True)(x)   # keyword wins
    np.testing.assert_array_equal(kw, precise)


def _bf16_io(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    for _ in range(4):
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=1.01, op1=nl.add,
                           operand1=0.001)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_imprecise_fp_keeps_io_dtype_and_rounds_once_at_the_boundary(backend):
    x = np.random.default_rng(8).standard_normal((128, 16)).astype(BF16)
    y = nki.jit(_bf16_io, backend=backend, precise_fp=False)(x)
    assert y.dtype == BF16
    ref = x.astype(np.float32)
    for _ in range(4):
        ref = (ref * np.float32(1.01)).astype(np.float32) + np.float32(0.001)
    np.testing.assert_array_equal(y.view(np.uint16), ref.astype(BF16).view(np.uint16))
    spec = nki.jit(_bf16_io, precise_fp=False, cache=False).specialize(x)
    decls = {t.memory.value: t.dtype.name for t in spec.cores[0].program.tensors}
    assert decls == {"private_hbm": "bfloat16", "shared_hbm": "bfloat16", "sbuf": "float32"}


def test_imprecise_fp_rejects_bit_views_of_widened_tiles():
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=nl.int16, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=out, src=t.view(nl.int16))      # reinterpret
        return out
    line = _line(kernel, "# reinterpret")
    x = np.zeros((4, 4), BF16)
    nki.jit(kernel, cache=False).specialize(x)
    with pytest.raises(NkiUnsupportedError, match=r"\[nki_not_implemented\] .*int16 view of the "
                       rf"bfloat16 tensor(.|\n)*NKI_PRECISE_FP=1(.|\n)*test_checks.py:{line}"):
        nki.jit(kernel, cache=False, precise_fp=False).specialize(x)


# ----- races on kernels that run ------------------------------------------------------------

def test_race_checked_matmul_kernel_runs(backend):
    from nki.kernels.matmul import matmul_lhsT

    rng = np.random.default_rng(9)
    a = rng.standard_normal((256, 128)).astype(np.float32)
    b = rng.standard_normal((256, 192)).astype(np.float32)
    kernel = nki.jit(matmul_lhsT.fn, backend=backend, check_races=True)
    np.testing.assert_allclose(kernel(a, b), a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def _lnc_same_column(x):
    out = nl.ndarray((128, 2), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 1), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out[:, 0:1], src=t)       # both cores write column 0
    return out


def test_lnc_race_is_raised_before_anything_runs():
    line = _line(_lnc_same_column, "both cores write column 0")
    with pytest.raises(NkiValidationError, match=r"\[err_unexpected_output_dependencies\] LNC "
                       r"cores 0 and 1 both write shared_hbm out\[0, 0\]\.\.out\[127, 0\] "
                       rf"\(512 bytes\)(.|\n)*at test_checks.py:{line}"):
        nki.jit(_lnc_same_column, check_races=True)[2](np.zeros((128, 1), np.float32))


def test_lnc_identical_writes_warn_and_run_by_default(backend):
    """AWS's own kernels have both cores store the same values; by default that runs, with a
    warning naming the rule and the line (a fresh warning also when the program is loaded
    from the disk cache), and the result is those values."""
    line = _line(_lnc_same_column, "both cores write column 0")
    x = np.random.default_rng(0).standard_normal((128, 1)).astype(np.float32)
    for _ in range(2):
        with pytest.warns(NkiRaceWarning, match=r"\[err_unexpected_output_dependencies\] LNC "
                          r"cores 0 and 1 both write shared_hbm out\[0, 0\]\.\.out\[127, 0\]"
                          r"(.|\n)*check_races=True makes this an error"
                          rf"(.|\n)*at test_checks.py:{line}"):
            out = nki.jit(_lnc_same_column, backend=backend)[2](x)
        np.testing.assert_array_equal(out[:, 0:1], x)
