"""The legacy tile handle: index-expression indexing, block dims, assignment and operators
(spec §1.3 block dims, §1.7, §3.6).

:class:`LegacyTile` is an :class:`~nki.lang.tensor.NkiTensor` (so every current-dialect rule
takes it unchanged) whose ``[]`` also accepts ``nl.arange``/``nl.mgrid`` index expressions,
whose ``[] =`` emits a pending result straight into the indexed view, and which has the old
tile operators. Kernel parameters are wrapped in it by the legacy ``jit``; the legacy ``nl``
creates every tile as one. Views of it stay legacy tiles.
"""

from __future__ import annotations

from numbers import Integral

from nki.ir.nodes import MAX_DIMS
from nki.ir.ops import Alu
from nki.ir.types import DType, Memory
from nki.lang.indexing import index_view
from nki.lang.tensor import DynSlice, NkiTensor, fold_dims
from nki.lang.tracer import current, validation
from nki.legacy.index import DynIndex, IndexExpr, Predicate, squeeze_positions
from nki.legacy.pending import Pending, before_write, state, value


class LegacyTile(NkiTensor):
    """A tensor handle of the legacy dialect (an ``NkiTensor`` with the old indexing and
    operators).

    Example:
        >>> i_p, i_f = nl.mgrid[0:128, 0:512]      # doctest: +SKIP
        >>> tile = nl.load(x[i_p, i_f])            # doctest: +SKIP
        >>> y[i_p, i_f] = tile * 2.0               # doctest: +SKIP
    """

    # an index-expression view reaching outside its tensor, valid only once a mask shrinks
    # it: (index expressions, tensor shape, tensor name); any other use is an error
    # an operand-masked view (``t[i_f < 64]``): (the unmasked shape, the kept rectangle), so
    # a matmul places its masked result where the unmasked one would go
    __slots__ = ("_oob", "_omask")

    def __init__(self, decl, dtype=None, part=0, off=0, dims=None, ind=None, oob=None):
        super().__init__(decl, dtype, part, off, dims, ind)
        self._oob = oob
        self._omask = None

    def _new(self, dims, off=None, part=None, dtype=None) -> LegacyTile:
        # the old API folded views of more than 5 dims whose adjacent dims walk memory as one
        v = NkiTensor._new(self, fold_dims(dims) if len(dims) > MAX_DIMS else dims, off, part,
                           dtype)
        return LegacyTile(v._decl, v._dtype, v._part, v._off, v._dims, v._ind, self._oob)

    @property
    def dtype(self):
        """The NKI dtype, comparable with numpy dtypes as in NKI 0.1 (``t.dtype ==
        np.float32``)."""
        from nki.legacy.dtypes import legacy_dtype

        return legacy_dtype(self._dtype)

    @property
    def itemsize(self) -> int:
        """Bytes per element, as numpy arrays have it (AWS's flash_paged_attn_varlen picks a
        transpose dtype of the same width by ``t.itemsize``)."""
        return self._dtype.itemsize

    def access(self):
        if self._oob is not None:
            raise out_of_bounds(self, None)
        return super().access()

    def __getitem__(self, key) -> LegacyTile:
        return legacy_index(self, key)

    def __setitem__(self, key, val) -> None:
        assign(legacy_index(self, key), val)

    # ----- nki.tensor methods of the old API -----------------------------------------------
    def astype(self, dtype) -> Pending:
        """A copy converted to ``dtype`` (always copies)."""
        from nki.legacy.math import copy

        return copy(self, dtype=dtype)

    def broadcast_to(self, shape) -> NkiTensor | Pending:
        """numpy-rule broadcast: a view along free dims; size-1 free dims the target lacks
        are dropped (an ``[iw, iy]`` index of an ``mgrid`` gives a ``[1, 1, N]`` tile that
        kernels broadcast to ``[P, N]``); a partition broadcast is a copy (a pending
        ``nl.broadcast_to``), as the old compiler made it."""
        shape = tuple(int(s) for s in shape)
        t = self
        while t.ndim > len(shape) and 1 in t.shape[1:]:
            t = t.squeeze_dim(t.shape[1:].index(1) + 1)
        if t.on_chip and t.ndim == len(shape) and t.shape[0] != shape[0]:
            from nki.legacy.math import broadcast_to

            return broadcast_to(t, shape)
        return NkiTensor.broadcast_to(t, shape)

    def assert_shape(self, shape) -> LegacyTile:
        if tuple(shape) != self.shape:
            raise validation("err_annotation_shape_mismatch", f"{self.name!r} has shape "
                             f"{self.shape}, not {tuple(shape)}")
        return self

    # ----- in-place operators --------------------------------------------------------------
    def __iadd__(self, other) -> LegacyTile:
        if isinstance(other, Pending) and other.kind == "matmul" and other._tile is None \
                and self.buffer is Memory.PSUM:
            accumulate_matmul(self, other)
            return self
        return _inplace(self, other, Alu.add)

    def __isub__(self, other) -> LegacyTile:
        return _inplace(self, other, Alu.subtract)

    def __imul__(self, other) -> LegacyTile:
        return _inplace(self, other, Alu.multiply)

    def __itruediv__(self, other) -> LegacyTile:
        return _inplace(self, other, Alu.divide)


