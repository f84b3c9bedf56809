"""Seeded, dtype-aware input factories.

Every factory draws in float64 from ``numpy.random.default_rng(seed)`` and rounds once, to
nearest even, into the target dtype: the array it returns holds only values of that dtype,
so a kernel and a float64 reference see *the same* numbers and any difference is the
kernel's. Values beyond a narrow format's range are clipped to its largest finite value
first (fp8 e4m3 stops at 240), so no factory ever produces Inf or NaN.

bf16/fp8 arrays are numpy arrays of ml_dtypes types; ``as_torch=True`` returns a torch tensor
with exactly the same values instead (torch has no IEEE-style fp8 e4m3, so that one is
numpy-only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nki.testing.convert import as_numpy, is_torch, to_torch
from nki.testing.dtypes import finfo, is_float, resolve_dtype

Seed = int | Sequence[int] | np.random.Generator
DISTRIBUTIONS = ("uniform", "normal", "integer")


def _rng(seed: Seed) -> np.random.Generator:
    # a Generator passes through (the nki_rng fixture); ints and int sequences seed a new one
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def _finish(values: np.ndarray, dtype: Any, as_torch: bool):
    """Round float64 ``values`` into ``dtype`` (clipped to its finite range) and package."""
    dt = resolve_dtype(dtype)
    if is_float(dt):
        top = float(finfo(dt).max)
        out = np.clip(values, -top, top).astype(dt)
    else:
        info = np.iinfo(dt) if dt != np.bool_ else None
        vals = np.rint(values)
        out = (vals != 0) if info is None else np.clip(vals, info.min, info.max).astype(dt)
    return to_torch(out) if as_torch else out


def rand(shape: int | Sequence[int], dtype: Any = "float32", *, seed: Seed = 0,
         low: float = 0.0, high: float = 1.0, distribution: str = "uniform",
         as_torch: bool = False):
    """Random values of ``dtype``, reproducible from ``seed``.

    Args:
        shape: the array shape.
        dtype: any spelling (``"bf16"``, ``nl.bfloat16``, ``np.float32``, ``torch.float16``).
        seed: an int (or int sequence) seeding a fresh generator, or a ``Generator``.
        low, high: the range. ``"uniform"``: values in ``[low, high]`` (``high`` itself can
            appear after rounding); ``"normal"``: mean ``(low + high) / 2`` and standard
            deviation ``(high - low) / 2``; ``"integer"``: whole numbers in ``[low, high]``
            — sums and products of these are exact in fp32, which makes bit-exact kernel
            tests possible.
        distribution: ``"uniform"``, ``"normal"`` or ``"integer"``.
        as_torch: return a torch tensor instead of a numpy array.

    Example:
        >>> x = rand((128, 512), "bf16", seed=1, low=-1, high=1)   # ml_dtypes bfloat16 array
    """
    rng, shp = _rng(seed), _shape(shape)
    if distribution == "uniform":
        values = rng.uniform(low, high, shp)
    elif distribution == "normal":
        values = rng.normal((low + high) / 2, (high - low) / 2, shp)
    elif distribution == "integer":
        values = rng.integers(int(np.ceil(low)), int(np.floor(high)) + 1, shp).astype(np.float64)
    else:
        raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, not {distribution!r}")
    return _finish(values, dtype, as_torch)


def randn(shape: int | Sequence[int], dtype: Any = "float32", *, seed: Seed = 0,
          mean: float = 0.0, std: float = 1.0, as_torch: bool = False):
    """Normal values ``N(mean, std**2)`` rounded into ``dtype``; see :func:`rand`.

    Example:
        >>> q = randn((256, 64), "float32", seed=7)
    """
    values = _rng(seed).normal(mean, std, _shape(shape))
    return _finish(values, dtype, as_torch)


def randint(shape: int | Sequence[int], low: int, high: int, dtype: Any = "int32", *,
            seed: Seed = 0, as_torch: bool = False):
    """Integers in ``[low, high)`` (numpy's convention) — index tensors, gather offsets.

    Example:
        >>> idx = randint((128, 1), 0, 1000, "int32", seed=3)
    """
    dt = resolve_dtype(dtype)
    if not is_float(dt) and dt != np.bool_:
        info = np.iinfo(dt)
        if low < info.min or high - 1 > info.max:
            raise ValueError(f"randint: [{low}, {high}) does not fit {dt}")
    values = _rng(seed).integers(low, high, _shape(shape)).astype(np.float64)
    return _finish(values, dt, as_torch)


def randperm(n: int, dtype: Any = "int32", *, seed: Seed = 0, as_torch: bool = False):
    """A random permutation of ``0..n-1`` — distinct indices for scatters.

    Example:
        >>> perm = randperm(1000, seed=0)
    """
    return _finish(_rng(seed).permutation(n).astype(np.float64), dtype, as_torch)


def rand_like(x: Any, *, seed: Seed = 0, low: float = 0.0, high: float = 1.0,
              distribution: str = "uniform", dtype: Any = None):
    """:func:`rand` with the shape (and dtype, unless given) of ``x``; a torch tensor in gives
    a torch tensor out.

    Example:
        >>> noise = rand_like(x, seed=2, low=-0.01, high=0.01)   # doctest: +SKIP
    """
    arr = as_numpy(x)
    return rand(arr.shape, arr.dtype if dtype is None else dtype, seed=seed, low=low,
                high=high, distribution=distribution, as_torch=is_torch(x))
