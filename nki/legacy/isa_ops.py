"""The legacy ``nisa`` signatures (``neuronxcc.nki.isa``, spec §4 "old" column): each call
returns a pending tile, takes ``mask=`` and ``dtype=``, and runs the current dialect's rule
with a destination (nothing here re-implements a rule)."""

from __future__ import annotations

from nki.ir.ops import Alu, Engine, ReduceCmd
from nki.ir.types import FLOAT32, Memory
from nki.lang import activation as _act
from nki.lang import matmul as _mm
from nki.lang import reduce as _red
from nki.lang import select as _sel
from nki.lang import vector as _vec
from nki.lang.common import Call, dtype_of
from nki.lang.hints import records
from nki.lang.operators import as_alu
from nki.lang.tensor import NkiTensor
from nki.lang.tracer import validation
from nki.legacy.index import IndexExpr, Predicate
from nki.legacy.mask import rect_predicate, rectangle, shrink
from nki.legacy.math import _free, _tile, _to_sbuf, promote
from nki.legacy.matmul import matmul_mask
from nki.legacy.pending import Pending, before_write, value
from nki.legacy.tile import copy_into, new_tile

_CMP = {"<": Alu.less, "<=": Alu.less_equal, ">": Alu.greater, ">=": Alu.greater_equal}


def _dt(dtype, default):
    return dtype_of(dtype) if dtype is not None else default


def _pending(api, shape, dtype, operands: dict, run, mask=None, space=None,
             buffer=Memory.SBUF, eager=False, **kw) -> Pending:
    p = Pending(api, shape, dtype, buffer, operands, run, mask=mask, space=space, **kw)
    if eager:          # it also writes a side output: emit now, in program order
        p.materialize()
    return p


def _values(d: dict) -> dict:
    """Operands as the current rules take them: tiles materialised, numpy scalars (a
    ``np.int32`` from a shape computation) as Python numbers."""
    return {k: _number_or_tile(v) for k, v in d.items()}


# ----- TensorE --------------------------------------------------------------------------------
def nc_matmul(stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, tile_position=(), tile_size=(), mask=None, perf_mode=None,
              **kwargs) -> Pending:
    """``stationary.T @ moving`` as an fp32 PSUM tile; ``psum[...] += nisa.nc_matmul(...)``
    accumulates in place.

    Example:
        >>> res[...] += nisa.nc_matmul(a_t, b)      # doctest: +SKIP
    """
    s, m = _tile("nisa.nc_matmul", stationary, "stationary"), _tile("nisa.nc_matmul", moving,
                                                                      "moving")
    # double-row modes contract over [K, 2, F] operands: the result is [F_s, F_m]
    double = perf_mode is not None and "double_row" in str(getattr(perf_mode, "value",
                                                                      perf_mode))
    frees = (s.shape[-1], m.shape[-1]) if double else (_free(s), _free(m))
    s, m, shape, mask = matmul_mask("nisa.nc_matmul", mask, (s, 1), (m, 1), frees)

    def run(dst, s, m, accumulate=False):
        # NKI 0.1 on trn1 wrote transposes to fp32 PSUM: a plain matmul against the identity
        # moving tile gives the same values there
        transpose = is_transpose and dst.dtype == s.dtype
        _mm.nc_matmul(dst=dst, stationary=_to_sbuf(s), moving=_to_sbuf(m),
                      is_stationary_onezero=is_stationary_onezero,
                      is_moving_onezero=is_moving_onezero, is_transpose=transpose,
                      accumulate=accumulate, tile_position=tile_position,
                      tile_size=tile_size, perf_mode=perf_mode)

    dt = s.dtype if is_transpose else FLOAT32
    return _pending("nisa.nc_matmul", shape, dt, {"s": s, "m": m}, run, mask=mask,
                    buffer=Memory.PSUM, kind="" if is_transpose else "matmul",
                    shrink_operands=False)


