"""Readable pytest parametrisation for kernel tests: ``s256x512``, ``K256-M128-N512``,
``bf16`` instead of ``shape0``/``dtype1``. pytest is imported only when a decorator is built."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nki.testing.dtypes import dtype_name


def param_id(value: Any) -> str:
    """A short test id for a parameter value: shapes ``256x512``, dtypes ``bf16``, booleans
    and other values as ``str``. Usable as ``ids=param_id`` in ``pytest.mark.parametrize``.

    Example:
        >>> param_id((256, 512)), param_id("bfloat16")
        ('256x512', 'bf16')
    """
    if isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
        return "x".join(str(v) for v in value)
    try:
        return dtype_name(value)
    except TypeError:
        return str(value)


def _shape_id(names: Sequence[str] | None, shape: Sequence[int]) -> str:
    if names and len(names) == len(shape) and len(names) > 1:
        return "-".join(f"{n}{v}" for n, v in zip(names, shape))
    return "s" + param_id(tuple(shape))


def parametrize_shapes(argnames: str, shapes: Sequence[Sequence[int]]):
    """``pytest.mark.parametrize`` over shapes with readable ids.

    ``argnames`` is one name (each shape is passed as a tuple, id ``s256x512``) or several
    comma-separated names (each shape is unpacked, id ``K256-M128-N512``).

    Example:
        >>> @parametrize_shapes("shape", [(128, 512), (200, 70)])     # doctest: +SKIP
        ... def test_softmax(shape): ...
        >>> @parametrize_shapes("K,M,N", [(256, 128, 512)])            # doctest: +SKIP
        ... def test_matmul(K, M, N): ...
    """
    import pytest

    names = [n.strip() for n in argnames.split(",") if n.strip()]
    values = [tuple(s) for s in shapes]
    ids = [_shape_id(names if len(names) > 1 else None, s) for s in values]
    return pytest.mark.parametrize(argnames, values, ids=ids)


def parametrize_dtypes(argname: str, dtypes: Sequence[Any]):
    """``pytest.mark.parametrize`` over dtypes (any spelling) with ids ``fp32``, ``bf16``.

    Example:
        >>> @parametrize_dtypes("dtype", ["float32", "bfloat16"])     # doctest: +SKIP
        ... def test_softmax(dtype): ...
    """
    import pytest

    return pytest.mark.parametrize(argname, list(dtypes), ids=[dtype_name(d) for d in dtypes])
