"""``check_kernel``: run a kernel on every backend, demand bit-identical results, and compare
them with a reference under the dtype's tolerance."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nki.testing.compare import assert_bitwise_equal, assert_close
from nki.testing.convert import as_numpy, copy_value, is_torch, to_torch
from nki.testing.dtypes import is_float

BACKENDS: tuple[str, ...] = ("numba", "python")


def _on_backend(kernel: Any, backend: str):
    """``kernel`` (a ``nki.jit`` Kernel or a plain kernel function) bound to ``backend``,
    keeping its other ``nki.jit`` options (target, check_uninit, ...)."""
    import nki

    fn = getattr(kernel, "fn", kernel)
    options = dict(getattr(kernel, "options", {}))
    options["backend"] = backend
    bound = nki.jit(fn, **options)
    lnc = getattr(kernel, "_lnc", 1)   # keep a kernel[2] launch
    return bound[lnc] if lnc != 1 else bound


def _as_tuple(out: Any) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def run_backends(kernel: Any, *inputs: Any, backends: Sequence[str] = BACKENDS,
                 **kwargs: Any) -> tuple:
    """Run ``kernel(*inputs, **kwargs)`` on each backend (each on its own copy of the inputs)
    and assert all results are bit-identical.

    Returns:
        The first backend's outputs, always as a tuple.

    Raises:
        AssertionError: naming the backends, the output and the first differing element.
    """
    results = []
    for b in backends:
        args = [copy_value(x) for x in inputs]
        results.append(_as_tuple(_on_backend(kernel, b)(*args, **kwargs)))
    first = results[0]
    for b, outs in zip(backends[1:], results[1:]):
        if len(outs) != len(first):
            raise AssertionError(f"backend {backends[0]} returned {len(first)} outputs, "
                                 f"{b} returned {len(outs)}")
        for k, (x, y) in enumerate(zip(first, outs)):
            assert_bitwise_equal(y, x, msg=f"(output {k}: backend {b} vs {backends[0]})")
    return first


def _reference_inputs(inputs: Sequence[Any], reference_as: str | None) -> list:
    """The inputs as the reference wants them: unchanged, or float arrays widened exactly to
    float64 (numpy or torch) so the reference computes at full precision. Integer arrays keep
    their dtype (they are usually indices); constants pass through."""
    if reference_as not in (None, "float64", "torch"):
        raise ValueError("reference_as must be None, 'float64' or 'torch'")
    out = []
    for x in inputs:
        if reference_as is None or not (isinstance(x, np.ndarray) or is_torch(x)):
            out.append(copy_value(x))
            continue
        arr = as_numpy(x)
        arr = arr.astype(np.float64) if is_float(arr.dtype) else arr.copy()
        out.append(to_torch(arr) if reference_as == "torch" else arr)
    return out


def check_kernel(kernel: Any, reference: Callable[..., Any], *inputs: Any, dtype: Any = None,
                 backends: Sequence[str] = BACKENDS, rtol: float | None = None,
                 atol: float | None = None, reference_as: str | None = "float64",
                 kernel_kwargs: dict | None = None, msg: str = "") -> tuple:
    """Check a kernel end to end in one call.

    1. runs ``kernel(*inputs, **kernel_kwargs)`` on every backend in ``backends`` and asserts
       the results agree bit for bit (they run the same helpers, so any difference is a bug);
    2. runs ``reference(*inputs)`` — numpy or torch — and compares each output with
       :func:`assert_close` under the tolerance of ``dtype`` (default: each output's dtype).

    Args:
        kernel: a ``@nki.jit`` kernel (its options are kept) or a plain kernel function.
        reference: computes the expected output(s) from the same inputs.
        inputs: the kernel's positional arguments (arrays, tensors, constants).
        dtype: tolerance dtype override; rtol/atol: tolerance overrides.
        backends: which backends to run; the first one's outputs are returned.
        reference_as: how the reference receives array inputs: ``"float64"`` (default:
            float arrays as exact float64 numpy copies), ``"torch"`` (the same as float64
            torch tensors) or ``None`` (the inputs unchanged). Integer arrays keep their dtype.
        kernel_kwargs: keyword arguments for the kernel only.
        msg: added to failure reports.

    Returns:
        The kernel's outputs (a tuple, even for one output).

    Example:
        >>> check_kernel(softmax_rows, lambda x: scipy.special.softmax(x, -1),
        ...              randn((256, 512), "bf16"))                     # doctest: +SKIP
    """
    outs = run_backends(kernel, *inputs, backends=backends, **(kernel_kwargs or {}))
    expected = _as_tuple(reference(*_reference_inputs(inputs, reference_as)))
    if len(expected) != len(outs):
        raise AssertionError(f"check_kernel: the kernel returned {len(outs)} output(s), the "
                             f"reference {len(expected)}")
    name = getattr(kernel, "__name__", "kernel")
    for k, (out, ref) in enumerate(zip(outs, expected)):
        assert_close(out, as_numpy(ref), dtype=dtype if dtype is not None else as_numpy(out).dtype,
                     rtol=rtol, atol=atol,
                     msg=f"{name} output {k} vs reference {msg}".rstrip())
    return outs