def nc_transpose(data, *, mask=None, dtype=None, engine=Engine.unknown, **kwargs) -> Pending:
    """The partition↔free transpose of ``data``: on the Tensor engine (≤128×128, PSUM
    result) or, with ``engine=nisa.vector_engine``, the Vector engine (≤32×32, SBUF).

    Example:
        >>> t_ps = nisa.nc_transpose(tile)          # doctest: +SKIP
    """
    x = _tile("nisa.nc_transpose", data, "data")
    eng = Engine(int(engine)) if engine is not None else Engine.unknown
    buffer = Memory.SBUF if eng is Engine.vector else Memory.PSUM

    def run(dst, x):
        if eng is Engine.vector:
            _mm.nc_transpose(dst=dst, data=x, engine=Engine.vector)
        elif dst.buffer is Memory.PSUM and dst.dtype == x.dtype:
            _mm.nc_transpose(dst=dst, data=_to_sbuf(x), engine=Engine.tensor)
        else:
            ps = new_tile((_free(x), x.shape[0]), x.dtype, Memory.PSUM)
            _mm.nc_transpose(dst=ps, data=_to_sbuf(x), engine=Engine.tensor)
            copy_into(dst, ps)

    return _pending("nisa.nc_transpose", (_free(x), x.shape[0]), _dt(dtype, x.dtype),
                    {"x": x}, run, buffer=buffer)


# ----- ScalarE --------------------------------------------------------------------------------
def activation(op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=ReduceCmd.idle, mask=None, dtype=None, **kwargs) -> Pending:
    """``op(data * scale + bias)`` on the Scalar engine (optional row sum into
    ``reduce_res``).

    Example:
        >>> e = nisa.activation(op=nl.exp, data=s, bias=neg_max, scale=1.0)  # doctest: +SKIP
    """
    x = _tile("nisa.activation", data, "data")
    ops = _values({"x": x, "bias": bias, "scale": scale, "reduce_res": reduce_res})

    def run(dst, x, bias, scale, reduce_res):
        _act.activation(dst=dst, op=op, data=x, bias=bias, scale=scale, reduce_op=reduce_op,
                        reduce_res=reduce_res, reduce_cmd=reduce_cmd)

    return _pending("nisa.activation", x.shape, _dt(dtype, x.dtype), ops, run, mask,
                    eager=reduce_res is not None)


def activation_reduce(op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None,
                      dtype=None, **kwargs) -> Pending:
    """``activation`` plus the row sum of the results into ``reduce_res`` [P, 1].

    Example:
        >>> e = nisa.activation_reduce(op=nl.exp, data=s, reduce_op=nl.add,
        ...                            reduce_res=row_sum)   # doctest: +SKIP
    """
    x = _tile("nisa.activation_reduce", data, "data")
    ops = _values({"x": x, "bias": bias, "scale": scale, "reduce_res": reduce_res})

    def run(dst, x, bias, scale, reduce_res):
        _act.activation_reduce(dst=dst, op=op, data=x, reduce_op=reduce_op,
                               reduce_res=reduce_res, bias=bias, scale=scale)

    return _pending("nisa.activation_reduce", x.shape, _dt(dtype, x.dtype), ops, run, mask,
                    eager=True)


# ----- VectorE / GpSimd -----------------------------------------------------------------------
def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=Engine.unknown,
                  **kwargs) -> Pending:
    """``data1 op data2`` elementwise.

    Example:
        >>> c = nisa.tensor_tensor(a, b, op=nl.add)   # doctest: +SKIP
    """
    a, b = _tile("nisa.tensor_tensor", data1, "data1"), _tile("nisa.tensor_tensor", data2,
                                                              "data2")
    a, b = _free_broadcast(a, b), _free_broadcast(b, a)
    return _pending("nisa.tensor_tensor", a.shape, _dt(dtype, promote(a, b)), {"a": a, "b": b},
                    lambda dst, a, b: _vec.tensor_tensor(dst=dst, data1=a, data2=b, op=op,
                                                         engine=engine), mask)


