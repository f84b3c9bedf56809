"""Reduction, statistics and scan rules: ``tensor_reduce``, ``tensor_partition_reduce``,
``tensor_scalar_reduce``, ``bn_stats``, ``bn_aggr``, ``tensor_tensor_scan`` (spec §4.1), and
the ``nl`` reductions and composites built on them (``sum``, ``max``, ``mean``, ``var``,
``softmax``, ``rms_norm``, ...; spec §3.5)."""

from __future__ import annotations

from nki.ir.nodes import Instr
from nki.ir.ops import Act, Alu, Engine, Opcode, ReduceCmd
from nki.ir.types import BOOL, FLOAT32, Memory
from nki.lang.common import Call, acc
from nki.lang.operators import as_alu, op_name, token
from nki.lang.tensor import NkiTensor

__all__ = ["tensor_reduce", "tensor_partition_reduce", "tensor_scalar_reduce", "bn_stats",
           "bn_aggr", "tensor_tensor_scan"]

_ARITH_REDUCE = (Alu.add, Alu.subtract, Alu.multiply, Alu.maximum, Alu.minimum)
_LOGICAL = (Alu.logical_and, Alu.logical_or, Alu.logical_xor)
_BITVEC_REDUCE = (Alu.bitwise_and, Alu.bitwise_or, Alu.bitwise_xor)
_PARTITION_OPS = (Alu.add, Alu.maximum, Alu.bitwise_or, Alu.bitwise_and, Alu.average)
_TSR_REDUCE = (Alu.add, Alu.multiply, Alu.maximum, Alu.minimum)
BN_STATS_FMAX = 512  # nl.tile_size.bn_stats_fmax


def _per_partition(t: NkiTensor) -> int:
    return t.size // t.shape[0]


def _alu(call: Call, op, allowed, role: str = "op") -> Alu:
    alu = as_alu(op)
    if alu is None or alu not in allowed:
        names = ", ".join(a.name for a in allowed)
        raise call.error("nki_invalid_argument",
                         f"{role}={op_name(op)} is not supported here; expected one of {names}")
    return alu


def _axes(call: Call, x: NkiTensor, axis, isa: bool = False) -> tuple[int, ...]:
    """Normalise ``axis`` (int or sequence) to sorted dims: trailing free dims only.
    ``isa`` marks ``nisa.tensor_reduce``, whose axis numbering changed in NKI 0.3.0."""
    raw = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    nd = x.ndim
    dims = []
    for a in raw:
        if not isinstance(a, int) or isinstance(a, bool) or not -nd <= a < nd:
            raise call.error("nki_invalid_argument", f"axis {a!r} is not a dim of the "
                             f"{nd}-D operand {x.shape}")
        dims.append(a + nd if a < 0 else a)
    axes = tuple(sorted(set(dims)))
    if not axes or len(axes) != len(dims):
        raise call.error("nki_invalid_argument", f"axis {axis!r} must name distinct dims")
    if 0 in axes:
        raise call.error("nki_invalid_argument", f"axis {axis!r} includes the partition dim "
                         "(axis 0); reduce across partitions with tensor_partition_reduce, a "
                         "transpose or a ones-matmul")
    if axes != tuple(range(nd - len(axes), nd)):
        raise call.error("nki_invalid_argument", f"axis {axis!r} must be the trailing "
                         f"contiguous free dims ending at the last dim (dim {nd - 1})"
                         + (_legacy_axis_hint(axes, nd) if isa else ""))
    return axes


def _legacy_axis_hint(axes: tuple[int, ...], nd: int) -> str:
    """Before NKI 0.3.0, ``axis=1`` of a 3-D/4-D tile meant its last dim (the migration
    guide's fixed quirk); kernels written then fail here, so say what they meant."""
    if axes != (1,) or nd < 3:
        return ""
    return (f"; before NKI 0.3.0 axis=1 of a {nd}-D tile meant its last dim, which is now "
            f"axis={nd - 1}")