def _binop(alu: Alu, reverse: bool = False):
    def op(self, other):
        from nki.legacy.math import binary

        if alu is Alu.add and isinstance(other, IndexExpr) and self.size == 1:
            return DynIndex(self, other)          # a run-time index: idx[0, j] + i_f
        x, y = (other, self) if reverse else (self, other)
        return binary(f"operator {alu.name}", alu, x, y, operator=True)

    return op


for _name, _alu in (("add", Alu.add), ("sub", Alu.subtract), ("mul", Alu.multiply),
                    ("truediv", Alu.divide), ("lshift", Alu.left_shift),
                    ("rshift", Alu.right_shift), ("and", Alu.bitwise_and),
                    ("or", Alu.bitwise_or), ("xor", Alu.bitwise_xor)):
    setattr(LegacyTile, f"__{_name}__", _binop(_alu))
    setattr(LegacyTile, f"__r{_name}__", _binop(_alu, reverse=True))
for _name, _alu in (("lt", Alu.less), ("le", Alu.less_equal), ("gt", Alu.greater),
                    ("ge", Alu.greater_equal)):
    setattr(LegacyTile, f"__{_name}__", _binop(_alu))
LegacyTile.__neg__ = lambda self: _binop(Alu.multiply)(self, -1.0)


def as_legacy(t: NkiTensor) -> LegacyTile:
    """The same view as a legacy tile."""
    if isinstance(t, LegacyTile):
        return t
    return LegacyTile(t._decl, t._dtype, t._part, t._off, t._dims, t._ind)


def new_tile(shape, dtype: DType, buffer: Memory, name: str = "") -> LegacyTile:
    """A fresh legacy tile (through ``nl.ndarray``'s rule)."""
    from nki.lang.creation import ndarray

    return as_legacy(ndarray(tuple(shape), dtype, buffer=buffer, name=name))


# ----- indexing -------------------------------------------------------------------------------
def legacy_index(t: NkiTensor, key) -> NkiTensor:
    """``t[key]``: index expressions (with ints pinning dims) select a broadcast tile; ints,
    slices and ``nl.ds`` are basic indexing as in the current dialect."""
    from nki.legacy.views import dynamic_index, masked_operand

    if isinstance(key, Predicate):
        return masked_operand(t, key)
    key = key if isinstance(key, tuple) else (key,)
    if isinstance(key[0], (NkiTensor, Pending)) and not t.on_chip and \
            value(key[0]).size > 1:
        # (a one-element tile is a dynamic offset, below, an int known at run time:
        # ``w[e[0, 0], i_p, i_f]`` in AWS's blockwise_mm_bwd picks the expert's weights,
        # ``tables[step[0, 0]]`` in flash_paged_attn_varlen the step's [128, n, u] block,
        # which a DMA may write into a tile of another shape with as many elements)
        return indirect_rows(t, value(key[0]), key[1:])
    lead = _leading_ints(key)
    if lead and lead < len(key) and isinstance(key[lead], (NkiTensor, Pending)) and \
            not t.on_chip and value(key[lead]).size > 1:
        # ``t[b, idx_tile, i_f]`` (nki-samples' resize_nearest): the ints pin outer dims,
        # the index tile then selects rows of the view they leave
        return indirect_rows(index_view(t, key[:lead]), value(key[lead]), key[lead + 1:])
    dyn = [j for j, k in enumerate(key) if isinstance(k, DynIndex) or (
        isinstance(k, (NkiTensor, Pending)) and value(k).size == 1)]
    if dyn:
        return dynamic_index(t, key, dyn)
    if any(isinstance(k, IndexExpr) for k in key):
        return advanced_index(t, key)
    if any(isinstance(k, Predicate) for k in key):
        raise _unsupported("operand masking (t[mask]) is not simulated; pass mask= instead")
    if any(isinstance(k, (NkiTensor, Pending)) for k in key):
        raise validation("err_indirect_indices_free_dim", f"indexing {t.name!r}: an index "
                         "tile may select rows of the first dim of an HBM tensor only")
    past = _slices_as_expressions(t, key)
    if past is not None:
        return advanced_index(t, past)
    return _basic_index(t, key)


