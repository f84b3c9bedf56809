"""``nki.language`` (``nl``): the public language namespace of the current NKI dialect."""

from nki.ir.ops import Act as _Act
from nki.ir.ops import Alu as _Alu
from nki.ir.types import Memory
from nki.lang.creation import (
    empty_like,
    full,
    hbm,
    ndarray,
    ones,
    private_hbm,
    psum,
    sbuf,
    shared_constant,
    shared_hbm,
    shared_identity_matrix,
    zeros,
    zeros_like,
)
from nki.lang.creation import value_result as _value_result
from nki.lang.dma import load, store
from nki.lang.iterators import (
    affine_range,
    ds,
    num_programs,
    program_id,
    program_ndim,
    sequential_range,
    static_range,
)
from nki.lang.math import OPERATORS as _OPERATORS
from nki.lang.matmul import NL_EXPORTS as _MATMUL_NL
from nki.lang.nkiobject import NKIObject
from nki.lang.operators import token as _token
from nki.lang.reduce import NL_EXPORTS as _REDUCE_NL
from nki.lang.select import NL_EXPORTS as _SELECT_NL
from nki.lang.tensor import NkiTensor
from nki.lang.tile_size import tile_size
from nki.language.dtypes import *  # noqa: F403 - the dtypes, also as nl.dtypes

globals().update({k: v for k, v in _OPERATORS.items() if k != "copy"})
globals().update(_MATMUL_NL)
globals().update(_REDUCE_NL)
globals().update(_SELECT_NL)

MemoryRegion = Memory


def is_sbuf(x) -> bool:
    return getattr(x, "buffer", x) is Memory.SBUF


def is_psum(x) -> bool:
    return getattr(x, "buffer", x) is Memory.PSUM


def is_hbm(x) -> bool:
    return getattr(x, "buffer", x) in (Memory.SHARED_HBM, Memory.PRIVATE_HBM)


def is_on_chip(x) -> bool:
    return is_sbuf(x) or is_psum(x)


class _FloatInfo:
    """``nl.fp32.min`` / ``nl.bfp16.min``: the most negative finite value of the format."""

    def __init__(self, min_value: float, max_value: float):
        self.min, self.max = min_value, max_value


fp32 = _FloatInfo(-3.4028234663852886e38, 3.4028234663852886e38)   # bits 0xff7fffff
bfp16 = _FloatInfo(-3.3895313892515355e38, 3.3895313892515355e38)  # bits 0xff7f


@_token(alu=_Alu.bypass, act=_Act.copy)   # also the activation/ALU pass-through operator
def copy(x, dtype=None):
    """A new SBUF tile equal to ``x`` (VectorE ``tensor_copy``: bit-exact when dtypes match).

    Example:
        >>> y = nl.copy(t)   # doctest: +SKIP
    """
    from nki.lang.vector import tensor_copy

    out = _value_result(x.shape, dtype or x.dtype, buffer=Memory.SBUF)
    tensor_copy(dst=out, src=x)
    return out


# random numbers, printing and scheduling (nki/lang/rng.py, nki/lang/misc.py)
# runtime loops and indirect gathers (nki/lang/control.py, nki/lang/indirect.py)
from nki.lang.control import dynamic_range, fori_loop, while_loop  # noqa: E402
from nki.lang.grid import (  # noqa: E402 - tile grids (NKI 0.7)
    NkiBlockGrid,
    NkiGrid,
    NkiTileGrid,
    alloc_blocks,
    alloc_tiles,
    blocks,
    tiles,
)
from nki.lang.indirect import gather_flattened  # noqa: E402
from nki.lang.misc import device_print, no_reorder  # noqa: E402
from nki.lang.rng import rand, random_seed  # noqa: E402
from nki.lang.stream import NkiStreamBuffers, alloc_stream_buffers  # noqa: E402


def _unary_alu(alu: _Alu, x, dtype=None):
    from nki.lang.vector import tensor_scalar

    out = _value_result(x.shape, dtype or x.dtype, buffer=Memory.SBUF)
    tensor_scalar(dst=out, data=x, op0=alu, operand0=0.0)
    return out


@_token(alu=_Alu.logical_not)
def logical_not(x, dtype=None):
    """Elementwise logical NOT (1 where ``x`` is 0, else 0) as a new SBUF tile.

    Example:
        >>> m = nl.logical_not(mask)   # doctest: +SKIP
    """
    return _unary_alu(_Alu.logical_not, x, dtype)


@_token(alu=_Alu.invert)
def invert(x, dtype=None):
    """Elementwise bitwise NOT of an integer tile as a new SBUF tile.

    Example:
        >>> y = nl.invert(bits)   # doctest: +SKIP
    """
    return _unary_alu(_Alu.invert, x, dtype)


def expand_dims(x, axis: int):
    """A view of ``x`` with a new size-1 dimension at ``axis``.

    Example:
        >>> y = nl.expand_dims(t, 2)   # doctest: +SKIP
    """
    return x.expand_dim(axis)

# submodules that real kernels import: ``from nki.language.opcode import maximum`` (nki-library's
# attention_cte) and ``nki.language.dtypes`` (``nki.dtype`` in nki-library's harness)
from nki.language import dtypes, opcode  # noqa: E402

__all__ = ([n for n in dir() if not n.startswith("_")] + list(_OPERATORS) + list(_MATMUL_NL)
           + list(_REDUCE_NL) + list(_SELECT_NL))

