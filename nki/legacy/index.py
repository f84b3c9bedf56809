"""Legacy index expressions: ``nl.arange``, ``nl.mgrid`` and the predicates built from them
(spec §1.7, §1.9).

An index expression is what numpy would make of ``nl.arange`` arrays combined with ``+ - *``
by ints and with each other: an integer array of a broadcast shape whose value at the
multi-index ``(i_0, ..., i_{R-1})`` is ``const + Σ_k coef_k · i_k``. Two aranges at the same
broadcast position are the same iteration variable there (``a[:, None] + b[:, None]`` is
``a_0 + b_0 + 2·i_0``), exactly as numpy adds two columns. Comparing an expression with an
int (or another expression) builds a :class:`Predicate`, used by ``mask=`` and by
``nisa.affine_select``.
"""

from __future__ import annotations

from nki.lang.tracer import validation
from nki.legacy.conjunction import left_of_and, right_of_and


def _arange_error(what: str):
    return validation("err_control_flow_condition_depending_on_arange",
                      f"{what} depends on an nl.arange/nl.mgrid index; conditions must be "
                      "known while tracing (use mask= for partial tiles)")


class IndexExpr:
    """``const + Σ coefs[k] · i_k`` over the broadcast shape ``sizes``.

    Example:
        >>> i_p = nl.arange(128)[:, None]          # doctest: +SKIP
        >>> (2 * i_p + 1).shape                    # doctest: +SKIP
        (128, 1)
    """

    __slots__ = ("const", "coefs", "sizes")
    __array_ufunc__ = None     # numpy ints on the left defer to our reflected operators

    def __init__(self, const: int, coefs: tuple[int, ...], sizes: tuple[int, ...]):
        self.const = int(const)
        # a size-1 position carries no index: keep its coefficient 0 so forms compare equal
        self.coefs = tuple(int(c) if s > 1 else 0 for c, s in zip(coefs, sizes))
        self.sizes = tuple(int(s) for s in sizes)

    # ----- numpy-like attributes -----------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.sizes

    @property
    def ndim(self) -> int:
        return len(self.sizes)

    def bounds(self) -> tuple[int, int]:
        """(min, max) of the expression over its shape."""
        lo = hi = self.const
        for c, n in zip(self.coefs, self.sizes):
            lo += min(0, c * (n - 1))
            hi += max(0, c * (n - 1))
        return lo, hi

    def aligned(self, rank: int) -> IndexExpr:
        """The same expression with leading size-1 positions up to ``rank`` (numpy aligns
        broadcast shapes on the right)."""
        pad = rank - self.ndim
        return IndexExpr(self.const, (0,) * pad + self.coefs, (1,) * pad + self.sizes)

    def __repr__(self) -> str:
        terms = " + ".join(f"{c}*i{k}" for k, c in enumerate(self.coefs) if c)
        return f"IndexExpr({self.const}{' + ' + terms if terms else ''}, shape={self.sizes})"

    # ----- new axes ------------------------------------------------------------------------
    def __getitem__(self, key) -> IndexExpr:
        """``[:, None]`` / ``[None, :]``: ``None`` inserts a size-1 position, ``:`` keeps the
        next existing one."""
        key = key if isinstance(key, tuple) else (key,)
        coefs, sizes, k = [], [], 0
        for item in key:
            if item is None:
                coefs.append(0)
                sizes.append(1)
            elif isinstance(item, slice) and item == slice(None):
                if k >= self.ndim:
                    raise validation("nki_invalid_argument", f"too many ':' for the "
                                     f"{self.ndim}-D index {self!r}")
                coefs.append(self.coefs[k])
                sizes.append(self.sizes[k])
                k += 1
            else:
                raise validation("nki_invalid_argument", f"an index expression takes only "
                                 f"':' and None in [], got {item!r}")
        coefs += self.coefs[k:]
        sizes += self.sizes[k:]
        return IndexExpr(self.const, tuple(coefs), tuple(sizes))

    def __setitem__(self, key, value) -> None:
        raise validation("err_cannot_assign_to_index", "nl.arange/nl.mgrid index tiles are "
                         "read-only; materialise them with nisa.iota")

    # ----- affine arithmetic ---------------------------------------------------------------
    def _combine(self, other, sign: int) -> IndexExpr:
        if sign == 1 and (hasattr(other, "decl") or hasattr(other, "materialize")):
            return NotImplemented       # expr + tile: a dynamic index (the tile's __radd__)
        if isinstance(other, IndexExpr):
            rank = max(self.ndim, other.ndim)
            a, b = self.aligned(rank), other.aligned(rank)
            sizes = []
            for k, (x, y) in enumerate(zip(a.sizes, b.sizes)):
                if x != y and 1 not in (x, y):
                    raise validation("nki_shape_mismatch", f"index expressions of shapes "
                                     f"{self.sizes} and {other.sizes} do not broadcast "
                                     f"(position {k})")
                sizes.append(max(x, y))
            coefs = tuple(p + sign * q for p, q in zip(a.coefs, b.coefs))
            return IndexExpr(a.const + sign * b.const, coefs, tuple(sizes))
        return IndexExpr(self.const + sign * _int(other, "+/-"), self.coefs, self.sizes)

    def __add__(self, other) -> IndexExpr:
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other) -> IndexExpr:
        return self._combine(other, -1)

    def __rsub__(self, other) -> IndexExpr:
        return (-self)._combine(other, 1)

    def __neg__(self) -> IndexExpr:
        return self * -1

    def __mul__(self, other) -> IndexExpr:
        if isinstance(other, IndexExpr):
            raise validation("err_unsupported_expression_in_mask", "the product of two index "
                             "expressions is not affine")
        k = _int(other, "*")
        return IndexExpr(self.const * k, tuple(c * k for c in self.coefs), self.sizes)

    __rmul__ = __mul__

    # ----- predicates ----------------------------------------------------------------------
    def __lt__(self, other) -> Predicate:
        return right_of_and(Predicate.atom(self - other, "<"), 1)

    def __le__(self, other) -> Predicate:
        return right_of_and(Predicate.atom(self - other, "<="), 1)

    def __gt__(self, other) -> Predicate:
        return right_of_and(Predicate.atom(self - other, ">"), 1)

    def __ge__(self, other) -> Predicate:
        return right_of_and(Predicate.atom(self - other, ">="), 1)

    def __bool__(self) -> bool:
        raise _arange_error("the truth value of an index expression")

    def __iter__(self):
        raise _arange_error("iterating over an index expression")