def _slices_as_expressions(t: NkiTensor, key: tuple) -> tuple | None:
    """Slices past the tensor's end (``x[256:384]`` of 288 rows, a partial last tile in
    nki-samples' adaptive_avg_pool2d; ``qk[:, 512:1024]`` of an SBUF tile 512 wide, a tile
    AWS's attention_token_gen writes under a mask that is false there) as index expressions,
    legal under a mask that keeps the access inside, as the old API allowed; None when every
    slice is inside. ``nl.ds(start, size)`` at an int start counts as ``start:start+size``
    (AWS's tiled transposes load ``x[nl.ds(p * 128, 128), ...]`` of a 130-row tensor)."""
    key = tuple(slice(k.start, k.start + k.size) if isinstance(k, DynSlice) and k.step == 1
                and isinstance(k.start, Integral) and not isinstance(k.start, bool) else k
                for k in key) + (slice(None),) * (t.ndim - len(key))   # numpy: trailing `:`
    if len(key) != t.ndim or not all(
            isinstance(k, slice) and k.step in (None, 1) or
            isinstance(k, Integral) and not isinstance(k, bool) for k in key):
        return None
    spans = [(k.start or 0, t.shape[j] if k.stop is None else k.stop)
             for j, k in enumerate(key) if isinstance(k, slice)]
    ends = [t.shape[j] for j, k in enumerate(key) if isinstance(k, slice)]
    if all(hi <= n for (_, hi), n in zip(spans, ends)) or any(lo < 0 or hi <= lo
                                                             for lo, hi in spans):
        return None
    m, q, out = len(spans), 0, []
    for k in key:
        if isinstance(k, slice):
            lo, hi = spans[q]
            out.append(IndexExpr(lo, tuple(int(j == q) for j in range(m)),
                                 tuple(hi - lo if j == q else 1 for j in range(m))))
            q += 1
        else:
            out.append(int(k))
    return tuple(out)


def _leading_ints(key: tuple) -> int:
    """How many keys at the front are plain ints."""
    n = 0
    while n < len(key) and isinstance(key[n], Integral) and not isinstance(key[n], bool):
        n += 1
    return n


def _basic_index(t: NkiTensor, key: tuple) -> NkiTensor:
    """Ints drop their dims, except that a view of an HBM tensor of rank >= 2 keeps two: the
    last int-indexed dims stay at size 1 (``A[0:128, j]`` is the ``[128, 1]`` column that
    kernels use as a per-partition scalar)."""
    view = index_view(t, key)
    if t.on_chip or view.ndim >= 2 or t.ndim < 2:
        return view
    key = list(key)
    for j in reversed(range(len(key))):
        k = key[j]
        if isinstance(k, Integral) and not isinstance(k, bool):
            k = int(k) % t.shape[j]
            key[j] = slice(k, k + 1)
            view = index_view(t, tuple(key))
            if view.ndim >= 2:
                break
    return view


def indirect_rows(t: NkiTensor, idx: NkiTensor, rest: tuple) -> NkiTensor:
    """``t[idx_tile[i_p, 0], i_f]``: row ``p`` of the view is row ``idx[p]`` of ``t`` (a
    gather for ``nl.load``, a scatter for ``nl.store``), the other dims indexed as usual."""
    from nki.lang.indirect import vector_select

    exprs = [k for k in rest if isinstance(k, IndexExpr)]
    rank = max([e.ndim for e in exprs] + [2])
    rows = IndexExpr(0, (1,) + (0,) * (rank - 1), (t.shape[0],) + (1,) * (rank - 1))
    view = advanced_index(t, (rows,) + tuple(rest)) if exprs else index_view(t, (slice(None),)
                                                                            + tuple(rest))
    return as_legacy(vector_select(view, 0, idx))


