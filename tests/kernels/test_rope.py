"""Rotary position embedding (half rotation, Llama layout) against torch."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from nki.kernels.rope import rope, rope_tables, rope_torch

from nki.errors import NkiRuntimeError
from nki.testing import check_kernel, parametrize_dtypes, parametrize_shapes, randn

NUMBA = ("numba",)


@pytest.mark.parametrize("table", ["full", "half"])
@parametrize_dtypes("dtype", ["float32", "bfloat16"])
@parametrize_shapes("shape", [(200, 64), (3, 130, 128), (2, 2, 300, 96)])
def test_rope(shape, dtype, table):
    """x: [..., S, D]; cos/sin: [S, D] (torch layout) or [S, D/2] (half tables)."""
    S, D = shape[-2:]
    cos, sin = rope_tables(S, D, half=table == "half")
    check_kernel(rope, rope_torch, randn(shape, dtype, seed=1), cos, sin, backends=NUMBA,
                 reference_as="torch")


def test_rope_bf16_tables():
    """bf16 tables (any values: the kernel does not assume cos² + sin² = 1)."""
    check_kernel(rope, rope_torch, randn((4, 130, 64), "bfloat16", seed=2),
                 randn((130, 64), "bfloat16", seed=3), randn((130, 64), "bfloat16", seed=4),
                 backends=NUMBA, reference_as="torch")


def test_rope_both_backends():
    cos, sin = rope_tables(5, 8)
    check_kernel(rope, rope_torch, randn((2, 5, 8), seed=5), cos, sin, reference_as="torch")


@pytest.mark.parametrize("table", ["full", "half"])
@parametrize_dtypes("dtype", ["float32", "bfloat16"])
@parametrize_shapes("shape,offset", [((3, 130, 64), 77), ((2, 1, 96), 301)])
def test_rope_offset(shape, offset, dtype, table):
    """Positions ``offset .. offset+S-1``: the reference indexes the tables at those rows
    (longer tables than S, an odd offset; S = 1 is one decoding step)."""
    S, D = shape[-2:]
    cos, sin = rope_tables(offset + S + 5, D, half=table == "half")
    check_kernel(rope, lambda x, c, s: rope_torch(x, c, s, offset), randn(shape, dtype, seed=6),
                 cos, sin, backends=NUMBA, reference_as="torch",
                 kernel_kwargs={"offset": offset})


def test_rope_offset_at_runtime():
    """A one-element int32 tensor as the offset: read into a register at run time, so one
    compiled program serves every position (both backends)."""
    cos, sin = rope_tables(300, 32)
    x = randn((4, 3, 32), "bfloat16", seed=7)
    for pos in (0, 130, 297):
        off = np.array([pos], np.int32)
        check_kernel(rope, rope_torch, x, cos, sin, off, reference_as="torch")


def test_rope_offset_out_of_range():
    """A static offset past the tables is rejected when traced; a run-time one faults."""
    cos, sin = rope_tables(10, 8)
    x = randn((2, 4, 8), seed=8)
    with pytest.raises(ValueError, match=r"positions 7\.\.10 need tables of at least 11 rows"):
        rope(x, cos, sin, offset=7)
    with pytest.raises(NkiRuntimeError, match="out_of_bounds"):
        rope(x, cos, sin, np.array([7], np.int32))


@pytest.mark.parametrize("dtype", ["float8_e4m3", "float8_e5m2"])
@pytest.mark.parametrize("table", ["full", "half"])
def test_rope_fp8(dtype, table):
    """fp8 storage, fp32 compute: the output is one rounding of the exact result, so it is
    within half an fp8 ulp (relative) of it, or half the smallest subnormal near zero —
    tighter than the table's 2 eps (both bounds checked)."""
    S, D = 130, 64
    cos, sin = rope_tables(S + 3, D, half=table == "half")
    x = randn((2, S, D), dtype, seed=9, std=4.0)
    ref = lambda x, c, s: rope_torch(x, c, s, 3)     # noqa: E731
    check_kernel(rope, ref, x, cos, sin, backends=NUMBA, reference_as="torch",
                 kernel_kwargs={"offset": 3})
    fi = ml_dtypes.finfo(x.dtype)
    check_kernel(rope, ref, x, cos, sin, backends=NUMBA, reference_as="torch",
                 kernel_kwargs={"offset": 3}, rtol=float(fi.eps) / 2,
                 atol=float(fi.smallest_subnormal) / 2)


def test_rope_fp8_tables_both_backends():
    cos, sin = rope_tables(6, 8)
    check_kernel(rope, rope_torch, randn((2, 6, 8), "float8_e5m2", seed=10),
                 cos.astype(ml_dtypes.float8_e4m3), sin.astype(ml_dtypes.float8_e4m3),
                 reference_as="torch")
