"""The legacy ``nl`` namespace (``neuronxcc.nki.language``): the old signatures
(``f(x, y, *, dtype=None, mask=None)``), each function also an operator token
(``op=nl.add``), plus the constants and dtypes shared with the current dialect."""

from __future__ import annotations

from nki.ir.ops import Act, Alu
from nki.lang.math import _BINARY, _UNARY
from nki.lang.operators import token
from nki.language import (  # noqa: F401 - re-exported
    bfloat16,
    bfp16,
    bool_,
    ds,
    float8_e4m3,
    float8_e4m3fn,
    float8_e5m2,
    float16,
    float32,
    fp32,
    int8,
    int16,
    int32,
    tfloat32,
    tile_size,
    uint8,
    uint16,
    uint32,
)
from nki.legacy import math as _m
from nki.legacy.dtypes import legacy_dtype as _legacy_dtype
from nki.legacy.index import arange, mgrid  # noqa: F401
from nki.legacy.math import (  # noqa: F401
    broadcast_to,
    dropout,
    gather_flattened,
    loop_reduce,
    mean,
    rms_norm,
    softmax,
    var,
    where,
)
from nki.legacy.matmul import matmul, transpose  # noqa: F401
from nki.legacy.nl_base import (  # noqa: F401
    ParDim,
    affine_range,
    empty_like,
    full,
    hbm,
    load,
    load_transpose2d,
    nc,
    ndarray,
    num_programs,
    ones,
    ones_like,
    par_dim,
    private_hbm,
    program_id,
    program_ndim,
    psum,
    sbuf,
    sequential_range,
    shared_constant,
    shared_hbm,
    shared_identity_matrix,
    spmd_dim,
    static_range,
    store,
    zeros,
    zeros_like,
)

# NKI 0.1 dtypes are numpy-compatible (np.dtype(nl.bfloat16), t.dtype == np.float32)
(bfloat16, bool_, float8_e4m3, float8_e4m3fn, float8_e5m2, float16, float32, int8, int16,
 int32, tfloat32, uint8, uint16, uint32) = (_legacy_dtype(d) for d in (
    bfloat16, bool_, float8_e4m3, float8_e4m3fn, float8_e5m2, float16, float32, int8, int16,
    int32, tfloat32, uint8, uint16, uint32))


def _make_binary(name: str, alu: Alu):
    def fn(x, y, *, dtype=None, mask=None, **kwargs):
        return _m.binary(f"nl.{name}", alu, x, y, dtype, mask)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"Elementwise ``{name}`` with numpy broadcasting (a tile, a [P,1] tile or "
                  f"a number on either side); a pending SBUF tile.\n\n    Example:\n"
                  f"        >>> z = nl.{name}(a, b)   # doctest: +SKIP\n")
    return token(alu=alu)(fn)


def _make_unary(name: str, act: Act | None, alu: Alu | None):
    def fn(x, *, dtype=None, mask=None, **kwargs):
        return _m.unary(f"nl.{name}", act, alu, x, dtype, mask)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"Elementwise ``{name}``; a pending SBUF tile.\n\n    Example:\n"
                  f"        >>> y = nl.{name}(x)   # doctest: +SKIP\n")
    return token(alu=alu, act=act)(fn)


def _make_reduce(name: str, alu: Alu):
    def fn(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
        return _m.reduction(f"nl.{name}", alu, x, axis, dtype, mask, keepdims)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"``{name}`` over trailing free ``axis`` (int or list); a pending SBUF "
                  f"tile.\n\n    Example:\n        >>> r = nl.{name}(x, axis=[1])   "
                  "# doctest: +SKIP\n")
    return token(alu=alu)(fn)


_FUNCTIONS: dict = {n: _make_binary(n, a) for n, a in _BINARY.items()}
_FUNCTIONS.update({n: _make_unary(n, act, alu) for n, (act, alu) in _UNARY.items()
                   if n != "copy"})