def _emit_reduce(call: Call, d: NkiTensor, alu: Alu, x: NkiTensor, axes: tuple[int, ...],
                 negate: bool = False, name: str = "") -> Instr:
    """Check and emit one TENSOR_REDUCE of ``x`` over ``axes`` into ``d``."""
    reduced = 1
    for a in axes:
        reduced *= x.shape[a]
    kept = _per_partition(x) // reduced
    call.same_partitions(d, x, "dst", "data")
    if _per_partition(d) != kept:
        raise call.error("nki_shape_mismatch", f"dst {d.shape} has {_per_partition(d)} "
                         f"elements per partition but reducing data {x.shape} over axis "
                         f"{axes} leaves {kept}")
    if alu in _BITVEC_REDUCE and not (x.dtype.is_int and d.dtype.is_int):
        raise call.error("nki_dtype_mismatch", f"bitwise reduce op {alu.name} needs integer "
                         f"data and dst, got {x.dtype.name} and {d.dtype.name}")
    if negate and alu not in _ARITH_REDUCE:
        raise call.error("nki_invalid_argument", f"negate=True needs an arithmetic op, "
                         f"got {alu.name}")
    ins = Instr(Opcode.TENSOR_REDUCE, (("dst", acc(d)),), (("data", acc(x)),),
                (("op", alu), ("negate", bool(negate)), ("int_math", alu in _BITVEC_REDUCE),
                 ("reduced", reduced)), call.loc, name)
    return call.trace.emit(ins, api=call.api)


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=""):
    """Reduce ``data`` with ``op`` over its trailing free axes (never axis 0), in fp32.

    ``dst`` holds the kept elements per partition (``keepdims`` only changes the shape the
    caller gives it). Ops: add, subtract, multiply, maximum, minimum, logical and/or/xor,
    and (integers only, exact) bitwise and/or/xor. ``negate`` multiplies the result by -1.

    Example:
        >>> nisa.tensor_reduce(dst=rowmax, op=nl.maximum, data=x, axis=1)  # doctest: +SKIP
    """
    call = Call("nisa.tensor_reduce")
    d, x = call.tile(dst, "dst"), call.tile(data, "data")
    alu = _alu(call, op, _ARITH_REDUCE + _LOGICAL + _BITVEC_REDUCE)
    return _emit_reduce(call, d, alu, x, _axes(call, x, axis, isa=True), negate, name)


def _gpsimd_tile(call: Call, value, role: str) -> NkiTensor:
    t = call.tile(value, role)
    if t.buffer is Memory.PSUM:
        raise call.error("err_unsupported_memory", f"the GpSimd engine cannot access PSUM "
                         f"({role!r} {t.name!r} is in psum)")
    return t


def tensor_partition_reduce(dst, op, data, name=""):
    """Reduce ``data`` across its partitions: ``[P, F...] -> [1, F...]`` on GpSimd (SBUF only).

    Ops: add, maximum, bitwise_or, bitwise_and (integers), average. Integer add/maximum on
    all-int32 operands is exact (GpSimd native ints); otherwise fp32.

    Example:
        >>> nisa.tensor_partition_reduce(dst=colsum, op=nl.add, data=x)  # doctest: +SKIP
    """
    call = Call("nisa.tensor_partition_reduce")
    d, x = _gpsimd_tile(call, dst, "dst"), _gpsimd_tile(call, data, "data")
    alu = _alu(call, op, _PARTITION_OPS)
    if d.shape[0] != 1 or _per_partition(d) != _per_partition(x):
        raise call.error("nki_shape_mismatch", f"dst {d.shape} must have 1 partition and the "
                         f"{_per_partition(x)} elements per partition of data {x.shape}")
    ints = x.dtype.is_int and d.dtype.is_int
    if alu.is_bitvec and not ints:
        raise call.error("nki_dtype_mismatch", f"bitwise op {alu.name} needs integer data and "
                         f"dst, got {x.dtype.name} and {d.dtype.name}")
    exact = alu.is_bitvec or (alu in (Alu.add, Alu.maximum) and all(
        t.dtype.name in ("int32", "uint32") for t in (x, d)))
    ins = Instr(Opcode.TENSOR_PARTITION_REDUCE, (("dst", acc(d)),), (("data", acc(x)),),
                (("op", alu), ("int_math", exact), ("parts", x.shape[0])), call.loc, name)
    return call.trace.emit(ins, api=call.api)


