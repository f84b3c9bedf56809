"""``assert_close``: compare a result with a reference under the dtype's tolerance, and say
exactly what is wrong when it does not match."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nki.testing.convert import as_numpy
from nki.testing.dtypes import dtype_name, is_float
from nki.testing.tolerance import Tolerance, coarser, tolerance

WORST = 5   # offenders listed in a report


@dataclass
class Comparison:
    """The outcome of comparing two arrays element by element.

    Attributes:
        ok: every element is within tolerance (and NaN/Inf agree).
        dtype: short name of the dtype whose tolerance was used.
        tol: the tolerance applied.
        shape: the compared shape.
        total: number of elements.
        bad: elements out of tolerance, NaN/Inf mismatches included.
        max_abs: (error, index) of the largest absolute error among finite pairs.
        max_rel: (error, index) of the largest relative error (expected != 0).
        nonfinite: (description, count, first index, actual, expected there) per kind of
            NaN/Inf mismatch.
        worst: (index, actual, expected, abs error) of the worst finite offenders.
    """

    ok: bool
    dtype: str
    tol: Tolerance
    shape: tuple[int, ...]
    total: int
    bad: int = 0
    max_abs: tuple[float, tuple] | None = None
    max_rel: tuple[float, tuple] | None = None
    nonfinite: list[tuple[str, int, tuple, float, float]] = field(default_factory=list)
    worst: list[tuple[tuple, float, float, float]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.ok

    def report(self, msg: str = "") -> str:
        """A readable account of the mismatch (or of the match)."""
        return _format(self, msg)


def _index(flat: int, shape: tuple[int, ...]) -> tuple:
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


def _as_float64(x: np.ndarray) -> np.ndarray:
    # ml_dtypes arrays convert exactly; bool/int exactly up to 2**53
    return x.astype(np.float64)


def _nonfinite(a: np.ndarray, e: np.ndarray, equal_nan: bool):
    """Masks and descriptions of NaN/Inf disagreements."""
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    inf_a, inf_e = np.isinf(a), np.isinf(e)
    kinds = [
        ("actual NaN where expected is not", nan_a & ~nan_e),
        ("expected NaN where actual is not", nan_e & ~nan_a),
        ("Inf where the other is finite or an opposite Inf",
         (inf_a | inf_e) & ~nan_a & ~nan_e & (a != e)),
    ]
    if not equal_nan:
        kinds.append(("both NaN (equal_nan=False)", nan_a & nan_e))
    return kinds


def compare(actual: Any, expected: Any, dtype: Any = None, rtol: float | None = None,
            atol: float | None = None, equal_nan: bool = True) -> Comparison:
    """Compare element by element; see :func:`assert_close` for the arguments."""
    a_raw, e_raw = as_numpy(actual), as_numpy(expected)
    if a_raw.shape != e_raw.shape:
        raise AssertionError(f"assert_close: shape mismatch: actual {a_raw.shape} vs "
                             f"expected {e_raw.shape}")
    if dtype is None:
        dtype = coarser(a_raw.dtype, e_raw.dtype) if is_float(e_raw.dtype) else a_raw.dtype
    base = tolerance(dtype)
    tol = Tolerance(base.rtol if rtol is None else float(rtol),
                    base.atol if atol is None else float(atol))
    a, e = _as_float64(a_raw), _as_float64(e_raw)
    out = Comparison(ok=True, dtype=dtype_name(dtype), tol=tol, shape=a.shape, total=a.size)
    bad_nonfinite = np.zeros(a.shape, bool)
    for text, mask in _nonfinite(a, e, equal_nan):
        n = int(mask.sum())
        if n:
            k = int(np.flatnonzero(mask)[0])
            out.nonfinite.append((text, n, _index(k, a.shape), float(a.flat[k]),
                                  float(e.flat[k])))
            bad_nonfinite |= mask
    _finite_errors(out, a, e, bad_nonfinite)
    out.ok = out.bad == 0
    return out


def _finite_errors(out: Comparison, a: np.ndarray, e: np.ndarray, bad_nonfinite) -> None:
    """Fill the error statistics of ``out`` from the pairs where both sides are finite."""
    finite = np.isfinite(a) & np.isfinite(e)
    with np.errstate(invalid="ignore"):            # inf - inf where not both finite
        err = np.where(finite, np.abs(a - e), 0.0)
    allowed = out.tol.atol + out.tol.rtol * np.abs(np.where(finite, e, 0.0))
    bad = finite & (err > allowed)
    out.bad = int(bad.sum()) + int(bad_nonfinite.sum())
    if finite.any():
        i = int(np.argmax(err))
        out.max_abs = (float(err.flat[i]), _index(i, a.shape))
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(finite & (e != 0), err / np.abs(e), 0.0)
        if (finite & (e != 0)).any():
            j = int(np.argmax(rel))
            out.max_rel = (float(rel.flat[j]), _index(j, a.shape))
    if bad.any():
        # rank by how many times over its allowance each element is (errors of an exact
        # comparison rank by size)
        score = np.where(bad, err / np.maximum(allowed, np.finfo(np.float64).tiny), -1.0)
        order = np.argsort(score, axis=None, kind="stable")[::-1][:WORST]
        out.worst = [(_index(int(k), a.shape), float(a.flat[k]), float(e.flat[k]),
                      float(err.flat[k])) for k in order if bad.flat[k]]


def _fmt_index(idx: tuple) -> str:
    return "(" + ", ".join(str(i) for i in idx) + ")" if len(idx) != 1 else f"({idx[0]},)"


def _format(c: Comparison, msg: str) -> str:
    pct = 100.0 * c.bad / max(c.total, 1)
    head = "assert_close: " + ("OK" if c.ok else "MISMATCH")
    lines = [f"{head} - {c.bad} of {c.total} elements ({pct:.3g}%) out of tolerance; shape "
             f"{c.shape}; {c.dtype}: rtol={c.tol.rtol:.3g}, atol={c.tol.atol:.3g} "
             f"(|actual - expected| <= atol + rtol * |expected|)"]
    if c.max_abs is not None:
        lines.append(f"  max abs error {c.max_abs[0]:.6g} at {_fmt_index(c.max_abs[1])}")
    if c.max_rel is not None:
        lines.append(f"  max rel error {c.max_rel[0]:.6g} at {_fmt_index(c.max_rel[1])}")
    for text, n, idx, av, ev in c.nonfinite:
        lines.append(f"  NaN/Inf mismatch: {text}: {n} element(s), first at {_fmt_index(idx)} "
                     f"(actual {av:.8g}, expected {ev:.8g})")
    if c.worst:
        lines.append("  worst offenders:")
        lines.append(f"    {'index':>16s} {'actual':>15s} {'expected':>15s} {'abs err':>11s} "
                     f"{'rel err':>11s}")
        for idx, av, ev, err in c.worst:
            rel = f"{err / abs(ev):11.4g}" if ev != 0 else f"{'inf':>11s}"
            lines.append(f"    {_fmt_index(idx):>16s} {av:15.8g} {ev:15.8g} {err:11.4g} {rel}")
    if msg:
        lines.append(f"  {msg}")
    return "\n".join(lines)


def assert_close(actual: Any, expected: Any, dtype: Any = None, rtol: float | None = None,
                 atol: float | None = None, msg: str = "", *,
                 equal_nan: bool = True) -> Comparison:
    """Assert ``|actual - expected| <= atol + rtol * |expected|`` element by element.

    Args:
        actual: the result (numpy, ml_dtypes, torch tensor, or anything ``np.asarray`` takes).
        expected: the reference, same shape (often float64).
        dtype: whose tolerance to use (any spelling: ``"bf16"``, ``nl.bfloat16``, ...).
            Default: the coarser of the two arrays' dtypes, so a bf16 result checked against
            a float64 reference gets bf16's tolerance. Integer results compare exactly.
        rtol, atol: override the table's values (see ``nki.testing.tolerance``).
        msg: appended to the failure report.
        equal_nan: NaN in the same place on both sides counts as equal.

    Returns:
        The :class:`Comparison` (truthy), for callers that want the statistics.

    Raises:
        AssertionError: with a report — max abs/rel error and where, how many elements are
            out of tolerance, the worst offenders, and NaN/Inf mismatches.

    Example:
        >>> _ = assert_close(np.float32(1.0) + np.float32(1e-6), 1.0)   # within fp32's rtol
    """
    result = compare(actual, expected, dtype, rtol, atol, equal_nan)
    if not result.ok:
        raise AssertionError(result.report(msg))
    return result


def assert_bitwise_equal(actual: Any, expected: Any, msg: str = "") -> None:
    """Assert two arrays have the same shape, dtype and bytes (NaN payloads included).

    Raises:
        AssertionError: naming the first differing element and both values.
    """
    a, e = as_numpy(actual), as_numpy(expected)
    if a.shape != e.shape or a.dtype != e.dtype:
        raise AssertionError(f"assert_bitwise_equal: {a.dtype}{list(a.shape)} vs "
                             f"{e.dtype}{list(e.shape)} {msg}".rstrip())
    width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    ab = np.ascontiguousarray(a).reshape(-1).view(width)
    eb = np.ascontiguousarray(e).reshape(-1).view(width)
    diff = ab != eb
    if diff.any():
        k = int(np.flatnonzero(diff)[0])
        idx = _index(k, a.shape)
        raise AssertionError(
            f"assert_bitwise_equal: {int(diff.sum())} of {a.size} elements differ; first at "
            f"{_fmt_index(idx)}: {a.reshape(-1)[k]} (0x{int(ab[k]):x}) vs {e.reshape(-1)[k]} "
            f"(0x{int(eb[k]):x}) {msg}".rstrip())