def _unsupported(detail: str):
    from nki.errors import NkiUnsupportedError, fail
    from nki.lang.tracer import user_loc

    return fail("nki_not_implemented", detail, user_loc(), NkiUnsupportedError)


def _expressions(t: NkiTensor, key: tuple) -> list[IndexExpr]:
    """Every key as an index expression (ints are constants), checked for mixing and rank."""
    for k in key:
        if isinstance(k, (slice, DynSlice)) or k is None or k is Ellipsis:
            raise validation("err_unsupported_mixing_basic_advanced_tensor_indexing",
                             f"indexing {t.name!r} mixes nl.arange/nl.mgrid indices with "
                             f"{k!r}; use index expressions (or ints) for every dim")
    if len(key) != t.ndim:
        code = ("err_unsupported_mixing_basic_advanced_tensor_indexing" if len(key) < t.ndim
                else "err_tensor_access_out_of_bound")
        raise validation(code, f"{len(key)} index expressions for {t.ndim}-D tensor "
                         f"{t.name!r}; give one per dim")
    exprs = []
    for k in key:
        if isinstance(k, IndexExpr):
            if k.ndim == 1:
                raise validation("err_1d_arange_not_supported", f"indexing {t.name!r} with "
                                 "a 1-D nl.arange; give it an axis: nl.arange(n)[:, None] or "
                                 "nl.arange(n)[None, :]")
            exprs.append(k)
        else:
            exprs.append(IndexExpr(int(k), (), ()))
    return exprs


def _broadcast(exprs: list[IndexExpr]) -> tuple[list[IndexExpr], tuple[int, ...]]:
    rank = max(e.ndim for e in exprs)
    aligned = [e.aligned(rank) for e in exprs]
    sizes = []
    for k in range(rank):
        ns = {e.sizes[k] for e in aligned} - {1}
        if len(ns) > 1:
            raise validation("nki_shape_mismatch", f"index expressions of shapes "
                             f"{[e.sizes for e in exprs]} do not broadcast")
        sizes.append(ns.pop() if ns else 1)
    return squeeze_positions(aligned, tuple(sizes), max(2, len(exprs)))


def advanced_index(t: NkiTensor, key: tuple) -> NkiTensor:
    """The view selected by index expressions: its shape is their broadcast shape; result
    axis ``j`` has stride ``Σ_d coef[d][j]·stride[d]`` and the offset is
    ``Σ_d const[d]·stride[d]``. On chip the partition dim takes a unit-step index."""
    exprs, sizes = _broadcast(_expressions(t, key))
    oob = None
    if any(lo < 0 or hi >= n for (lo, hi), n in zip((e.bounds() for e in exprs), t.shape)):
        oob = (tuple(exprs), t.shape, t.name)     # legal only under a mask
    strides = t.strides
    first = 1 if t.on_chip else 0
    if t.on_chip:
        _check_partition(t, exprs, sizes)
    off = t._off + sum(e.const * s for e, s in zip(exprs[first:], strides[first:]))
    dims = [(sum(e.coefs[j] * s for e, s in zip(exprs[first:], strides[first:])), n)
            for j, n in enumerate(sizes)]
    if t.on_chip:
        dims[0] = (1, sizes[0])
        return _with_oob(t._new(tuple(dims), off=off, part=t._part + exprs[0].const), oob)
    return _with_oob(t._new(tuple(dims), off=off), oob)


def _with_oob(view: NkiTensor, oob) -> NkiTensor:
    if oob is None:
        return view
    return LegacyTile(view._decl, view._dtype, view._part, view._off, view._dims, view._ind, oob)


def out_of_bounds(view: LegacyTile, rect) -> Exception | None:
    """The out-of-bounds error of an index-expression view over the rectangle ``rect``
    (``{position: (lo, hi)}``; None = the whole view), or None when it is inside."""
    exprs, shape, name = view._oob
    for d, (e, n) in enumerate(zip(exprs, shape)):
        lo = hi = e.const
        for k, (c, size) in enumerate(zip(e.coefs, e.sizes)):
            a, b = (rect or {}).get(k, (0, size))
            lo, hi = lo + min(c * a, c * (b - 1)), hi + max(c * a, c * (b - 1))
        if lo < 0 or hi >= n:
            return validation("err_tensor_access_out_of_bound", f"index {lo}..{hi} is out of "
                              f"bounds for dim {d} of {name!r} (size {n}); fix the index or "
                              "mask the access")
    return None