def _scalar_or_tile(call: Call, value, role: str, parts: int, reads: list, attrs: list,
                    imm: str) -> None:
    """A fp32 immediate (attr ``imm``) or a [P,1] tile operand (read as ``role``)."""
    v = call.scalar_vector(value, role, parts)
    if isinstance(v, NkiTensor):
        reads.append((role, acc(v)))
        attrs.append((imm, None))
    else:
        attrs.append((imm, float(v)))


def _reduce_cmd(call: Call, cmd) -> ReduceCmd:
    try:
        return ReduceCmd(int(cmd))
    except (TypeError, ValueError):
        raise call.error("nki_invalid_argument", f"reduce_cmd={cmd!r} is not a "
                         "nisa.reduce_cmd value") from None


def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=ReduceCmd.reset_reduce, reduce_init=None,
                         reduce_res_negate=False, name=""):
    """``dst = data op0 operand0`` plus a reduction of the result over all free axes into the
    VectorE accumulators (one fp32 register per partition, shared with other VectorE ops).

    ``reduce_cmd``: ``reset_reduce`` starts from the op's identity (0, 1, -inf, +inf),
    ``reduce`` continues from the registers, ``load_reduce`` starts from ``reduce_init``
    (scalar or [P,1] tile), ``reset`` only resets, ``idle`` leaves them. ``reduce_res`` [P,1]
    receives the registers after the update (negated if ``reduce_res_negate``); ``None``
    keeps the result in the registers for a later call.

    Example:
        >>> nisa.tensor_scalar_reduce(dst=y, data=x, op0=nl.multiply, operand0=2.0,
        ...                           reduce_op=nl.add, reduce_res=rowsum)  # doctest: +SKIP
    """
    call = Call("nisa.tensor_scalar_reduce")
    d, x = call.tile(dst, "dst"), call.tile(data, "data")
    call.same_elements(d, x, "dst", "data")
    a0 = _alu(call, op0, [a for a in Alu if not a.is_bitvec], "op0")
    rop = _alu(call, reduce_op, _TSR_REDUCE, "reduce_op")
    cmd = _reduce_cmd(call, reduce_cmd)
    parts = x.shape[0]
    reads: list = [("data", acc(x))]
    attrs: list = [("op0", a0), ("reverse0", bool(reverse0))]
    _scalar_or_tile(call, 0.0 if operand0 is None else operand0, "operand0", parts, reads,
                    attrs, "imm0")
    if cmd is ReduceCmd.load_reduce:
        if reduce_init is None:
            raise call.error("nki_invalid_argument", "reduce_cmd=load_reduce needs reduce_init")
        _scalar_or_tile(call, reduce_init, "reduce_init", parts, reads, attrs, "init")
    writes: list = [("dst", acc(d))]
    if reduce_res is not None:
        r = call.tile(reduce_res, "reduce_res")
        if r.shape[0] != parts or _per_partition(r) != 1:
            raise call.error("nki_shape_mismatch", f"reduce_res must be a [{parts}, 1] tile, "
                             f"got {r.shape}")
        writes.append(("reduce_res", acc(r)))
    attrs += [("reduce_op", rop), ("reduce_cmd", cmd), ("negate", bool(reduce_res_negate)),
              ("parts", parts)]
    ins = Instr(Opcode.TENSOR_SCALAR_REDUCE, tuple(writes), tuple(reads), tuple(attrs),
                call.loc, name)
    return call.trace.emit(ins, api=call.api)


def bn_stats(dst, data, name=""):
    """Per partition, (count, mean, variance*count) of the even-indexed elements then of the
    odd-indexed ones (population variance, fp32): 6 values. ``data`` has at most
    ``bn_stats_fmax`` (512) elements per partition; longer rows write each chunk's 6 values at
    successive offsets of one tile for ``bn_aggr``.

    Example:
        >>> nisa.bn_stats(dst=stats[:, 0:6], data=x[:, 0:512])  # doctest: +SKIP
    """
    call = Call("nisa.bn_stats")
    d, x = call.tile(dst, "dst"), call.tile(data, "data")
    call.same_partitions(d, x, "dst", "data")
    if _per_partition(x) > BN_STATS_FMAX:
        raise call.error("err_size_of_dimension_exceed_arch_limit",
                         f"data {x.shape} has {_per_partition(x)} elements per partition; "
                         f"bn_stats takes at most bn_stats_fmax={BN_STATS_FMAX}")
    if _per_partition(d) != 6:
        raise call.error("nki_shape_mismatch", f"dst must hold 6 elements per partition, got "
                         f"{d.shape}")
    ins = Instr(Opcode.BN_STATS, (("dst", acc(d)),), (("data", acc(x)),),
                (("parts", x.shape[0]),), call.loc, name)
    return call.trace.emit(ins, api=call.api)


