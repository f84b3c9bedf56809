"""Legacy ``nl`` compute: elementwise math with numpy broadcasting and the old dtype rules,
reductions, ``matmul``/``transpose``, ``copy``/``where``/``broadcast_to`` (spec §1.10, §3.4,
§3.5). Each returns a :class:`~nki.legacy.pending.Pending` whose ``run`` calls the current
dialect's rule with a destination; nothing here re-implements a rule.
"""

from __future__ import annotations

from nki.ir import types as irt
from nki.ir.ops import Act, Alu
from nki.ir.types import BOOL, FLOAT32, DType, Kind, Memory
from nki.lang import reduce as lreduce
from nki.lang.common import Call, dtype_of
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import validation
from nki.legacy.pending import Pending, state, value
from nki.legacy.tile import broadcast_operand, copy_into, new_tile

_CMP = (Alu.equal, Alu.not_equal, Alu.greater, Alu.greater_equal, Alu.less, Alu.less_equal,
        Alu.logical_and, Alu.logical_or, Alu.logical_xor)
_FP8 = ("float8_e4m3", "float8_e5m2", "float8_e4m3fn")


# ----- dtypes (spec §1.10) --------------------------------------------------------------------
def _weak(x) -> DType:
    """A Python scalar's dtype in promotion: bool → uint8, int → int32, float → float32."""
    if isinstance(x, bool):
        return irt.UINT8
    return irt.INT32 if isinstance(x, int) else FLOAT32


def _float_pair(a: DType, b: DType) -> DType:
    names = {a.name, b.name}
    if names == {"float16", "bfloat16"}:
        return FLOAT32
    if names <= set(_FP8):
        return irt.BFLOAT16
    if names & set(_FP8):
        return a if b.name in _FP8 else b
    if names == {"float32", "tfloat32"}:
        return FLOAT32
    return a if a.itemsize >= b.itemsize else b


def _int_pair(a: DType, b: DType) -> DType:
    if a.kind is Kind.BOOL:
        return b
    if b.kind is Kind.BOOL:
        return a
    if a.kind == b.kind:
        return a if a.itemsize >= b.itemsize else b
    s, u = (a, b) if a.kind is Kind.INT else (b, a)
    if s.itemsize > u.itemsize:
        return s
    return {1: irt.INT16, 2: irt.INT32}.get(u.itemsize, FLOAT32)


def promote(x, y) -> DType:
    """The result dtype of ``x op y``: floats win over ints, wider wins, and mixed pairs widen
    (fp16+bf16 → fp32, int8+uint8 → int16, int32+uint32 → fp32); Python scalars are weak
    int32 / float32 (so ``int8 + 2`` is int32 and ``fp16 + 1.2`` is fp32, as NKI says)."""
    a = x.dtype if isinstance(x, NkiTensor) else _weak(x)
    b = y.dtype if isinstance(y, NkiTensor) else _weak(y)
    if a == b:
        return a
    if a.is_float and b.is_float:
        return _float_pair(a, b)
    if a.is_float or b.is_float:
        return a if a.is_float else b
    return _int_pair(a, b)


def _out_dtype(dtype, default: DType) -> DType:
    return dtype_of(dtype) if dtype is not None else default


# ----- elementwise ----------------------------------------------------------------------------
def _is_number(x) -> bool:
    """A Python or numpy number (``w // 2`` of numpy ints is ``np.int32``), not a bool."""
    import numpy as np

    return isinstance(x, (int, float, np.number)) and not isinstance(x, (bool, np.bool_))


def _numpy_broadcast(shapes) -> tuple[int, ...] | None:
    rank = max(len(s) for s in shapes)
    out = []
    for k in range(rank):
        ns = {s[k - rank + len(s)] for s in shapes if k - rank + len(s) >= 0} - {1}
        if len(ns) > 1:
            return None
        out.append(ns.pop() if ns else 1)
    return tuple(out)


