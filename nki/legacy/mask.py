"""``mask=``: a predicate over index expressions, applied as a rectangle (spec §1.9).

Every legacy ``nl``/``nisa`` call takes a compile-time ``mask``; the compiler shrinks (or
skips) the instruction. A mask whose atoms each bound one broadcast position is a rectangle
of the instruction's iteration space: every full-shaped operand is sliced along the bounded
positions, ``[P, 1]`` and broadcast operands only along the positions where they are full.
A mask comparing two positions is not a rectangle and raises ``nki_not_implemented``; a mask
that is false everywhere skips the instruction, as the compiler does.
"""

from __future__ import annotations

from fractions import Fraction
from math import ceil, floor

from nki.errors import NkiUnsupportedError, fail
from nki.lang.indexing import index_view
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import user_loc, validation
from nki.legacy.index import Predicate

Rect = dict  # position -> (lo, hi): the mask holds for lo <= i_position < hi


def _bound(c: int, const: int, op: str, n: int) -> tuple[int, int]:
    """The interval of ``i`` in ``[0, n)`` with ``c*i + const op 0`` (``c != 0``)."""
    if op in (">", ">="):
        c, const, op = -c, -const, "<" if op == ">" else "<="
    t = Fraction(-const, c)
    lo, hi = 0, n
    if c > 0:
        hi = min(n, ceil(t) if op == "<" else floor(t) + 1)
    else:
        lo = max(0, floor(t) + 1 if op == "<" else ceil(t))
    return lo, hi


def _holds(const: int, op: str) -> bool:
    return {"<": const < 0, "<=": const <= 0, ">": const > 0, ">=": const >= 0}[op]


def _fits(mask: Predicate, space: tuple[int, ...]) -> bool:
    if mask.rank > len(space):
        return False
    return all(n in (1, space[k]) for d, _ in mask.atoms
               for k, n in enumerate(d.aligned(len(space)).sizes))


def _aligned(mask: Predicate, space: tuple[int, ...]) -> Predicate:
    """``mask`` over the instruction's positions. A tile indexed from a wider ``nl.mgrid``
    lost its size-1 positions (``squeeze_positions``); the mask loses them too. A mask from
    a narrower grid (``nl.mgrid[0:512, 0:6]`` bounding a free axis of a ``[128, 512]`` tile
    indexed by a 3-D grid) is right-aligned to the wider one first, as numpy aligns."""
    rank = len(space)
    for pad in range(rank + 1):
        cand = Predicate(tuple((d.aligned(d.ndim + pad), op) for d, op in mask.atoms))
        if cand.rank > rank:
            cand = cand.squeezed(rank)
        if _fits(cand, space):
            return cand
    return mask.squeezed(rank) if mask.rank > rank else mask


def rectangle(mask, space: tuple[int, ...], api: str) -> Rect | None:
    """The rectangle ``mask`` selects in an iteration space of shape ``space``; ``{}`` for no
    mask, None when it selects nothing."""
    if mask is None or mask is True:
        return {}
    if mask is False:
        return None
    if not isinstance(mask, Predicate):
        raise validation("err_unsupported_expression_in_mask", f"{api}: mask= must be a "
                         f"comparison of nl.arange/nl.mgrid indices, got "
                         f"{type(mask).__name__}")
    rank = len(space)
    mask = _aligned(mask, space)
    if mask.rank > rank:
        raise validation("err_unsupported_expression_in_mask", f"{api}: the mask has rank "
                         f"{mask.rank} but the instruction's tiles have rank {rank}")
    rect: Rect = {}
    for diff, op in mask.atoms:
        d = diff.aligned(rank)
        used = [k for k, c in enumerate(d.coefs) if c]
        if not used:
            if not _holds(d.const, op):
                return None
            continue
        if len(used) > 1:
            raise fail("nki_not_implemented", f"{api}: mask {d!r} {op} 0 compares broadcast "
                       f"positions {used}; only masks that bound one index each (a "
                       "rectangle) are simulated. Use nisa.affine_select for triangles.",
                       user_loc(), NkiUnsupportedError)
        k = used[0]
        lo, hi = _bound(d.coefs[k], d.const, op, space[k])
        old = rect.get(k, (0, space[k]))
        rect[k] = (max(lo, old[0]), min(hi, old[1]))
        if rect[k][0] >= rect[k][1]:
            return None
    return {k: v for k, v in rect.items() if v != (0, space[k])}


def rect_predicate(rect: Rect, space: tuple[int, ...]) -> Predicate | None:
    """The mask selecting ``rect`` of ``space`` (None for the whole space)."""
    from nki.legacy.index import IndexExpr

    pred = None
    for k, (lo, hi) in sorted(rect.items()):
        if (lo, hi) == (0, space[k]):
            continue
        i = IndexExpr(0, tuple(int(j == k) for j in range(len(space))),
                      tuple(n if j == k else 1 for j, n in enumerate(space)))
        atom = (i >= lo) & (i < hi)
        pred = atom if pred is None else pred & atom
    return pred


def shrink(t, rect: Rect, space: tuple[int, ...], role: str, api: str):
    """``t`` sliced to the rectangle: along each bounded position where it is full-sized."""
    if not isinstance(t, NkiTensor):
        return t
    oob = getattr(t, "_oob", None)
    if oob is not None:
        from nki.legacy.tile import out_of_bounds

        err = out_of_bounds(t, rect)
        if err is not None:
            raise err
    if not rect:
        return t if oob is None else _checked(t)
    key = [slice(None)] * t.ndim
    for k, (lo, hi) in rect.items():
        if k >= t.ndim or t.shape[k] == 1:
            continue     # broadcast along this position (a [P, 1] operand, a reduced dim)
        if t.shape[k] != space[k]:
            raise fail("nki_not_implemented", f"{api}: cannot apply the mask to operand "
                       f"{role!r} {t.shape}: its dim {k} does not match the iteration "
                       f"space {space}", user_loc(), NkiUnsupportedError)
        key[k] = slice(lo, hi)
    if all(k == slice(None) for k in key):
        out = t
    elif t.is_indirect():
        out = _indirect_window(t, key)
    else:
        out = index_view(t, tuple(key))
    return out if oob is None else _checked(out)


def _indirect_window(t, key: list):
    """A masked window of an indirect-rows view (``data[idx_tile, i_f]`` under a row mask,
    nki-samples' resize_nearest): rows ``lo:hi`` are the rows ``idx[lo:hi]`` select, the
    other dims slice as usual."""
    from nki.legacy.tile import LegacyTile

    idx, off, dims = t._ind, t._off, list(t._dims)
    for k, sl in enumerate(key):
        if sl == slice(None):
            continue
        lo, hi = sl.start, sl.stop
        if k == 0:
            idx = idx[lo:hi]
        else:
            off += lo * dims[k][0]
        dims[k] = (dims[k][0], hi - lo)
    return LegacyTile(t._decl, t._dtype, t._part, off, tuple(dims), idx)


def _checked(t):
    """A copy of an index-expression view whose access the mask made in-bounds."""
    from nki.legacy.tile import LegacyTile

    return LegacyTile(t._decl, t._dtype, t._part, t._off, t._dims, t._ind)