def bn_aggr(dst, data, name=""):
    """Aggregate (count, mean, variance*count) triples (``bn_stats`` outputs, concatenated)
    into ``dst`` [P, 2] = (mean, population variance), fp32.

    Example:
        >>> nisa.bn_aggr(dst=mv, data=stats)  # doctest: +SKIP
    """
    call = Call("nisa.bn_aggr")
    d, x = call.tile(dst, "dst"), call.tile(data, "data")
    call.same_partitions(d, x, "dst", "data")
    if _per_partition(x) % 3:
        raise call.error("nki_shape_mismatch", f"data {x.shape} must hold a multiple of 3 "
                         f"elements per partition (count, mean, var*count triples)")
    if _per_partition(d) != 2:
        raise call.error("nki_shape_mismatch", f"dst must hold 2 elements per partition "
                         f"(mean, var), got {d.shape}")
    ins = Instr(Opcode.BN_AGGR, (("dst", acc(d)),), (("data", acc(x)),),
                (("parts", x.shape[0]),), call.loc, name)
    return call.trace.emit(ins, api=call.api)


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False,
                       name=""):
    """Scan along the free dims per partition, in fp32:
    ``r[i] = op1(op0(data0[i], r[i-1]), data1[i])`` with ``r[-1] = initial`` (scalar or [P,1]
    tile). ``reverse0`` swaps op0's operands, ``reverse1`` swaps op1's.

    Example:
        >>> nisa.tensor_tensor_scan(dst=h, data0=a, data1=b, initial=0.0,
        ...                         op0=nl.multiply, op1=nl.add)  # doctest: +SKIP
    """
    call = Call("nisa.tensor_tensor_scan")
    d = call.tile(dst, "dst")
    a, b = call.tile(data0, "data0"), call.tile(data1, "data1")
    call.same_elements(a, b, "data0", "data1")
    call.same_elements(d, a, "dst", "data0")
    call.not_both_psum(a, b, "data0", "data1")
    arith = [x for x in Alu if not x.is_bitvec]
    a0, a1 = _alu(call, op0, arith, "op0"), _alu(call, op1, arith, "op1")
    reads: list = [("data0", acc(a)), ("data1", acc(b))]
    attrs: list = [("op0", a0), ("op1", a1), ("reverse0", bool(reverse0)),
                   ("reverse1", bool(reverse1)), ("parts", a.shape[0])]
    _scalar_or_tile(call, initial, "initial", a.shape[0], reads, attrs, "initial")
    ins = Instr(Opcode.TENSOR_TENSOR_SCAN, (("dst", acc(d)),), tuple(reads), tuple(attrs),
                call.loc, name)
    return call.trace.emit(ins, api=call.api)


# ----- nl-level reductions and composites (spec §3.5) ----------------------------------------

def _tile(shape, dtype) -> NkiTensor:
    from nki.lang.creation import value_result

    return value_result(shape, dtype, buffer=Memory.SBUF)