def _broadcast_shape(api: str, *shapes) -> tuple[int, ...]:
    """numpy's broadcast of the operand shapes; failing that, a per-partition scalar (a
    ``[P, 1]`` or ``[P, 1, 1]`` tile, as ``t[ti, i_p, 0]`` selects) beside a wider tile of P
    partitions broadcasts over all its free dims, as the engines apply a scalar operand
    (AWS's blockwise_mm_bwd multiplies ``[128, 4, 128]`` by ``[128, 1]``)."""
    out = _numpy_broadcast(shapes)
    if out is not None:
        return out
    scalars = [s for s in shapes if len(s) >= 2 and all(n == 1 for n in s[1:])]
    rest = [s for s in shapes if s not in scalars]
    out = _numpy_broadcast(rest) if rest else None
    if out is None or any(s[0] not in (1, out[0]) for s in scalars):
        raise validation("nki_shape_mismatch", f"{api}: shapes {list(shapes)} do not "
                         "broadcast")
    return out


def _p1(t: NkiTensor, shape) -> bool:
    """A [P, 1] operand of a [P, F...] result: a per-partition scalar."""
    return t.size == t.shape[0] and t.shape[0] == shape[0]


def _partition_broadcast(t: NkiTensor, parts: int) -> NkiTensor:
    """Replicate a one-partition tile across ``parts`` partitions (nl ops may broadcast P)."""
    from nki.lang.select import broadcast_to

    return broadcast_to(t, (parts,) + t.shape[1:])


def emit_binary(dst: NkiTensor, x, y, alu: Alu, operator: bool = False) -> None:
    """Emit ``dst = x alu y`` for tiles/numbers: a number or a [P, 1] tile is a
    tensor_scalar operand; other tiles broadcast along free dims (views) and, for ``nl``
    functions but not operators, along the partition dim."""
    from nki.lang.vector import tensor_scalar, tensor_tensor

    if not isinstance(x, NkiTensor) and not isinstance(y, NkiTensor):
        raise validation("nki_invalid_argument", "at least one operand must be a tile")
    shape = dst.shape
    if not operator:
        x, y = ((_partition_broadcast(t, shape[0]) if isinstance(t, NkiTensor) and
                 t.shape[0] == 1 and shape[0] > 1 else t) for t in (x, y))
    x_tile, y_tile = isinstance(x, NkiTensor), isinstance(y, NkiTensor)
    # a number or a [P, 1] tile beside a full tile is the tensor_scalar operand; a number
    # beside a [P, 1] tile makes that tile the data
    if not y_tile or (x_tile and _p1(y, shape) and not _p1(x, shape)):
        tensor_scalar(dst=dst, data=broadcast_operand(x, shape, "x"), op0=alu,
                      operand0=float(y) if _is_number(y) else y)
    elif not x_tile or (_p1(x, shape) and not _p1(y, shape)):
        tensor_scalar(dst=dst, data=broadcast_operand(y, shape, "y"), op0=alu,
                      operand0=float(x) if _is_number(x) else x, reverse0=True)
    else:
        if x.buffer is Memory.PSUM and y.buffer is Memory.PSUM:
            staged = new_tile(y.shape, y.dtype, Memory.SBUF)
            copy_into(staged, y)
            y = staged
        tensor_tensor(dst=dst, data1=broadcast_operand(x, shape, "x"),
                      data2=broadcast_operand(y, shape, "y"), op=alu)


def binary(api: str, alu: Alu, x, y, dtype=None, mask=None, operator: bool = False) -> Pending:
    """A pending ``x alu y`` with numpy broadcasting; comparisons default to ``bool_``."""
    x, y = value(x), value(y)
    tiles = [t for t in (x, y) if isinstance(t, NkiTensor)]
    if not tiles:
        raise validation("nki_invalid_argument", f"{api}: at least one operand must be a tile")
    shape = _broadcast_shape(api, *(t.shape for t in tiles))
    if operator and any(t.shape[0] != shape[0] for t in tiles):
        raise validation("nki_shape_mismatch", f"{api}: tile operators do not broadcast "
                         f"along the partition dim ({[t.shape for t in tiles]}); use nl.add "
                         "and friends")
    default = BOOL if alu in _CMP else promote(x, y)
    return Pending(api, shape, _out_dtype(dtype, default), Memory.SBUF, {"x": x, "y": y},
                   lambda dst, x, y: emit_binary(dst, x, y, alu, operator), mask=mask)