def _free_broadcast(t: NkiTensor, other: NkiTensor) -> NkiTensor:
    """An operand whose free dims are ``other``'s or 1 (``[P, 1]`` against ``[P, F]``,
    ``[P, 1, F]`` against ``[P, G, F]``), as a stride-0 view of ``other``'s shape. The old
    ``tensor_tensor`` broadcast along free dimensions (its docs point such uses to
    ``tensor_scalar`` for speed, not for legality; AWS's double-row matmul sample and
    flash_paged_attn_varlen's block-table transform rely on it); anything else is left for
    the rule to judge."""
    if t.ndim >= 2 and other.ndim > t.ndim and (
            t.size == t.shape[0] or t.shape == other.shape[:t.ndim]):
        # ``[P, 1]``, or ``other``'s leading dims (a ``[P, K]`` predicate over ``[P, K, H]``
        # in flash_paged_attn_varlen's decode kernel), over every further dim
        t = NkiTensor.reshape(t, t.shape + (1,) * (other.ndim - t.ndim))
    if t.ndim >= 2 and other.ndim == t.ndim and other.shape[0] == t.shape[0] and \
            other.size > t.size and \
            all(a in (1, b) for a, b in zip(t.shape[1:], other.shape[1:])):
        return NkiTensor.broadcast_to(t, other.shape)
    return t


def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None,
                  reverse1=False, *, dtype=None, mask=None, engine=Engine.unknown,
                  **kwargs) -> Pending:
    """``(data op0 operand0) op1 operand1`` with scalar or [P, 1] operands.

    Example:
        >>> y = nisa.tensor_scalar(x, np.multiply, 2.0, op1=np.add, operand1=1.0)  # doctest: +SKIP
    """
    x = _tile("nisa.tensor_scalar", data, "data")
    ops = _values({"x": x, "o0": operand0, "o1": operand1})

    def run(dst, x, o0, o1):
        _vec.tensor_scalar(dst=dst, data=x, op0=op0, operand0=o0, reverse0=reverse0, op1=op1,
                           operand1=o1, reverse1=reverse1, engine=engine)

    return _pending("nisa.tensor_scalar", x.shape, _dt(dtype, x.dtype), ops, run, mask)


def tensor_copy(src, *, mask=None, dtype=None, engine=Engine.unknown, **kwargs) -> Pending:
    """A copy of ``src`` (bit-exact when dtypes match)."""
    x = _tile("nisa.tensor_copy", src, "src")
    return _pending("nisa.tensor_copy", x.shape, _dt(dtype, x.dtype), {"x": x},
                    lambda dst, x: _vec.tensor_copy(dst=dst, src=x, engine=engine), mask)


def tensor_copy_dynamic_src(src, *, mask=None, dtype=None, engine=Engine.unknown,
                            **kwargs) -> Pending:
    """A copy of a view whose start is read at run time (``src[i_p, idx[0, j] + i_f]``);
    NKI 0.4 replaced it with ``tensor_copy`` of an ``.ap(scalar_offset=)`` view."""
    return tensor_copy(src, mask=mask, dtype=dtype, engine=engine)


def tensor_copy_dynamic_dst(*, dst, src, mask=None, dtype=None, engine=Engine.unknown,
                            **kwargs) -> None:
    """Copy ``src`` into a view whose start is read at run time
    (``dst[i_p, idx[0, j] + i_f]``)."""
    from nki.legacy.tile import assign

    assign(dst, tensor_copy(src, mask=mask, dtype=dtype, engine=engine))


def reciprocal(data, *, dtype=None, mask=None, **kwargs) -> Pending:
    """``1 / data`` on the Vector engine."""
    x = _tile("nisa.reciprocal", data, "data")
    return _pending("nisa.reciprocal", x.shape, _dt(dtype, x.dtype), {"x": x},
                    lambda dst, x: _vec.reciprocal(dst=dst, data=x), mask)