class DynIndex:
    """``tile + expr``: an index whose start is read at run time from a 1-element tile
    (``t[i_p, idx[0, j] + i_f]``, the legacy ``tensor_copy_dynamic_*`` idiom); ``expr`` (an
    index expression or an int) is the static part.

    Example:
        >>> src[i_p, off_tile[0, b] + i_f]        # doctest: +SKIP
    """

    __slots__ = ("tile", "expr")

    def __init__(self, tile, expr):
        self.tile, self.expr = tile, expr

    def __add__(self, other) -> DynIndex:
        return DynIndex(self.tile, self.expr + other)

    __radd__ = __add__

    def __repr__(self) -> str:
        return f"DynIndex({getattr(self.tile, 'name', self.tile)} + {self.expr!r})"


def _int(value, op: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise validation("err_unsupported_expression_in_mask", f"index expressions combine "
                         f"with ints by '{op}', got {type(value).__name__} {value!r}")
    return int(value)


_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


class Predicate:
    """A conjunction of ``expr op 0`` atoms (``op`` in ``< <= > >=``), combined with ``&``.

    Example:
        >>> m = (i_p < 100) & (i_f >= 8)           # doctest: +SKIP
    """

    __slots__ = ("atoms",)

    def __init__(self, atoms: tuple[tuple[IndexExpr, str], ...]):
        self.atoms = atoms

    @staticmethod
    def atom(diff: IndexExpr, op: str) -> Predicate:
        return Predicate(((diff, op),))

    def __and__(self, other) -> Predicate:
        if isinstance(other, bool):
            return self if other else Predicate.never()
        if not isinstance(other, Predicate):
            raise validation("err_unsupported_expression_in_mask", f"masks combine with '&' "
                             f"only with other masks, got {type(other).__name__}")
        return Predicate(self.atoms + other.atoms)

    __rand__ = __and__

    @staticmethod
    def never() -> Predicate:
        return Predicate(((IndexExpr(1, (), ()), "<"),))

    def __or__(self, other):
        raise validation("err_unsupported_expression_in_mask", "masks combine with '&' only "
                         "('|' is not an affine rectangle)")

    __ror__ = __or__

    def __bool__(self) -> bool:
        if left_of_and(self, 1):      # ``m1 and i < n``: a conjunction (conjunction.py)
            return True
        raise _arange_error("the truth value of a mask (use '&', not 'and')")

    @property
    def rank(self) -> int:
        return max((d.ndim for d, _ in self.atoms), default=0)

    def squeezed(self, rank: int) -> Predicate:
        """The predicate over ``rank`` positions, its size-1 free positions dropped as
        :func:`squeeze_positions` drops them from an indexed tile."""
        r = self.rank
        diffs = [d.aligned(r) for d, _ in self.atoms]
        sizes = tuple(max(d.sizes[k] for d in diffs) for k in range(r))
        diffs, _ = squeeze_positions(diffs, sizes, rank)
        return Predicate(tuple((d, op) for d, (_, op) in zip(diffs, self.atoms)))

    def __repr__(self) -> str:
        return " & ".join(f"({d!r} {op} 0)" for d, op in self.atoms)


def squeeze_positions(exprs: list[IndexExpr], sizes: tuple[int, ...],
                      rank: int) -> tuple[list[IndexExpr], tuple[int, ...]]:
    """Drop size-1 free positions (leftmost first) until ``rank`` remain. Kernels index
    with some of the expressions of a wider ``nl.mgrid`` (``ix, iw, iy = nl.mgrid[0:128,
    0:1, 0:N]``; ``a[ix, iy]``) and use the result as the ``[128, N]`` tile it selects; a
    size-1 position carries no index (coefficient 0), so dropping it changes no address."""
    sizes = list(sizes)
    while len(sizes) > rank and 1 in sizes[1:]:
        j = sizes.index(1, 1)
        del sizes[j]
        exprs = [IndexExpr(e.const, e.coefs[:j] + e.coefs[j + 1:], e.sizes[:j] + e.sizes[j + 1:])
                 for e in exprs]
    return exprs, tuple(sizes)


def flip(op: str) -> str:
    """The comparison with its operands swapped (``a < b`` is ``b > a``)."""
    return _FLIP[op]


def arange(*args) -> IndexExpr:
    """``nl.arange(stop)`` / ``nl.arange(start, stop[, step])``: a 1-D index expression; give
    it a broadcast axis with ``[:, None]`` or ``[None, :]`` before indexing.

    Example:
        >>> i_p = nl.arange(128)[:, None]          # doctest: +SKIP
    """
    if not 1 <= len(args) <= 3:
        raise validation("nki_invalid_argument", "nl.arange(stop) or nl.arange(start, stop)")
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (tuple(args) + (1,))[:3]
    start, stop, step = int(start), int(stop), int(step)
    n = max(0, -(-(stop - start) // step))
    if n == 0:
        raise validation("nki_invalid_argument", f"nl.arange{tuple(args)} is empty")
    return IndexExpr(start, (step,), (n,))


class MGridResult(tuple):
    """What ``nl.mgrid[...]`` returns: unpack it (``i_p, i_f = nl.mgrid[0:128, 0:512]``) or
    read its axes by name: ``.p`` (the first), then ``.x``, ``.y``, ``.z``, ``.w`` (AWS's
    examples index 3-d tiles as ``t[g.p, g.x, g.y]``)."""

    _AXES = "pxyzw"

    def __getattr__(self, name: str) -> IndexExpr:
        k = self._AXES.find(name) if len(name) == 1 else -1
        if k < 0:
            raise AttributeError(f"nl.mgrid result has no attribute {name!r}")
        if k >= len(self):
            raise validation("nki_invalid_argument", f"nl.mgrid result has {len(self)} axes; "
                             f".{name} would be axis {k}")
        return self[k]


class _MGrid:
    """``nl.mgrid[0:128, 0:512]``: one index expression per slice, like ``numpy.mgrid``."""

    def __getitem__(self, key) -> MGridResult:
        key = key if isinstance(key, tuple) else (key,)
        rank, out = len(key), []
        for k, s in enumerate(key):
            if not isinstance(s, slice) or s.stop is None:
                raise validation("nki_invalid_argument", f"nl.mgrid takes bounded slices "
                                 f"like 0:128, got {s!r}")
            e = arange(0 if s.start is None else s.start, s.stop, 1 if s.step is None else s.step)
            coefs = [0] * rank
            sizes = [1] * rank
            coefs[k], sizes[k] = e.coefs[0], e.sizes[0]
            out.append(IndexExpr(e.const, tuple(coefs), tuple(sizes)))
        return MGridResult(out)


mgrid = _MGrid()
