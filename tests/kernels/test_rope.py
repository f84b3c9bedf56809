"""Rotary position embedding (half rotation, Llama layout) against torch."""

from __future__ import annotations

import pytest
from nki.kernels.rope import rope, rope_tables, rope_torch

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