def unary(api: str, act: Act | None, alu: Alu | None, x, dtype=None, mask=None) -> Pending:
    """A pending activation (ScalarE) or, for ALU-only ops, a VectorE ``tensor_scalar``."""
    from nki.lang.activation import activation
    from nki.lang.vector import tensor_scalar

    x = _tile(api, x, "x")

    def run(dst, x):
        if act is not None:
            activation(dst=dst, op=act, data=x)
        else:
            tensor_scalar(dst=dst, data=x, op0=alu, operand0=0.0)

    return Pending(api, x.shape, _out_dtype(dtype, x.dtype), Memory.SBUF, {"x": x}, run,
                   mask=mask)


def _tile(api: str, x, role: str) -> NkiTensor:
    x = value(x)
    if not isinstance(x, NkiTensor):
        from nki.legacy.tile import BlockTensor

        what = "has block dims; index a block first" if isinstance(x, BlockTensor) else \
            f"must be a tile, got {type(x).__name__}"
        raise validation("err_failed_to_infer_tile_from_local_tensor", f"{api}: {role!r} "
                         f"{what}")
    return x


# ----- copies and selects ---------------------------------------------------------------------
def copy(src, *, mask=None, dtype=None) -> Pending:
    """``nl.copy``: a copy of a tile (SBUF result; assignable anywhere).

    Example:
        >>> out_sb = nl.copy(res_psum, dtype=nl.bfloat16)   # doctest: +SKIP
    """
    x = _tile("nl.copy", src, "src")
    return Pending("nl.copy", x.shape, _out_dtype(dtype, x.dtype), Memory.SBUF, {"src": x},
                   lambda dst, src: copy_into(dst, src), mask=mask)


def where(condition, x, y, *, dtype=None, mask=None) -> Pending:
    """``nl.where(condition, x, y)``: ``x`` where ``condition`` else ``y`` (tiles of the
    condition's shape, or numbers).

    Example:
        >>> r = nl.where(t > 0, t, 0.0)             # doctest: +SKIP
    """
    from nki.lang.select import where as where_

    c = _tile("nl.where", condition, "condition")
    x, y = value(x), value(y)
    like = x if isinstance(x, NkiTensor) else y if isinstance(y, NkiTensor) else None
    dt = _out_dtype(dtype, like.dtype if like is not None else FLOAT32)
    def produce(c, x, y):
        # numpy broadcasting of the branches (an iota over some dims of the condition's
        # shape, nki-samples' select_and_scatter): partitions by a copy, free dims by views
        x, y = (_broadcast_like(t, c.shape) for t in (x, y))
        return where_(c, x, y, dtype=dt)

    return Pending("nl.where", c.shape, dt, Memory.SBUF, {"c": c, "x": x, "y": y}, None,
                   mask=mask, produce=produce)


def _broadcast_like(t, shape: tuple[int, ...]):
    if not isinstance(t, NkiTensor) or t.shape == tuple(shape):
        return t
    if t.shape[0] == 1 and shape[0] > 1:
        t = _partition_broadcast(t, shape[0])
    return broadcast_operand(t, shape, "x")


def broadcast_to(src, shape) -> Pending:
    """``nl.broadcast_to(src, shape=...)``: numpy-rule broadcast into a new tile (a partition
    broadcast of a float tile is a TensorE ones-matmul, as NKI makes it: nki/legacy/broadcast.py).

    Example:
        >>> b = nl.broadcast_to(row, shape=(128, 512))   # doctest: +SKIP
    """
    from nki.legacy.broadcast import partition_broadcast

    x = _tile("nl.broadcast_to", src, "src")
    shape = tuple(int(s) for s in shape)
    return Pending("nl.broadcast_to", shape, x.dtype, Memory.SBUF, {"x": x}, None,
                   produce=lambda x: partition_broadcast(x, shape))


def gather_flattened(data, indices, *, mask=None, dtype=None) -> Pending:
    """Per partition, ``data[p].flatten()[indices[p, ...]]`` (uint32 indices).

    Example:
        >>> g = nl.gather_flattened(data=t, indices=idx)   # doctest: +SKIP
    """
    from nki.lang.indirect import gather_flattened as gf

    d, i = _tile("nl.gather_flattened", data, "data"), _tile("nl.gather_flattened", indices,
                                                             "indices")
    dt = _out_dtype(dtype, d.dtype)
    return Pending("nl.gather_flattened", i.shape, dt, Memory.SBUF, {"d": d, "i": i}, None,
                   mask=mask, produce=lambda d, i: gf(d, i, dtype=dt))