_FUNCTIONS.update({n: _make_unary(n, None, a) for n, a in (("logical_not", Alu.logical_not),
                                                          ("invert", Alu.invert))})
_FUNCTIONS.update({n: _make_reduce(n, a) for n, a in (("sum", Alu.add), ("max", Alu.maximum),
                                                      ("min", Alu.minimum),
                                                      ("prod", Alu.multiply))})
globals().update(_FUNCTIONS)

copy = token(alu=Alu.bypass, act=Act.copy)(_m.copy)
all = _m.all_   # noqa: A001 - NKI's name


def device_print(prefix, x, *, mask=None, **kwargs):
    """Print a tile while simulating (``nl.device_print("x=", t)``)."""
    from nki.lang.misc import device_print as dp

    return dp(prefix, _m.value(x))


def _not_simulated(name: str):
    def fn(*args, **kwargs):
        from nki.errors import NkiUnsupportedError, fail
        from nki.lang.tracer import user_loc

        raise fail("nki_not_implemented", f"nl.{name} of the legacy dialect is not simulated",
                   user_loc(), NkiUnsupportedError)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``nl.{name}``: not simulated (raises ``nki_not_implemented``)."
    return fn


all_reduce = _not_simulated("all_reduce")


def atomic_rmw(dst, value, op, *, mask=None, **kwargs) -> None:
    """``dst = op(dst, value)`` atomically on HBM (``op=np.add`` only; ``dst`` indexed by an
    index tile: ``nl.atomic_rmw(t[idx, i_f], value=v, op=np.add)``). Rows run in order, so
    repeated indices accumulate.

    Example:
        >>> nl.atomic_rmw(hist[idx_tile, i_f], value=ones, op=np.add)   # doctest: +SKIP
    """
    from nki.lang.operators import as_alu
    from nki.lang.tracer import validation
    from nki.legacy.nl_base import write

    if as_alu(op) is not Alu.add:
        raise validation("nki_invalid_argument", f"nl.atomic_rmw supports op=np.add only, "
                         f"got {op!r}")
    write("nl.atomic_rmw", dst, value, mask, accumulate=True)


def static_cast(input_data, dtype):
    """A Python scalar converted to ``dtype`` at trace time (``nl.static_cast(3.7, nl.int32)``
    is 4: round to nearest even, as the engines cast). A host array (the old test harnesses
    cast their numpy inputs with it) is converted element by element, as
    ``neuron_dtypes.static_cast`` does."""
    import numpy as np

    from nki.lang.indexing import as_dtype

    if isinstance(input_data, np.ndarray) and input_data.ndim:
        from nki.host_dtypes import static_cast as host_cast
        return host_cast(input_data, np.dtype(dtype))
    dt = as_dtype(dtype)
    if dt.is_int:
        return int(np.rint(input_data))
    return float(np.asarray(input_data, np.float32).astype(dt.host_dtype()).astype(np.float32))


def rand(shape, dtype=None, *, buffer=None, name: str = "", **kwargs):
    """A new SBUF tile of uniform random floats in [0, 1) (``nl.rand((32, 128))``), drawn
    from the same Vector-engine generators as the current dialect's ``nl.rand``."""
    from nki.ir.types import Memory
    from nki.lang.rng import rand as _rand
    from nki.legacy.tile import as_legacy

    return as_legacy(_rand(shape, float32 if dtype is None else dtype,
                           buffer=Memory.SBUF if buffer is None else buffer, name=name))


def finfo(dtype):
    """Machine limits of a float dtype, bfloat16 and fp8 included
    (``nl.finfo(nl.bfloat16).min``), as ``numpy.finfo`` reports them."""
    from nki.host_dtypes import finfo as _finfo

    return _finfo(dtype)


def expand_dims(data, axis: int):
    """A view of ``data`` with a new size-1 dim at ``axis``."""
    return _m.value(data).expand_dims(axis)


__all__ = [n for n in dir() if not n.startswith("_")
           and n not in ("annotations", "Act", "Alu", "token")]
