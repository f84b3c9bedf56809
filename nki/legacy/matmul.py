"""Legacy Tensor-engine calls of ``nl``: ``nl.matmul`` / ``nl.transpose`` and the matmul
masks shared with ``nisa.nc_matmul`` (``mask=`` over the result, operand masking
``lhsT[i_f < 64]``; spec §1.9, §3.5)."""

from __future__ import annotations

from nki.ir.ops import Engine
from nki.ir.types import FLOAT32, Memory
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import validation
from nki.legacy.mask import rectangle
from nki.legacy.math import _free, _out_dtype, _tile, _to_sbuf, _unsupported
from nki.legacy.pending import Pending
from nki.legacy.tile import copy_into, new_tile


def _transposed(x: NkiTensor) -> NkiTensor:
    """``x`` [M, K] transposed to an SBUF [K, M] tile through the Tensor engine."""
    from nki.lang.matmul import nc_transpose

    ps = new_tile((_free(x), x.shape[0]), x.dtype, Memory.PSUM)
    nc_transpose(dst=ps, data=_to_sbuf(x), engine=Engine.tensor)
    return _to_sbuf(ps)


def matmul(x, y, *, transpose_x=False, mask=None) -> Pending:
    """``x @ y`` (``x.T @ y`` with ``transpose_x=True``, the preferred form): an fp32 PSUM
    tile; ``psum[...] += nl.matmul(...)`` accumulates in place.

    Example:
        >>> res_psum += nl.matmul(lhsT_tile, rhs_tile, transpose_x=True)   # doctest: +SKIP
    """
    from nki.lang.matmul import nc_matmul

    xt, yt = _tile("nl.matmul", x, "x"), _tile("nl.matmul", y, "y")
    m = _free(xt) if transpose_x else xt.shape[0]
    xt, yt, shape, mask = matmul_mask("nl.matmul", mask, (xt, 1 if transpose_x else 0),
                                      (yt, 1), (m,) + yt.shape[1:])

    def run(dst, x, y, accumulate):
        stationary = _to_sbuf(x) if transpose_x else _transposed(x)
        nc_matmul(dst=dst, stationary=stationary, moving=_to_sbuf(y), accumulate=accumulate)

    return Pending("nl.matmul", shape, FLOAT32, Memory.PSUM, {"x": xt, "y": yt}, run,
                   kind="matmul", mask=mask, shrink_operands=False)


def matmul_mask(api: str, mask, lhs: tuple, rhs: tuple, shape: tuple[int, ...]):
    """Masks of a matmul (spec §1.9): ``mask=`` is a rectangle of the result ``[M, N]``;
    operand masks (``lhsT[i_f < 64]``) bound the operand axis that becomes M
    (``lhs = (tile, axis)``) or N. Both bound the operands here and stay a mask on the
    destination, so a masked result lands where the unmasked one would. Returns (lhs tile,
    rhs tile, result shape, mask for the destination)."""
    from nki.legacy.mask import rect_predicate

    (a, a_ax), (b, b_ax) = lhs, rhs
    if _restates_operand_mask(mask, a, b):
        mask = None
    if not _operand_masked(a, b) and (mask is None or isinstance(mask, bool)):
        return a, b, shape, mask
    if a.ndim != 2 or (b.ndim != 2 and _operand_masked(b)):
        raise _unsupported(f"{api}: operand masks on operands with more than 2 dims; index "
                           "the operands instead")
    # a moving operand of several free dims (AWS's blockwise_mm_bwd: [K, 4, 128]) keeps
    # them in the result, [M, 4, 128]; the mask is over [M, N] with N flattened, and may
    # bound only M then
    wide = b.ndim != 2
    space = (_full_extent(a, a_ax), _full_extent(b, b_ax) if not wide else _free(b))
    full = (space[0],) + tuple(b.shape[1:]) if wide else space
    if isinstance(mask, bool) and not mask:
        return a, b, full, False
    mask = None if isinstance(mask, bool) else mask
    rect = rectangle(mask, space, api) if mask is not None else {}
    if rect is None:
        return a, b, full, False
    if wide and 1 in rect:
        raise _unsupported(f"{api}: a mask bounding N of a moving operand with more than 2 "
                           "dims; index the operand instead")
    views = []
    for t, ax, pos in ((a, a_ax, 0), (b, b_ax, 1)):
        if wide and pos == 1:
            views.append(t)
            continue
        base = _omask_lo(t, ax)
        lo, hi = rect.get(pos, (0, space[pos]))
        lo, hi = max(lo, base), min(hi, base + t.shape[ax])
        if lo >= hi:
            return a, b, full, False
        rect[pos] = (lo, hi)
        views.append(_slice_axis(t, ax, lo - base, hi - base))
    return views[0], views[1], full, rect_predicate(rect, full)


def _restates_operand_mask(mask, *operands) -> bool:
    """Whether ``mask=`` says again what an operand's own mask says (AWS's blockwise_mm:
    ``nc_matmul(w[i_k, idx][idx < I], x, mask=(idx < I))``, with ``idx`` the stationary's
    free index, so the mask bounds M though it is written at N's position). The predicate
    keeps the same rectangle of that operand as its operand mask does; it is then bounded
    already (we cannot tell which operand's index a mask names otherwise: expressions carry
    positions, not the identity of the ``nl.arange`` they came from)."""
    from nki.legacy.index import Predicate

    if not isinstance(mask, Predicate):
        return False
    for t in operands:
        om = getattr(t, "_omask", None)
        if om is not None and mask.rank <= len(om[0]) and \
                rectangle(mask, om[0], "mask") == om[1]:
            return True
    return False


def _operand_masked(*ts) -> bool:
    return any(getattr(t, "_omask", None) is not None for t in ts)


def _full_extent(t: NkiTensor, ax: int) -> int:
    om = getattr(t, "_omask", None)
    return t.shape[ax] if om is None else om[0][ax]


def _omask_lo(t: NkiTensor, ax: int) -> int:
    om = getattr(t, "_omask", None)
    return 0 if om is None else om[1].get(ax, (0, 0))[0]


def _slice_axis(t: NkiTensor, ax: int, lo: int, hi: int) -> NkiTensor:
    from nki.lang.indexing import index_view

    if (lo, hi) == (0, t.shape[ax]):
        return t
    key = [slice(None), slice(None)]
    key[ax] = slice(lo, hi)
    return index_view(t, tuple(key))


def transpose(x, *, dtype=None, mask=None) -> Pending:
    """The 2-D transpose of a tile (each dim ≤ 128) on the Tensor engine (PSUM result).

    Example:
        >>> t_ps = nl.transpose(tile)               # doctest: +SKIP
    """
    from nki.lang.matmul import nc_transpose

    t = _tile("nl.transpose", x, "x")
    if t.ndim > 2:
        raise validation("err_exceed_max_supported_dimension", f"nl.transpose: x has "
                         f"{t.ndim} dims; 2-D tiles only")

    def run(dst, x):
        if dst.buffer is Memory.PSUM and dst.dtype == x.dtype:
            nc_transpose(dst=dst, data=_to_sbuf(x), engine=Engine.tensor)
            return
        ps = new_tile((x.shape[1], x.shape[0]), x.dtype, Memory.PSUM)
        nc_transpose(dst=ps, data=_to_sbuf(x), engine=Engine.tensor)
        copy_into(dst, ps)

    return Pending("nl.transpose", (t.shape[1], t.shape[0]), _out_dtype(dtype, t.dtype),
                   Memory.PSUM, {"x": t}, run, mask=mask)