def _check_partition(t: NkiTensor, exprs: list[IndexExpr], sizes: tuple[int, ...]) -> None:
    """The partition index moves along result axis 0 only, with step 1; free indices do
    not move along axis 0 (partitions cannot be strided)."""
    e0 = exprs[0]
    bad = [j for j, n in enumerate(sizes) if n > 1 and e0.coefs[j] != (1 if j == 0 else 0)]
    bad += [0 for e in exprs[1:] if sizes[0] > 1 and e.coefs[0]]
    if bad:
        raise validation("nki_invalid_view", f"the partition index of {t.name!r} must be "
                         "'start + nl.arange(n)' along the first axis (step 1, no stride on "
                         f"the partition dim), got {e0!r}")


class BlockTensor:
    """An on-chip tensor with block dims before ``nl.par_dim`` (``(4, par_dim(128), 512)``):
    one tile ``(P, *blocks, *free)`` whose block dims sit in the free offset; ``t[b]``
    selects block ``b`` as a ``(P, *free)`` tile.

    Example:
        >>> w = nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.bfloat16)  # doctest: +SKIP
        >>> w[k, i_p, i_f] = nl.load(x[k * 128 + i_p, i_f])               # doctest: +SKIP
    """

    def __init__(self, base: LegacyTile, nblock: int):
        self.base, self.nblock = base, nblock

    @property
    def shape(self) -> tuple[int, ...]:
        s = self.base.shape
        return s[1:1 + self.nblock] + (s[0],) + s[1 + self.nblock:]

    @property
    def dtype(self) -> DType:
        return self.base.dtype

    @property
    def buffer(self) -> Memory:
        return self.base.buffer

    @property
    def ndim(self) -> int:
        return self.base.ndim

    @property
    def name(self) -> str:
        return self.base.name

    def _block(self, key: tuple) -> tuple[NkiTensor, tuple]:
        key = key if isinstance(key, tuple) else (key,)
        blocks, rest = key[:self.nblock], key[self.nblock:]
        for b in blocks:
            if not hasattr(b, "__index__") or isinstance(b, bool):
                raise _unsupported(f"block index {b!r} of {self.name!r}: blocks are selected "
                                   "by ints (loop indices)")
        view = index_view(self.base, (slice(None),) + tuple(int(b) for b in blocks))
        if len(blocks) < self.nblock:      # a partial block index keeps the other blocks
            return BlockTensor(as_legacy(view), self.nblock - len(blocks)), ()
        return view, rest

    def __getitem__(self, key) -> NkiTensor:
        view, rest = self._block(key)
        return legacy_index(view, rest) if rest else view

    def __setitem__(self, key, val) -> None:
        view, rest = self._block(key)
        assign(legacy_index(view, rest) if rest else view, val)

    def __repr__(self) -> str:
        return f"BlockTensor({self.name}, shape={self.shape}, buffer={self.buffer.value})"


# ----- assignment -----------------------------------------------------------------------------
# results whose instruction can write HBM directly (a DMA)
_DMA_RESULTS = ("nl.load", "nl.copy")


def _numel(shape) -> int:
    n = 1
    for c in shape:
        n *= c
    return n


def _same_view(a: NkiTensor, b: NkiTensor) -> bool:
    return a.decl.id == b.decl.id and a.access() == b.access()