def _reduced_shape(x: NkiTensor, axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    """The result shape; on-chip tiles stay at least 2-D (a trailing 1 is kept)."""
    if keepdims:
        return tuple(1 if i in axes else c for i, c in enumerate(x.shape))
    shape = tuple(c for i, c in enumerate(x.shape) if i not in axes)
    return shape if len(shape) >= 2 else shape + (1,)


def _count(x: NkiTensor, axes: tuple[int, ...]) -> int:
    n = 1
    for a in axes:
        n *= x.shape[a]
    return n


def _nl_reduce(api: str, alu: Alu, x, axis, dtype, keepdims) -> NkiTensor:
    call = Call(api)
    t = call.tile(x, "x")
    axes = _axes(call, t, axis)
    out = _tile(_reduced_shape(t, axes, keepdims), dtype or t.dtype)
    _emit_reduce(call, out, alu, t, axes)
    return out


def _make_reduce(name: str, alu: Alu):
    def fn(x, axis, dtype=None, keepdims=False):
        return _nl_reduce(f"nl.{name}", alu, x, axis, dtype, keepdims)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"``{name}`` of ``x`` over trailing free ``axis`` (int or tuple), a new SBUF "
                  f"tile; reduced dims are dropped unless ``keepdims``.\n\n    Example:\n"
                  f"        >>> r = nl.{name}(x, axis=1)  # doctest: +SKIP\n")
    return token(alu=alu)(fn)


def _mean_into(call: Call, out: NkiTensor, x: NkiTensor, axes: tuple[int, ...]) -> None:
    """out = sum(x over axes) / count: an fp32 sum, then a VectorE scale."""
    from nki.lang.vector import tensor_scalar

    s = _tile(out.shape, FLOAT32)
    _emit_reduce(call, s, Alu.add, x, axes)
    tensor_scalar(dst=out, data=s, op0=Alu.multiply, operand0=1.0 / _count(x, axes))


def mean(x, axis, dtype=None, keepdims=False):
    """Arithmetic mean over trailing free ``axis`` (fp32 sum then scale; ints give fp32).

    Example:
        >>> m = nl.mean(x, axis=1)  # doctest: +SKIP
    """
    call = Call("nl.mean")
    t = call.tile(x, "x")
    axes = _axes(call, t, axis)
    out = _tile(_reduced_shape(t, axes, keepdims),
                dtype or (t.dtype if t.dtype.is_float else FLOAT32))
    _mean_into(call, out, t, axes)
    return out


def var(x, axis, dtype=None, keepdims=False):
    """Population variance over trailing free ``axis``: mean of squared deviations (fp32).

    Example:
        >>> v = nl.var(x, axis=1)  # doctest: +SKIP
    """
    from nki.lang.vector import tensor_tensor

    call = Call("nl.var")
    t = call.tile(x, "x")
    axes = _axes(call, t, axis)
    m = _tile(_reduced_shape(t, axes, True), FLOAT32)
    _mean_into(call, m, t, axes)
    dev = _tile(t.shape, FLOAT32)
    tensor_tensor(dst=dev, data1=t, data2=m.broadcast_to(t.shape), op=Alu.subtract)
    tensor_tensor(dst=dev, data1=dev, data2=dev, op=Alu.multiply)
    out = _tile(_reduced_shape(t, axes, keepdims),
                dtype or (t.dtype if t.dtype.is_float else FLOAT32))
    _mean_into(call, out, dev, axes)
    return out


def all_(x, axis, dtype=None, keepdims=False):
    """Whether every element over trailing free ``axis`` is non-zero (min over ``x != 0``);
    default dtype ``bool_``.

    Example:
        >>> ok = nl.all(mask, axis=1)  # doctest: +SKIP
    """
    from nki.lang.vector import tensor_scalar

    call = Call("nl.all")
    t = call.tile(x, "x")
    axes = _axes(call, t, axis)
    nz = _tile(t.shape, FLOAT32)
    tensor_scalar(dst=nz, data=t, op0=Alu.not_equal, operand0=0.0)
    out = _tile(_reduced_shape(t, axes, keepdims), dtype or BOOL)
    _emit_reduce(call, out, Alu.minimum, nz, axes)
    return out


all_.__name__ = all_.__qualname__ = "all"


