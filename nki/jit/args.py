"""Kernel arguments: which are tensors, their NKI dtypes, and conversion to/from host arrays.

numpy arrays and torch tensors are tensors (torch is never imported here: a torch tensor is
recognised by its type's module and converted by :mod:`nki.jit.torch_values`); so are
shape-only placeholders ``nt.tensor[[shape], dtype]``, which have no data. Everything else
is a compile-time constant.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import numpy as np

from nki.errors import NkiError, NkiTypeError, fail
from nki.ir.packed import dtype_key
from nki.ir.types import ALL_DTYPES, DType, from_host
from nki.jit.torch_values import is_torch_tensor
from nki.lang.indexing import as_dtype
from nki.typing import TensorAnnotation


@dataclass
class TensorArg:
    """One tensor argument as the simulator sees it."""

    index: int
    array: np.ndarray          # C-contiguous host array (ml_dtypes for bf16/fp8)
    dtype: DType
    original: object           # what the caller passed (to write back / match the kind)
    is_torch: bool
    shape_only: bool = False   # a placeholder (nt.tensor[[shape], dtype]): no data


def to_tensor_arg(index: int, name: str, value, loc) -> TensorArg:
    torch_in = is_torch_tensor(value)
    if torch_in:
        from nki.jit.torch_values import to_numpy

        arr = to_numpy(value)
    else:
        arr = value
    dt = from_host(arr.dtype)
    if dt is None:
        accepted = ", ".join(d.name for d in ALL_DTYPES if d.packed == 1)
        raise fail("nki_unsupported_dtype", f"kernel argument {name!r} has dtype {arr.dtype}, "
                   f"which is not an NKI dtype; accepted: {accepted} (convert float64 to "
                   f"float32, int64 to int32)", loc, NkiTypeError)
    return TensorArg(index, np.ascontiguousarray(arr), dt, value, torch_in)


def is_placeholder(value) -> bool:
    """A shape-only argument: ``nt.tensor[[8192, 4096], nl.bfloat16]`` (either dialect's
    ``nki.typing``), as AWS's benchmark scripts pass them."""
    return isinstance(value, TensorAnnotation)


def placeholder_arg(index: int, name: str, value: TensorAnnotation, loc) -> TensorArg:
    """A placeholder as a tensor argument without data: its ``array`` has the shape and
    host dtype and zero strides (nothing is allocated), so the kernel specializes exactly
    as for a real array of that shape and dtype. ``shape_only`` marks it: a call that would
    simulate the kernel refuses it (``Kernel.__call__``)."""
    if not value.shape or value.dtype is None:
        raise fail("nki_bad_kernel_argument", f"kernel argument {name!r} is {value!r}: a "
                   "shape-only placeholder needs a shape and a dtype, e.g. "
                   "nt.tensor[[8192, 4096], nl.bfloat16]", loc, NkiTypeError)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value.shape):
        raise fail("nki_bad_kernel_argument", f"kernel argument {name!r}: placeholder shape "
                   f"{value.shape} must be positive ints", loc, NkiTypeError)
    try:
        dt = as_dtype(value.dtype)
    except NkiError:
        raise fail("nki_unsupported_dtype", f"kernel argument {name!r}: placeholder dtype "
                   f"{value.dtype!r} is not an NKI dtype", loc, NkiTypeError) from None
    one = np.zeros(1, dt.host_dtype())
    array = np.lib.stride_tricks.as_strided(one, value.shape, (0,) * len(value.shape),
                                            writeable=False)
    return TensorArg(index, array, dt, value, False, shape_only=True)


def is_tensor(value) -> bool:
    """Whether a kernel argument is a tensor (an array, a torch tensor, a placeholder)."""
    return isinstance(value, np.ndarray) or is_torch_tensor(value) or is_placeholder(value)


def tensor_args(args, names: list[str], loc) -> dict[int, TensorArg]:
    """The tensor arguments among the positional ``args`` (``names``: the kernel's
    parameter names), by position."""
    out = {}
    for i, a in enumerate(args):
        if is_tensor(a):
            name = names[i] if i < len(names) else f"arg{i}"
            out[i] = placeholder_arg(i, name, a, loc) if is_placeholder(a) else \
                to_tensor_arg(i, name, a, loc)
    return out