def memset(shape, value, dtype, *, mask=None, engine=Engine.unknown, **kwargs) -> Pending:
    """A new tile of ``shape`` filled with ``value``.

    Example:
        >>> z = nisa.memset((128, 1), 0.0, nl.float32)   # doctest: +SKIP
    """
    return _pending("nisa.memset", tuple(shape), dtype_of(dtype), {},
                    lambda dst: _vec.memset(dst=dst, value=value, engine=engine), mask)


def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False,
                  **kwargs) -> Pending:
    """Reduce ``data`` with ``op`` over trailing free ``axis``.

    Example:
        >>> m = nisa.tensor_reduce(np.max, data=x, axis=(1,))   # doctest: +SKIP
    """
    x = _tile("nisa.tensor_reduce", data, "data")
    call = Call("nisa.tensor_reduce")
    ax = list(axis) if isinstance(axis, (tuple, list)) else axis
    if mask is None and not keepdims:
        x, ax = _reduced_last(x, ax)
    shape = _red._reduced_shape(x, _red._axes(call, x, ax), keepdims)

    def run(dst, x):
        _red.tensor_reduce(dst=dst, op=op, data=x, axis=ax, negate=negate, keepdims=keepdims)

    return _pending("nisa.tensor_reduce", shape, _dt(dtype, x.dtype), {"x": x}, run, mask,
                    space=x.shape)


def _reduced_last(x: NkiTensor, axis) -> tuple[NkiTensor, object]:
    """Free axes that are not the trailing ones (``axis=(1,)`` of a ``[P, K, Q]`` tile, as
    flash_paged_attn_varlen reduces its K tiles to a ``[P, Q]`` max): the view with its
    free dims reordered so the reduced ones come last (a strided access pattern, which the
    engine reads in any order) and those as the trailing axes; the result keeps the other
    dims in order, as numpy does. Anything else is unchanged, for the rule to judge."""
    raw = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    nd = x.ndim
    if not all(type(a) is int and -nd <= a < nd for a in raw):
        return x, axis
    axes = sorted({a % nd for a in raw})
    if len(axes) != len(raw) or 0 in axes or axes == list(range(nd - len(axes), nd)):
        return x, axis
    kept = [d for d in range(1, nd) if d not in axes]
    return x.permute([0] + kept + axes), list(range(nd - len(axes), nd))


def tensor_partition_reduce(op, data, *, mask=None, dtype=None, **kwargs) -> Pending:
    """Reduce across partitions: ``[P, F...] -> [1, F...]`` (GpSimd)."""
    x = _tile("nisa.tensor_partition_reduce", data, "data")
    return _pending("nisa.tensor_partition_reduce", (1,) + x.shape[1:], _dt(dtype, x.dtype),
                    {"x": x}, lambda dst, x: _red.tensor_partition_reduce(dst=dst, op=op,
                                                                          data=x), mask)


def tensor_scalar_reduce(*, data, op0, operand0, reduce_op, reduce_res, reverse0=False,
                         dtype=None, mask=None, **kwargs) -> Pending:
    """``data op0 operand0`` with a free-dim reduction into ``reduce_res`` [P, 1]."""
    x = _tile("nisa.tensor_scalar_reduce", data, "data")
    ops = _values({"x": x, "o0": operand0, "res": reduce_res})

    def run(dst, x, o0, res):
        _red.tensor_scalar_reduce(dst=dst, data=x, op0=op0, operand0=o0, reduce_op=reduce_op,
                                  reduce_res=res, reverse0=reverse0)

    return _pending("nisa.tensor_scalar_reduce", x.shape, _dt(dtype, x.dtype), ops, run,
                    mask, eager=True)


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *,
                       dtype=None, mask=None, **kwargs) -> Pending:
    """``r[i] = op1(op0(data0[i], r[i-1]), data1[i])`` along the free dims."""
    a = _tile("nisa.tensor_tensor_scan", data0, "data0")
    ops = _values({"a": a, "b": data1, "init": initial})

    def run(dst, a, b, init):
        _red.tensor_tensor_scan(dst=dst, data0=a, data1=b, initial=init, op0=op0, op1=op1,
                                reverse0=reverse0, reverse1=reverse1)

    return _pending("nisa.tensor_tensor_scan", a.shape, _dt(dtype, a.dtype), ops, run, mask)