def softmax(x, axis=-1, dtype=None):
    """``exp(x - max) / sum(exp(x - max))`` over trailing free ``axis``; fp32 inside, the
    exponential on ScalarE (``nisa.activation`` with ``bias = -max``).

    Example:
        >>> p = nl.softmax(scores, axis=1)  # doctest: +SKIP
    """
    from nki.lang.activation import activation
    from nki.lang.vector import reciprocal, tensor_scalar, tensor_tensor

    call = Call("nl.softmax")
    t = call.tile(x, "x")
    axes = _axes(call, t, axis)
    kshape = _reduced_shape(t, axes, True)
    e = _tile(t.shape, FLOAT32)
    mx = _tile(kshape, FLOAT32)
    if _per_partition(mx) == 1:   # one row per partition: -max is the activation's bias
        _emit_reduce(call, mx, Alu.maximum, t, axes, negate=True)
        activation(dst=e, op=Act.exp, data=t, bias=mx)
    else:                         # several rows per partition: subtract a broadcast max
        _emit_reduce(call, mx, Alu.maximum, t, axes)
        tensor_tensor(dst=e, data1=t, data2=mx.broadcast_to(t.shape), op=Alu.subtract)
        activation(dst=e, op=Act.exp, data=e)
    s = _tile(kshape, FLOAT32)
    _emit_reduce(call, s, Alu.add, e, axes)
    reciprocal(dst=s, data=s)
    out = _tile(t.shape, dtype or t.dtype)
    if _per_partition(s) == 1:
        tensor_scalar(dst=out, data=e, op0=Alu.multiply, operand0=s)
    else:
        tensor_tensor(dst=out, data1=e, data2=s.broadcast_to(t.shape), op=Alu.multiply)
    return out


def rms_norm(x, w, axis, n, epsilon=1e-6, dtype=None, compute_dtype=None):
    """``x / sqrt(sum(x**2 over axis) / n + epsilon) * w``; ``w`` has ``x``'s shape, ``n``
    is the count the mean of squares divides by. Intermediates in ``compute_dtype``
    (default fp32); the result in ``dtype`` (default ``x.dtype``).

    Example:
        >>> y = nl.rms_norm(x, w, axis=1, n=512)  # doctest: +SKIP
    """
    from nki.lang.vector import tensor_scalar, tensor_tensor

    call = Call("nl.rms_norm")
    t, wt = call.tile(x, "x"), call.tile(w, "w")
    if wt.shape != t.shape:
        raise call.error("nki_shape_mismatch", f"w {wt.shape} must have the shape of x "
                         f"{t.shape} (tiles do not broadcast)")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise call.error("nki_invalid_argument", f"n must be a positive int, got {n!r}")
    axes = _axes(call, t, axis)
    cdt = compute_dtype or FLOAT32
    sq = _tile(t.shape, cdt)
    tensor_tensor(dst=sq, data1=t, data2=t, op=Alu.multiply)
    r = _tile(_reduced_shape(t, axes, True), FLOAT32)
    _emit_reduce(call, r, Alu.add, sq, axes)
    tensor_scalar(dst=r, data=r, op0=Alu.multiply, operand0=1.0 / n, op1=Alu.add,
                  operand1=float(epsilon))
    tensor_scalar(dst=r, data=r, op0=Alu.rsqrt, operand0=None, engine=Engine.gpsimd)
    if _per_partition(r) == 1:
        tensor_scalar(dst=sq, data=t, op0=Alu.multiply, operand0=r)
    else:
        tensor_tensor(dst=sq, data1=t, data2=r.broadcast_to(t.shape), op=Alu.multiply)
    out = _tile(t.shape, dtype or t.dtype)
    tensor_tensor(dst=out, data1=sq, data2=wt, op=Alu.multiply)
    return out


@token(alu=Alu.average)
def average(x, y, dtype=None):
    """Operator token ``nl.average`` (``op=nl.average`` of ``tensor_partition_reduce``); not a
    function in NKI, so calling it is an error.

    Example:
        >>> nisa.tensor_partition_reduce(dst=m, op=nl.average, data=x)  # doctest: +SKIP
    """
    raise Call("nl.average").error("nki_invalid_argument", "nl.average is an operator token "
                                   "(op=nl.average), not a function")


# nl-level functions this family adds to nki.language: {name: function}
NL_EXPORTS: dict = {
    "sum": _make_reduce("sum", Alu.add),
    "max": _make_reduce("max", Alu.maximum),
    "min": _make_reduce("min", Alu.minimum),
    "prod": _make_reduce("prod", Alu.multiply),
    "mean": mean,
    "var": var,
    "all": all_,
    "softmax": softmax,
    "rms_norm": rms_norm,
    "average": average,
}