def assign(dst: NkiTensor, val) -> None:
    """``dst[...] = val``: a pending result is emitted into ``dst``; a tile is copied; a
    number fills ``dst``."""
    if isinstance(val, Pending) and val._tile is None:
        if (val.kind == "matmul" and dst.buffer is not Memory.PSUM) or \
                (not dst.on_chip and val.api not in _DMA_RESULTS) or \
                _numel(val.shape) != dst.size:
            # the engine cannot write there, or numpy broadcasting: compute, then copy
            val = val.materialize()
        else:
            val.emit_into(dst)
            return
    val = value(val)
    if isinstance(val, BlockTensor):
        raise validation("err_failed_to_infer_tile_from_local_tensor", f"{val.name!r} has "
                         "block dims; index a block first")
    if isinstance(val, IndexExpr):
        raise validation("nki_invalid_argument", "an index expression is not a tile; "
                         "materialise it with nisa.iota(expr, dtype)")
    if isinstance(val, NkiTensor):
        if not _same_view(dst, val):       # `t[...] += x` ends by assigning t to itself
            copy_into(dst, val)
        return
    if isinstance(val, (int, float)):
        from nki.lang.common import Call
        from nki.lang.vector import emit_memset

        before_write(dst)
        # a bool fills with 1 or 0 (AWS's attention_token_gen: ``mask[:, n - 1:] = True``)
        emit_memset(Call("assignment"), dst, int(val) if isinstance(val, bool) else val)
        return
    raise validation("nki_invalid_argument", f"cannot assign {type(val).__name__} to a tile")


def copy_into(dst: NkiTensor, src: NkiTensor, oob_mode=None) -> None:
    """``dst = src`` with numpy broadcasting of size-1 free dims of ``src`` (``oob_mode``:
    of an indirect DMA)."""
    from nki.lang.indirect import dma_copy  # plain DMAs, gathers and scatters
    from nki.lang.vector import tensor_copy

    if src.shape != dst.shape and src.size != dst.size:
        src = broadcast_operand(src, dst.shape, "value")
    before_write(dst)
    if dst.on_chip and src.on_chip:
        tensor_copy(dst=dst, src=src)
        return
    if src.buffer is Memory.PSUM:          # DMA cannot read PSUM: stage it in SBUF
        staged = new_tile(src.shape, src.dtype, Memory.SBUF)
        tensor_copy(dst=staged, src=src)
        src = staged
    dma_copy(dst=dst, src=src, oob_mode=oob_mode)


def broadcast_operand(t: NkiTensor, shape: tuple[int, ...], role: str) -> NkiTensor:
    """``t`` as a stride-0 view of ``shape`` (numpy rules: size-1 free dims grow; the
    partition dim cannot be broadcast by a view)."""
    shape = tuple(shape)
    if t.shape == shape:
        return t
    if t.ndim != len(shape) or any(a != b and a != 1 for a, b in zip(t.shape, shape)):
        raise validation("err_store_dst_shape_smaller_than_other_shape" if t.size > 1 and
                         len(shape) == t.ndim else "nki_shape_mismatch",
                         f"{role} of shape {t.shape} does not broadcast to {shape}")
    if t.on_chip and t.shape[0] != shape[0]:
        raise validation("nki_shape_mismatch", f"{role} of shape {t.shape}: tile operators "
                         f"do not broadcast along the partition dim (to {shape}); use nl.add "
                         "and friends or nl.broadcast_to")
    return t.broadcast_to(shape)


# ----- matmul accumulation and in-place operators ---------------------------------------------
def accumulate_matmul(dst: NkiTensor, result: Pending) -> None:
    """``psum[...] += matmul``: accumulate in place on PSUM a matmul wrote; overwrite PSUM
    that holds ``nl.zeros``' zeros only (0 + x == x) or was never written (the first matmul
    of an accumulation group starts it, as the current dialect's ``accumulate=None``; a
    directly allocated tile, whose other writers the trace cannot know, counts as never
    written until a matmul writes it); else add on the Vector engine."""
    from nki.legacy.mask import rectangle, shrink

    trace = current("+=")
    # a masked matmul touches only its rectangle of the destination
    rect = rectangle(result.mask, result.space, result.api)
    if rect is None:
        return
    region = shrink(dst, rect, result.space, "dst", result.api)
    mm = trace.written_state(region.access(), matmul=True)
    if mm == "all":
        result.emit_into(dst, accumulate=True)
    elif mm == "none" and (dst.decl.id in state().zero_psum or dst.decl.user_address
                           or trace.written_state(region.access()) == "none"):
        result.emit_into(dst, accumulate=False)
    else:
        part = shrink(result.materialize(), rect, result.space, "value", result.api)
        _inplace(region, part, Alu.add)


def _inplace(dst: NkiTensor, other, alu: Alu) -> NkiTensor:
    from nki.legacy.math import emit_binary

    other = value(other)
    before_write(dst)
    emit_binary(dst, dst, other, alu, operator=True)
    return dst