def keyword_adapter(fn, positional: int, keyword_only: tuple[str, ...]):
    """``fn`` taking its keyword-only parameters positionally, after its ``positional``
    ones: the call path keys kernel tensors by position (``tensor_args``), and this hands
    them back to ``fn`` by name. Its signature (``__wrapped__``) is ``fn``'s, whose parameter
    list names the positions in the same order."""

    @functools.wraps(fn)
    def with_keywords(*args, **kwargs):
        by_name = dict(zip(keyword_only, args[positional:]))
        return fn(*args[:positional], **by_name, **kwargs)

    return with_keywords


def flat_signature(adapter, sig: inspect.Signature):
    """A copy of a :func:`keyword_adapter` whose signature is ``sig`` with its keyword-only
    parameters made positional (same names, order and defaults), so binding a call's
    positional form against it succeeds."""
    params = [p.replace(kind=p.POSITIONAL_OR_KEYWORD) if p.kind is p.KEYWORD_ONLY else p
              for p in sig.parameters.values()]

    @functools.wraps(adapter)
    def flat(*args, **kwargs):
        return adapter(*args, **kwargs)

    # a parameter without a default may follow one with a default here, so unvalidated
    flat.__signature__ = inspect.Signature(params, __validate_parameters__=False)
    return flat


def refuse_shape_only(args: dict[int, TensorArg], names: list[str], data_site, loc) -> None:
    """A simulation needs data: raise ``nki_shape_only_argument`` if any argument is a
    placeholder. ``data_site`` (a SourceLoc or None) is where the kernel's control flow
    reads data, which even a cost estimate cannot do without real inputs."""
    shape_only = [a for a in args.values() if a.shape_only]
    if not shape_only:
        return
    first = shape_only[0]
    name = names[first.index] if first.index < len(names) else f"arg{first.index}"
    need = (f"; and the kernel's control flow reads data at {data_site.short}, so even an "
            "estimate needs real inputs" if data_site is not None else
            "; kernel.specialize(...) and cost estimates take placeholders")
    raise fail("nki_shape_only_argument", f"calling the kernel simulates it, which needs "
               f"data, but argument {name!r} is the placeholder {first.original!r}: pass an "
               f"array of that shape and dtype{need}", loc)


def signature_of(value) -> tuple:
    """A hashable description of an argument for the specialization key (a placeholder's
    is an array's of its shape and dtype)."""
    if isinstance(value, np.ndarray):
        return ("tensor", value.shape, dtype_key(value.dtype))
    if is_placeholder(value) and value.shape and value.dtype is not None:
        try:
            host = as_dtype(value.dtype).host_dtype()
        except NkiError:
            return ("placeholder", repr(value))       # placeholder_arg raises the error
        return ("tensor", tuple(value.shape), dtype_key(np.dtype(host)))
    if is_torch_tensor(value):
        return ("tensor", tuple(int(d) for d in value.shape), str(value.dtype))  # SymInts too
    if isinstance(value, (int, float, str, bool, type(None))):
        return ("const", type(value).__name__, value)
    if isinstance(value, (tuple, list)):
        return ("seq", type(value).__name__, tuple(signature_of(v) for v in value))
    return ("const", type(value).__qualname__, repr(value))


def wrap_output(array: np.ndarray, like=None):
    """An output as the caller's kind: numpy, or a torch tensor on the device of ``like``
    (the first torch tensor argument, None when there is none)."""
    if like is not None:
        from nki.jit.torch_values import from_numpy

        return from_numpy(array, like)
    return array


def write_back(ta: TensorArg, data: np.ndarray) -> None:
    """Copy what the kernel wrote into an input back into the caller's array or tensor."""
    if ta.is_torch:
        from nki.jit.torch_values import copy_into

        copy_into(ta.original, data)
    elif isinstance(ta.original, np.ndarray):
        np.copyto(ta.original, data.reshape(ta.original.shape))