# ----- reductions -----------------------------------------------------------------------------
def _axes(api: str, x: NkiTensor, axis) -> tuple[int, ...]:
    return lreduce._axes(Call(api), x, list(axis) if isinstance(axis, (list, tuple)) else axis)


def _free_axes(api: str, x: NkiTensor, axis) -> tuple[int, ...]:
    """Sorted free axes (int or list; any free dims, not only trailing ones)."""
    raw = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    axes = tuple(sorted({int(a) + x.ndim if int(a) < 0 else int(a) for a in raw}))
    if not axes or axes[0] < 1 or axes[-1] >= x.ndim or len(axes) != len(raw):
        raise validation("nki_invalid_argument", f"{api}: axis {axis!r} must name distinct "
                         f"free dims of the {x.ndim}-D tile {x.shape} (not the partition dim)")
    return axes


def _reduced(x: NkiTensor, axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else n for i, n in enumerate(x.shape))
    shape = tuple(n for i, n in enumerate(x.shape) if i not in axes)
    return shape if len(shape) >= 2 else shape + (1,)


def reduction(api: str, alu: Alu, x, axis, dtype=None, mask=None, keepdims=False) -> Pending:
    """``nl.sum/max/min/prod``: reduce free axes (int or list). Axes that are not trailing
    (``axis=[2, 4]`` of a pooling window) are moved last by a free permuted view."""
    x = _tile(api, x, "x")
    axes = _free_axes(api, x, axis)
    shape = _reduced(x, axes, keepdims)
    kept = [d for d in range(x.ndim) if d not in axes]
    order = kept + list(axes)
    trailing = tuple(range(len(kept), x.ndim))

    def run(dst, x):
        xp = x.permute(order) if order != list(range(x.ndim)) else x
        lreduce._emit_reduce(Call(api), dst, alu, xp, trailing)

    return Pending(api, shape, _out_dtype(dtype, x.dtype), Memory.SBUF, {"x": x}, run,
                   mask=mask, space=x.shape)


def mean(x, axis, *, dtype=None, mask=None, keepdims=False) -> Pending:
    """Arithmetic mean over trailing free ``axis`` (fp32 for integer inputs).

    Example:
        >>> m = nl.mean(t, axis=[1])                # doctest: +SKIP
    """
    x = _tile("nl.mean", x, "x")
    axes = _axes("nl.mean", x, axis)
    shape = lreduce._reduced_shape(x, axes, keepdims)
    dt = _out_dtype(dtype, x.dtype if x.dtype.is_float else FLOAT32)
    return Pending("nl.mean", shape, dt, Memory.SBUF, {"x": x},
                   lambda dst, x: lreduce._mean_into(Call("nl.mean"), dst, x, axes),
                   mask=mask, space=x.shape)


def _composite(api: str, fn, x, shape, dtype: DType, mask, **kw) -> Pending:
    x = _tile(api, x, "x")
    return Pending(api, shape, dtype, Memory.SBUF, {"x": x}, None, mask=mask,
                   space=x.shape, produce=lambda x: fn(x, dtype=dtype, **kw))


def var(x, axis, *, dtype=None, mask=None) -> Pending:
    """Population variance over trailing free ``axis``.

    Example:
        >>> v = nl.var(t, axis=1)                   # doctest: +SKIP
    """
    t = _tile("nl.var", x, "x")
    axes = _axes("nl.var", t, axis)
    dt = _out_dtype(dtype, t.dtype if t.dtype.is_float else FLOAT32)
    return _composite("nl.var", lreduce.var, t, lreduce._reduced_shape(t, axes, False), dt,
                      mask, axis=axes)


def all_(x, axis, *, dtype=None, mask=None) -> Pending:
    """Whether every element over trailing free ``axis`` is non-zero (``bool_``)."""
    t = _tile("nl.all", x, "x")
    axes = _axes("nl.all", t, axis)
    return _composite("nl.all", lreduce.all_, t, lreduce._reduced_shape(t, axes, False),
                      _out_dtype(dtype, BOOL), mask, axis=axes)