def bn_stats(data, *, mask=None, dtype=None, **kwargs) -> Pending:
    """Per partition (count, mean, var·count) of even then odd elements: ``[P, 6]``."""
    x = _tile("nisa.bn_stats", data, "data")
    x, mask = _reduced_mask("nisa.bn_stats", x, mask)
    return _pending("nisa.bn_stats", (x.shape[0], 6), _dt(dtype, x.dtype), {"x": x},
                    lambda dst, x: _red.bn_stats(dst=dst, data=x), mask)


def _reduced_mask(api: str, x, mask, width: int = 6):
    """A mask over the input of an instruction whose output, ``[P, width]``, does not keep
    the input's free dims (``bn_stats``, ``max8``, ``nc_find_index8``): the free bounds
    shrink the input now (the statistics then count only the kept elements, as the
    layernorm tutorial's last partial chunk needs); the partition bound stays a mask over
    the ``[P, width]`` result."""
    rect = rectangle(mask, x.shape, api)
    if rect is None:
        return x, False
    x = shrink(x, {k: b for k, b in rect.items() if k != 0}, x.shape, "data", api)
    return x, rect_predicate({k: b for k, b in rect.items() if k == 0}, (x.shape[0], width))


def bn_aggr(data, *, mask=None, dtype=None, **kwargs) -> Pending:
    """Aggregate ``bn_stats`` triples into ``[P, 2]`` = (mean, var)."""
    x = _tile("nisa.bn_aggr", data, "data")
    return _pending("nisa.bn_aggr", (x.shape[0], 2), _dt(dtype, x.dtype), {"x": x},
                    lambda dst, x: _red.bn_aggr(dst=dst, data=x), mask)


def scalar_tensor_tensor(*, data, op0, operand0, op1, operand1, reverse0=False,
                         reverse1=False, dtype=None, mask=None, **kwargs) -> Pending:
    """``(data op0 operand0) op1 operand1``: operand0 scalar/[P,1], operand1 a tile."""
    x = _tile("nisa.scalar_tensor_tensor", data, "data")
    ops = _values({"x": x, "o0": operand0, "o1": operand1})

    def run(dst, x, o0, o1):
        _sel.scalar_tensor_tensor(dst=dst, data=x, op0=op0, operand0=o0, op1=op1,
                                  operand1=o1, reverse0=reverse0, reverse1=reverse1)

    return _pending("nisa.scalar_tensor_tensor", x.shape, _dt(dtype, x.dtype), ops, run, mask)


def dropout(data, prob, *, mask=None, dtype=None, **kwargs) -> Pending:
    """``data`` with elements zeroed with probability ``prob``."""
    x = _tile("nisa.dropout", data, "data")
    ops = _values({"x": x, "prob": prob})
    return _pending("nisa.dropout", x.shape, _dt(dtype, x.dtype), ops,
                    lambda dst, x, prob: _sel.dropout(dst=dst, data=x, prob=prob), mask)


def select_reduce(*, dst, predicate, on_true, on_false, reduce_res=None,
                  reduce_cmd=ReduceCmd.idle, reduce_op=Alu.maximum, reverse_pred=False,
                  mask=None, dtype=None, **kwargs) -> None:
    """``dst = where(predicate, on_true, on_false)`` with an optional max into
    ``reduce_res`` (writes ``dst`` directly, as in the old API)."""
    d = value(dst)
    before_write(d)
    _sel.select_reduce(dst=d, predicate=value(predicate), on_true=value(on_true),
                       on_false=value(on_false), reduce_res=value(reduce_res),
                       reduce_cmd=reduce_cmd, reduce_op=reduce_op, reverse_pred=reverse_pred)


def range_select(*, on_true_tile, comp_op0, comp_op1, bound0, bound1,
                 reduce_cmd=ReduceCmd.idle, reduce_res=None, reduce_op=Alu.maximum,
                 range_start=0, on_false_value=-3.4028234663852886e38, mask=None, dtype=None,
                 **kwargs) -> Pending:
    """Keep elements whose index passes both comparisons, else ``on_false_value``."""
    x = _tile("nisa.range_select", on_true_tile, "on_true_tile")
    ops = _values({"x": x, "b0": bound0, "b1": bound1, "res": reduce_res})

    def run(dst, x, b0, b1, res):
        _sel.range_select(dst=dst, on_true_tile=x, comp_op0=comp_op0, comp_op1=comp_op1,
                          bound0=b0, bound1=b1, reduce_cmd=reduce_cmd, reduce_res=res,
                          reduce_op=reduce_op, range_start=range_start,
                          on_false_value=on_false_value)

    return _pending("nisa.range_select", x.shape, _dt(dtype, x.dtype), ops, run, mask,
                    eager=reduce_res is not None)


@records("dge_mode")
def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=None, dge_mode=None,
             **kwargs) -> None:
    """Copy ``src`` into ``dst`` (HBM/SBUF either side); ``dst_rmw_op=np.add`` adds into
    ``dst`` instead (a DMA read-modify-write); ``oob_mode`` for an indirect side."""
    from nki.legacy.nl_base import write

    if dst_rmw_op is not None and as_alu(dst_rmw_op) is not Alu.add:
        raise validation("nki_invalid_argument", "nisa.dma_copy: dst_rmw_op supports np.add "
                         f"(nl.add) only, got {dst_rmw_op!r}")
    write("nisa.dma_copy", dst, value(src), mask, oob_mode, accumulate=dst_rmw_op is not None)


def max8(*, src, mask=None, dtype=None, **kwargs) -> Pending:
    """The 8 largest values of each partition, descending: ``[P, 8]`` (``mask=`` bounds
    the data searched)."""
    x = _tile("nisa.max8", src, "src")
    x, rows = _reduced_mask("nisa.max8", x, mask, 8)
    return _pending("nisa.max8", (x.shape[0], 8), _dt(dtype, x.dtype), {"x": x},
                    lambda dst, x: _sel.max8(dst=dst, src=x), rows)


def nc_find_index8(*, data, vals, mask=None, dtype=None, **kwargs) -> Pending:
    """Index of the first occurrence of each of 8 values per partition: ``[P, 8]`` uint32
    (``mask=`` bounds the data searched)."""
    x = _tile("nisa.nc_find_index8", data, "data")
    x, rows = _reduced_mask("nisa.nc_find_index8", x, mask, 8)
    ops = _values({"x": x, "v": vals})
    return _pending("nisa.nc_find_index8", (x.shape[0], 8), _dt(dtype, dtype_of("uint32")),
                    ops, lambda dst, x, v: _sel.nc_find_index8(dst=dst, data=x, vals=v),
                    rows)


def nc_match_replace8(*, data, vals, imm, dst_idx=None, mask=None, dtype=None,
                      **kwargs) -> Pending:
    """``data`` with the first occurrence of each of 8 values replaced by ``imm``."""
    x = _tile("nisa.nc_match_replace8", data, "data")
    ops = _values({"v": vals, "idx": dst_idx})
    # the mask bounds ``data`` (AWS's example); vals and dst_idx, [P, 8], only by partition
    rows = rectangle(mask, x.shape, "nisa.nc_match_replace8")
    lo, hi = (rows or {}).get(0, (0, x.shape[0]))
    v, idx = (t[lo:hi] if t is not None and t.shape[0] == x.shape[0] else t
              for t in (ops["v"], ops["idx"]))

    def run(dst, x):
        _sel.nc_match_replace8(dst=dst, data=x, vals=v, imm=imm, dst_idx=idx)

    return _pending("nisa.nc_match_replace8", x.shape, _dt(dtype, x.dtype), {"x": x}, run,
                    mask, eager=dst_idx is not None)