def softmax(x, axis, *, dtype=None, compute_dtype=None, mask=None) -> Pending:
    """``exp(x - max) / sum(exp(x - max))`` over trailing free ``axis``.

    Example:
        >>> p = nl.softmax(scores, axis=[1])        # doctest: +SKIP
    """
    t = _tile("nl.softmax", x, "x")
    axes = _axes("nl.softmax", t, axis)
    return _composite("nl.softmax", lreduce.softmax, t, t.shape, _out_dtype(dtype, t.dtype),
                      mask, axis=axes)


def rms_norm(x, w, axis, n, epsilon=1e-6, *, dtype=None, compute_dtype=None,
             mask=None) -> Pending:
    """``x / sqrt(sum(x**2 over axis) / n + epsilon) * w``.

    Example:
        >>> y = nl.rms_norm(x, w, axis=1, n=512)     # doctest: +SKIP
    """
    t, wt = _tile("nl.rms_norm", x, "x"), _tile("nl.rms_norm", w, "w")
    dt = _out_dtype(dtype, t.dtype)
    return Pending("nl.rms_norm", t.shape, dt, Memory.SBUF, {"x": t, "w": wt}, None,
                   mask=mask, produce=lambda x, w: lreduce.rms_norm(
                       x, w, axis, n, epsilon, dtype=dt, compute_dtype=compute_dtype))


def dropout(x, rate, *, dtype=None, mask=None) -> Pending:
    """``x`` with each element zeroed with probability ``rate`` (no rescaling)."""
    from nki.lang.select import nl_dropout

    t = _tile("nl.dropout", x, "x")
    dt = _out_dtype(dtype, t.dtype)
    return Pending("nl.dropout", t.shape, dt, Memory.SBUF, {"x": t, "rate": value(rate)},
                   None, mask=mask, produce=lambda x, rate: nl_dropout(x, rate, dtype=dt))


# ----- TensorE --------------------------------------------------------------------------------
def loop_reduce(x, op, loop_indices, *, dtype=None, mask=None, **kwargs) -> Pending:
    """``acc[...] = nl.loop_reduce(x, op=np.add, loop_indices=[k])``: ``acc = op(acc, x)``
    (the destination is also the rhs operand; AWS documents it as ``tensor_tensor(acc, x,
    op)``), so a loop accumulates ``x`` into ``acc``. It must be assigned into its
    accumulator.

    Example:
        >>> acc[...] = nl.loop_reduce(ps, op=np.add, loop_indices=[k])   # doctest: +SKIP
    """
    from nki.lang.operators import as_alu

    alu = as_alu(op)
    if alu is None:
        raise validation("nki_invalid_argument", f"nl.loop_reduce: op must be an ALU "
                         f"operator (np.add, nl.maximum, ...), got {op!r}")
    if not isinstance(loop_indices, (list, tuple)):
        raise validation("nki_invalid_argument", "nl.loop_reduce: loop_indices must be a "
                         "list of loop indices")
    x = _tile("nl.loop_reduce", x, "x")
    p = Pending("nl.loop_reduce", x.shape, _out_dtype(dtype, x.dtype), Memory.SBUF, {"x": x},
                None, mask=mask)

    def run(dst, x):
        if p._tile is not None and dst.decl is p._tile.decl:
            raise validation("nki_invalid_argument", "nl.loop_reduce reads its destination: "
                             "assign it into the accumulator (acc[...] = nl.loop_reduce(...))")
        emit_binary(dst, dst, x, alu)
        # assigned, it is spent: a later write to ``x`` must not materialise it into a
        # tile of its own (which it cannot have: its value is the accumulator's)
        state().live.discard(p)

    p.run = run
    return p


def _free(t: NkiTensor) -> int:
    return t.size // t.shape[0]


def _to_sbuf(t: NkiTensor) -> NkiTensor:
    if t.buffer is Memory.SBUF:
        return t
    staged = new_tile(t.shape, t.dtype, Memory.SBUF)
    copy_into(staged, t)
    return staged


def _unsupported(detail: str):
    from nki.errors import NkiUnsupportedError, fail
    from nki.lang.tracer import user_loc

    return fail("nki_not_implemented", detail, user_loc(), NkiUnsupportedError)