def tensor_copy_predicated(*, src, dst, predicate, reverse_pred=False, mask=None, dtype=None,
                           **kwargs) -> None:
    """Copy ``src`` into ``dst`` where ``predicate`` is nonzero (writes ``dst`` directly)."""
    d = value(dst)
    before_write(d)
    pred = value(predicate)
    if isinstance(pred, NkiTensor):     # [P, 1] or [P, K] over dst [P, K, ...]: broadcast
        pred = _free_broadcast(pred, d)
    _sel.tensor_copy_predicated(dst=d, src=value(src), predicate=pred,
                                reverse_pred=reverse_pred)


def nc_stream_shuffle(src, dst, shuffle_mask, *, dtype=None, mask=None, **kwargs) -> None:
    """Shuffle partitions within each 32-partition quadrant into ``dst``."""
    d = value(dst)
    before_write(d)
    _sel.nc_stream_shuffle(dst=d, src=value(src), shuffle_mask=shuffle_mask)


def dma_transpose(src, *, axes=None, mask=None, dtype=None, dge_mode=None, **kwargs) -> Pending:
    """``src`` (HBM or SBUF) transposed by the DMA engines into a new SBUF tile."""
    s = value(src)
    perm = tuple(axes) if axes is not None else tuple(range(s.ndim))[::-1] if s.ndim < 4 \
        else (3, 1, 2, 0)
    shape = tuple(s.shape[a] for a in perm)

    def run(dst, s):
        _mm.dma_transpose(dst=dst, src=s, axes=axes, dge_mode=dge_mode)

    return _pending("nisa.dma_transpose", shape, _dt(dtype, s.dtype), {"s": s}, run, mask)


# ----- index-expression instructions ----------------------------------------------------------
def _pattern(expr: IndexExpr, shape: tuple[int, ...]) -> tuple[list, int]:
    """(free pattern, channel multiplier) of an index expression over a tile ``shape``."""
    e = expr.aligned(len(shape))
    return [[e.coefs[j], shape[j]] for j in range(1, len(shape))], e.coefs[0]


def iota(expr, dtype, *, mask=None, **kwargs) -> Pending:
    """A tile holding the values of an index expression (``5 + 2*nl.arange(128)[:, None]``).

    Example:
        >>> idx = nisa.iota(i_p * 512 + i_f, dtype=nl.int32)   # doctest: +SKIP
    """
    if not isinstance(expr, IndexExpr) or expr.ndim < 2:
        raise validation("nki_invalid_argument", "nisa.iota takes a 2-D or wider index "
                         f"expression, got {expr!r}")
    if mask is not None:
        raise validation("err_unsupported_expression_in_mask", "nisa.iota: mask= is not "
                         "supported; index the result instead")
    pattern, cm = _pattern(expr, expr.sizes)
    return _pending("nisa.iota", expr.sizes, dtype_of(dtype), {},
                    lambda dst: _sel.iota(dst=dst, pattern=pattern, offset=expr.const,
                                          channel_multiplier=cm), mask)


def affine_select(pred, on_true_tile, on_false_value, *, mask=None, dtype=None,
                  **kwargs) -> Pending:
    """``on_true_tile`` where the affine predicate holds, else ``on_false_value``: the
    predicate is one comparison of index expressions (``i_q >= i_k`` for a causal mask).

    Example:
        >>> s = nisa.affine_select(i_q >= i_k, scores, -9984.0)   # doctest: +SKIP
    """
    x = _tile("nisa.affine_select", on_true_tile, "on_true_tile")
    if not isinstance(pred, Predicate) or len(pred.atoms) != 1:
        raise validation("err_unsupported_expression_in_mask", "nisa.affine_select: pred "
                         "must be one comparison of index expressions (no '&')")
    if mask is not None and not isinstance(mask, bool):
        raise validation("err_unsupported_expression_in_mask", "nisa.affine_select: only a "
                         "compile-time True/False mask= is supported together with pred")
    diff, op = pred.atoms[0]
    if diff.ndim > x.ndim:
        raise validation("nki_shape_mismatch", f"nisa.affine_select: pred of rank "
                         f"{diff.ndim} for a {x.ndim}-D tile")
    pattern, cm = _pattern(diff, x.shape)

    def run(dst, x):
        # GpSimd cannot read PSUM; the old compiler staged a PSUM operand through SBUF
        _sel.affine_select(dst=dst, pattern=pattern, channel_multiplier=cm,
                           on_true_tile=_to_sbuf(x), on_false_value=on_false_value,
                           cmp_op=_CMP[op], offset=diff.const)

    return _pending("nisa.affine_select", x.shape, _dt(dtype, x.dtype), {"x": x}, run,
                    mask=mask)


# ----- GpSimd instructions of the later 2.x releases --------------------------------------------
def local_gather(src_buffer, index, num_elem_per_idx: int = 1, num_valid_indices=None, *,
                 mask=None, dtype=None, **kwargs) -> Pending:
    """Gather inside each group of 16 partitions (``nki.lang.indirect.local_gather``):
    ``[P, num_valid_indices * num_elem_per_idx]`` of ``src_buffer``'s dtype."""
    s, i = value(src_buffer), value(index)
    groups = max(s.shape[0] // 16, 1)
    nv = num_valid_indices if num_valid_indices is not None else i.size // groups
    from nki.lang.indirect import local_gather as _lg

    def run(dst, s, i):
        _lg(dst=dst, src_buffer=s, index=i, num_elem_per_idx=num_elem_per_idx,
            num_valid_indices=num_valid_indices)

    return _pending("nisa.local_gather", (s.shape[0], int(nv) * int(num_elem_per_idx)),
                    s.dtype, {"s": s, "i": i}, run, mask)


def sequence_bounds(*, segment_ids, mask=None, dtype=None, **kwargs) -> Pending:
    """The [start, end) of each element's run of equal segment ids: ``[1, 2, N]``."""
    from nki.lang.misc import sequence_bounds as _sb

    s = value(segment_ids)
    return _pending("nisa.sequence_bounds", (s.shape[0], 2) + tuple(s.shape[1:]),
                    _dt(dtype, s.dtype), {"s": s},
                    lambda dst, s: _sb(dst=dst, segment_ids=s), mask)


def tensor_scalar_cumulative(*, src, dst, op0, op1, imm0, imm1=None,
                             reduce_cmd=ReduceCmd.reset_reduce, mask=None, dtype=None,
                             **kwargs) -> None:
    """Running scan per partition into ``dst`` (writes it directly, as in the 2.x API)."""
    from nki.lang.misc import tensor_scalar_cumulative as _tsc

    d = value(dst)
    before_write(d)
    _tsc(dst=d, src=value(src), op0=op0, op1=op1, imm0=_number_or_tile(imm0),
         imm1=None if imm1 is None else _number_or_tile(imm1), reduce_cmd=reduce_cmd)


def _number_or_tile(x):
    """A numpy scalar as the Python number the current rules take; tiles materialised."""
    import numpy as np

    return x.item() if isinstance(x, np.generic) else value(x)


__all__ = [n for n in dir() if not n.startswith("_") and n not in (
    "annotations", "Alu", "Engine", "ReduceCmd", "FLOAT32", "Memory", "Call", "dtype_of",
    "NkiTensor", "validation", "as_alu", "rectangle", "shrink", "matmul_mask",
    "rect_predicate", "IndexExpr", "Predicate", "promote", "Pending", "before_write", "value",
    "copy_into", "new_tile")]

