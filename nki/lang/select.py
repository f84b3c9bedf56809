"""Select family rules: ``iota``, ``affine_select``, ``range_select``, ``select_reduce``,
``tensor_copy_predicated``, ``scalar_tensor_tensor``, ``dropout``, ``nc_stream_shuffle``,
``max8``, ``nc_find_index8``, ``nc_match_replace8`` (spec §4.1) and the ``nl`` wrappers
``where``, ``broadcast_to``, ``dropout``, ``device_print`` (spec §2, §3.1, §3.4)."""

from __future__ import annotations

import math

import numpy as np

from nki.ir.nodes import Instr
from nki.ir.ops import Alu, Opcode, ReduceCmd
from nki.ir.types import Memory
from nki.lang.common import Call, acc, dtype_of
from nki.lang.operators import as_alu, op_name
from nki.lang.tensor import NkiTensor

__all__ = ["iota", "affine_select", "range_select", "select_reduce", "tensor_copy_predicated",
           "scalar_tensor_tensor", "dropout", "nc_stream_shuffle", "max8", "nc_find_index8",
           "nc_match_replace8"]

FP32_MIN = float(np.finfo(np.float32).min)
_SBUF = (Memory.SBUF,)
_CMP = (Alu.equal, Alu.not_equal, Alu.greater, Alu.greater_equal, Alu.less, Alu.less_equal)
_RANGE_CMP = (Alu.equal, Alu.less, Alu.less_equal, Alu.greater, Alu.greater_equal)
_PRED_COPY = ("uint8", "uint16", "uint32", "bool_")
_PRED_SELECT = ("int8", "uint8", "int16", "uint16", "bool_")
_INDEX_DTYPES = ("uint16", "uint32")
_TOP8_MIN, _TOP8_MAX = 8, 16384


# ----- shared argument checks --------------------------------------------------------------
def _free(t: NkiTensor) -> int:
    return t.size // t.shape[0]


def _int32(call: Call, value, role: str) -> int:
    """A compile-time int32 (integral floats accepted)."""
    try:
        v = int(value)
        ok = not isinstance(value, bool) and float(value) == v
    except (TypeError, ValueError):
        ok = False
    if not ok or not -2**31 <= v < 2**31:
        raise call.error("nki_invalid_argument", f"{role} must be a compile-time int32, "
                         f"got {value!r}")
    return v


def _number(call: Call, value, role: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise call.error("nki_invalid_argument", f"{role} must be a number, got "
                         f"{type(value).__name__}")
    return float(value)


def _plain(call: Call, t: NkiTensor, role: str) -> NkiTensor:
    """Packed x4 dtypes carry four values per element; these instructions take one."""
    if t.dtype.packed != 1:
        raise call.error("nki_dtype_mismatch", f"{role!r} has packed dtype {t.dtype.name}, "
                         "which this instruction does not accept")
    return t


def _dtype_in(call: Call, t: NkiTensor, role: str, names: tuple[str, ...]) -> None:
    if t.dtype.name not in names:
        raise call.error("nki_dtype_mismatch", f"{role!r} must be one of {', '.join(names)}, "
                         f"got {t.dtype.name}")


def _alu_in(call: Call, op, role: str, allowed: tuple[Alu, ...]) -> Alu:
    alu = as_alu(op)
    if alu not in allowed:
        names = ", ".join(f"nl.{a.name}" for a in allowed)
        raise call.error("nki_invalid_argument", f"{role}={op_name(op)} is not allowed; "
                         f"expected one of {names}")
    return alu


def _vector_p1(call: Call, value, role: str, parts: int) -> NkiTensor:
    """A [parts, 1] on-chip tile."""
    t = call.tile(value, role)
    if t.shape[0] != parts:
        raise call.error("err_num_partition_mismatch", f"{role!r} has {t.shape[0]} partitions "
                         f"but the data has {parts}")
    if _free(t) != 1:
        raise call.error("nki_shape_mismatch", f"{role!r} must have one element per "
                         f"partition, got shape {t.shape}")
    return t


def _pattern(call: Call, pattern, n_free: int) -> tuple[tuple[int, int], ...]:
    """Validate ``[[step, num], ...]`` (≤ 4 pairs) and pad it to 4 pairs, outermost first."""
    try:
        pairs = [(int(s), int(n)) for s, n in pattern]
    except (TypeError, ValueError):
        raise call.error("nki_invalid_argument", f"pattern must be a list of [step, num] "
                         f"pairs, got {pattern!r}") from None
    if not 1 <= len(pairs) <= 4:
        raise call.error("err_exceed_max_supported_dimension", f"pattern has {len(pairs)} "
                         "[step, num] pairs; 1 to 4 are supported")
    for step, num in pairs:
        _int32(call, step, "a pattern step")
        if num < 1:
            raise call.error("nki_invalid_argument", f"pattern count {num} must be positive")
    total = math.prod(n for _, n in pairs)
    if total != n_free:
        raise call.error("nki_shape_mismatch", f"pattern {pattern!r} generates {total} "
                         f"elements per partition but dst has {n_free}")
    return ((0, 1),) * (4 - len(pairs)) + tuple(pairs)


def _reduce_args(call: Call, reduce_op, reduce_cmd, reduce_res, parts: int):
    """(command, reduce_res tile or None) for the VectorE max reductions."""
    if as_alu(reduce_op) is not Alu.maximum:
        raise call.error("nki_invalid_argument", f"reduce_op={op_name(reduce_op)} is not "
                         "supported; only nl.maximum is")
    try:
        cmd = ReduceCmd(int(reduce_cmd))
    except (TypeError, ValueError):
        raise call.error("nki_invalid_argument", f"reduce_cmd={reduce_cmd!r} is not a "
                         "nisa.reduce_cmd") from None
    if cmd is ReduceCmd.load_reduce:
        raise call.error("nki_invalid_argument", "reduce_cmd=load_reduce needs an initial "
                         "value, which this instruction does not take")
    res = None
    if reduce_res is not None:
        res = _vector_p1(call, reduce_res, "reduce_res", parts)
        if not res.dtype.is_float:
            raise call.error("nki_dtype_mismatch", f"reduce_res must have a float dtype, got "
                             f"{res.dtype.name}")
    return cmd, res


def _emit(call: Call, opcode: Opcode, writes, reads, attrs, name) -> Instr:
    ins = Instr(opcode, tuple(writes), tuple(reads), tuple(attrs), call.loc, name or "")
    return call.trace.emit(ins, api=call.api)


# ----- GpSimd pattern generators -----------------------------------------------------------
def iota(dst, pattern, offset=0, channel_multiplier=0, name=""):
    """Fill ``dst`` (SBUF) with ``offset + p*channel_multiplier + Σ step_k*idx_k`` computed in
    int32 and cast to ``dst.dtype``; ``pattern=[[step, num], ...]`` lists up to 4 dims,
    outermost first, and its counts multiply to the elements per partition of ``dst``.

    Example:
        >>> nisa.iota(dst=idx, pattern=[[1, 512]], channel_multiplier=512)  # doctest: +SKIP
    """
    call = Call("nisa.iota")
    d = _plain(call, call.tile(dst, "dst", _SBUF), "dst")
    pat = _pattern(call, pattern, _free(d))
    attrs = (("pattern", pat), ("offset", _int32(call, offset, "offset")),
             ("channel_multiplier", _int32(call, channel_multiplier, "channel_multiplier")))
    return _emit(call, Opcode.IOTA, (("dst", acc(d)),), (), attrs, name)


def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value,
                  cmp_op=Alu.equal, offset=0, name=""):
    """``dst = on_true_tile`` where ``cmp_op(offset + p*channel_multiplier + Σ step*idx, 0)``
    holds, else the fp32 ``on_false_value``; both tiles in SBUF (GpSimd), ``dst`` may alias
    ``on_true_tile``. Bit-exact when the dtypes match, else through fp32.

    Example (causal mask, keep key j ≤ query p):
        >>> nisa.affine_select(dst=s, pattern=[[-1, F]], channel_multiplier=1,  # doctest: +SKIP
        ...                    on_true_tile=s, on_false_value=-9984.0, cmp_op=nl.greater_equal)
    """
    call = Call("nisa.affine_select")
    d = _plain(call, call.tile(dst, "dst", _SBUF), "dst")
    t = _plain(call, call.tile(on_true_tile, "on_true_tile", _SBUF), "on_true_tile")
    call.same_elements(d, t, "dst", "on_true_tile")
    pat = _pattern(call, pattern, _free(d))
    attrs = (("pattern", pat), ("offset", _int32(call, offset, "offset")),
             ("channel_multiplier", _int32(call, channel_multiplier, "channel_multiplier")),
             ("cmp_op", _alu_in(call, cmp_op, "cmp_op", _CMP)),
             ("on_false_value", _number(call, on_false_value, "on_false_value")))
    return _emit(call, Opcode.AFFINE_SELECT, (("dst", acc(d)),), (("on_true", acc(t)),),
                 attrs, name)


# ----- VectorE selects with max reduction --------------------------------------------------
def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1,
                 reduce_cmd=ReduceCmd.reset_reduce, reduce_res=None, reduce_op=Alu.maximum,
                 range_start=0, on_false_value=..., name=""):
    """Keep ``on_true_tile[p, i]`` where ``comp_op0(i + range_start, bound0[p])`` and
    ``comp_op1(i + range_start, bound1[p])`` (compared in fp32), else ``on_false_value`` (must
    be fp32 min); the fp32 results are max-reduced into the VectorE accumulators per
    ``reduce_cmd`` and read out into ``reduce_res`` [P, 1] if given. NeuronCore-v3+.

    Example:
        >>> nisa.range_select(dst=o, on_true_tile=s, comp_op0=nl.greater_equal,  # doctest: +SKIP
        ...                   comp_op1=nl.less, bound0=lo, bound1=hi, reduce_res=row_max)
    """
    call = Call("nisa.range_select")
    if call.trace.target.nc_version < 3:
        raise call.error("nki_unsupported_on_target", f"range_select needs NeuronCore-v3 or "
                         f"newer; the target is {call.trace.target.name}")
    d, t = call.tile(dst, "dst"), call.tile(on_true_tile, "on_true_tile")
    call.same_elements(d, t, "dst", "on_true_tile")
    if not t.dtype.is_float or not d.dtype.is_float:
        raise call.error("nki_dtype_mismatch", "on_true_tile and dst must have float dtypes, "
                         f"got {t.dtype.name} and {d.dtype.name}")
    bounds = [_vector_p1(call, b, r, t.shape[0]) for b, r in ((bound0, "bound0"),
                                                              (bound1, "bound1"))]
    for b, r in zip(bounds, ("bound0", "bound1")):
        if b.dtype.name != "float32":
            raise call.error("nki_dtype_mismatch", f"{r} must be float32, got {b.dtype.name}")
    fill = FP32_MIN if on_false_value is ... or on_false_value is None else \
        _number(call, on_false_value, "on_false_value")
    if np.float32(fill) != np.float32(FP32_MIN):
        raise call.error("nki_invalid_argument", f"on_false_value must be fp32 min "
                         f"({FP32_MIN:g}), got {fill!r}")
    cmd, res = _reduce_args(call, reduce_op, reduce_cmd, reduce_res, t.shape[0])
    writes = [("dst", acc(d))] + ([("reduce_res", acc(res))] if res is not None else [])
    reads = [("on_true", acc(t)), ("bound0", acc(bounds[0])), ("bound1", acc(bounds[1]))]
    attrs = (("comp_op0", _alu_in(call, comp_op0, "comp_op0", _RANGE_CMP)),
             ("comp_op1", _alu_in(call, comp_op1, "comp_op1", _RANGE_CMP)),
             ("range_start", _int32(call, range_start, "range_start")),
             ("reduce_cmd", cmd), ("on_false_value", FP32_MIN))
    return _emit(call, Opcode.RANGE_SELECT, writes, reads, attrs, name)


def select_reduce(dst, predicate, on_true, on_false, reduce_res=None,
                  reduce_cmd=ReduceCmd.idle, reduce_op=Alu.maximum, reverse_pred=False,
                  name=""):
    """``dst = where(predicate != 0, on_true, on_false)`` (``reverse_pred`` inverts) in fp32,
    with the result's row maxima reduced into the VectorE accumulators per ``reduce_cmd``;
    ``reduce_res`` [P, 1] receives the accumulators (with ``idle``: this call's row maxima).

    Example:
        >>> nisa.select_reduce(dst=o, predicate=mask, on_true=s, on_false=-3e38,  # doctest: +SKIP
        ...                    reduce_res=row_max, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    """
    call = Call("nisa.select_reduce")
    d, p = call.tile(dst, "dst"), call.tile(predicate, "predicate")
    t = call.tile(on_true, "on_true")
    call.same_elements(d, t, "dst", "on_true")
    call.same_elements(p, t, "predicate", "on_true")
    call.not_both_psum(t, p, "on_true", "predicate")
    _dtype_in(call, p, "predicate", _PRED_SELECT)
    if t.dtype.name in ("tfloat32", "int32", "uint32") or t.dtype.packed != 1:
        raise call.error("nki_dtype_mismatch", f"on_true cannot be {t.dtype.name}")
    _plain(call, d, "dst")
    f = call.scalar_vector(on_false, "on_false", t.shape[0])
    cmd, res = _reduce_args(call, reduce_op, reduce_cmd, reduce_res, t.shape[0])
    writes = [("dst", acc(d))] + ([("reduce_res", acc(res))] if res is not None else [])
    reads = [("predicate", acc(p)), ("on_true", acc(t))]
    if isinstance(f, NkiTensor):
        reads.append(("on_false", acc(f)))
    attrs = (("reverse_pred", bool(reverse_pred)), ("reduce_cmd", cmd),
             ("on_false_value", None if isinstance(f, NkiTensor) else f))
    return _emit(call, Opcode.SELECT_REDUCE, writes, reads, attrs, name)


# ----- predicated copies (also nl.where) ---------------------------------------------------
def _emit_predicated(call: Call, d: NkiTensor, src, pred: NkiTensor, on_false,
                     reverse: bool, name="") -> Instr:
    """dst = where(pred != 0 (xor reverse), src, on_false); src/on_false tiles or numbers."""
    def value(v, role):
        return None if isinstance(v, NkiTensor) else _number(call, v, role)

    reads = [(role, acc(v)) for role, v in (("src", src), ("predicate", pred),
                                            ("on_false", on_false)) if isinstance(v, NkiTensor)]
    attrs = (("reverse_pred", bool(reverse)), ("src_value", value(src, "src")),
             ("on_false_value", value(on_false, "on_false")))
    return _emit(call, Opcode.TENSOR_COPY_PREDICATED, (("dst", acc(d)),), reads, attrs, name)


def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=""):
    """Copy ``src`` into ``dst`` where ``predicate`` is nonzero (``reverse_pred``: where it is
    zero); ``dst`` keeps its bits elsewhere. ``src`` is a tile of ``dst``'s dtype or a number;
    the predicate is uint8/uint16/uint32; ``src`` and ``predicate`` not both in PSUM.

    Example:
        >>> nisa.tensor_copy_predicated(dst=acc, src=new, predicate=mask)  # doctest: +SKIP
    """
    call = Call("nisa.tensor_copy_predicated")
    d, p = _plain(call, call.tile(dst, "dst"), "dst"), call.tile(predicate, "predicate")
    call.same_elements(p, d, "predicate", "dst")
    _dtype_in(call, p, "predicate", _PRED_COPY)
    if isinstance(src, NkiTensor):
        s = call.tile(src, "src")
        call.same_elements(s, d, "src", "dst")
        call.not_both_psum(s, p, "src", "predicate")
        if s.dtype != d.dtype:
            raise call.error("nki_dtype_mismatch", f"src ({s.dtype.name}) and dst "
                             f"({d.dtype.name}) must have the same dtype")
    else:
        _number(call, src, "src")
    return _emit_predicated(call, d, src, p, d, reverse_pred, name)


# ----- VectorE arithmetic ------------------------------------------------------------------
def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False,
                         reverse1=False, name=""):
    """``dst = (data op0 operand0) op1 operand1`` in fp32: ``operand0`` is a number or a [P, 1]
    tile, ``operand1`` a tile like ``data``; arithmetic operators only; ``reverseN`` puts
    ``operandN`` on the left of ``opN``; ``data`` and ``operand1`` not both in PSUM.

    Example:
        >>> nisa.scalar_tensor_tensor(dst=y, data=x, op0=nl.subtract,  # doctest: +SKIP
        ...                           operand0=mean, op1=nl.multiply, operand1=w)
    """
    call = Call("nisa.scalar_tensor_tensor")
    d, x = _plain(call, call.tile(dst, "dst"), "dst"), call.tile(data, "data")
    u = call.tile(operand1, "operand1")
    call.same_elements(d, x, "dst", "data")
    call.same_elements(u, x, "operand1", "data")
    call.not_both_psum(x, u, "data", "operand1")
    alus = []
    for op, role in ((op0, "op0"), (op1, "op1")):
        alu = as_alu(op)
        if alu is None or alu.is_bitvec:
            raise call.error("nki_invalid_argument", f"{role}={op_name(op)} must be an "
                             "arithmetic ALU operator (bitvec operators are not supported)")
        alus.append(alu)
    s0 = call.scalar_vector(operand0, "operand0", x.shape[0])
    reads = [("data", acc(x))]
    if isinstance(s0, NkiTensor):
        reads.append(("operand0", acc(s0)))
    reads.append(("operand1", acc(u)))
    attrs = (("op0", alus[0]), ("op1", alus[1]), ("reverse0", bool(reverse0)),
             ("reverse1", bool(reverse1)),
             ("operand0_value", None if isinstance(s0, NkiTensor) else s0))
    return _emit(call, Opcode.SCALAR_TENSOR_TENSOR, (("dst", acc(d)),), reads, attrs, name)


def dropout(dst, data, prob, name=""):
    """Zero each element of ``data`` with probability ``prob`` (a number or a [P, 1] tile);
    kept elements are copied bit-exactly (no rescaling). ``dst.dtype`` must equal
    ``data.dtype``. The random bits are the Vector engine's XORWOW draws, the generator of
    ``nisa.rng`` / ``nl.rand``, so ``set_rng_seed`` / ``nl.random_seed`` /
    ``rand_set_state`` make masks reproducible (which bits decide: ``nki/sim/emit/rng.py``).

    Example:
        >>> nisa.dropout(dst=y, data=x, prob=0.1)  # doctest: +SKIP
    """
    call = Call("nisa.dropout")
    d, x = _plain(call, call.tile(dst, "dst"), "dst"), call.tile(data, "data")
    call.same_elements(d, x, "dst", "data")
    if d.dtype != x.dtype:
        raise call.error("nki_dtype_mismatch", f"dst ({d.dtype.name}) must have data's dtype "
                         f"({x.dtype.name})")
    pr = call.scalar_vector(prob, "prob", x.shape[0])
    reads = [("data", acc(x))]
    if isinstance(pr, NkiTensor):
        if not pr.dtype.is_float or (x.dtype.is_int and pr.dtype.name != "float32"):
            raise call.error("nki_dtype_mismatch", f"prob must be a float tile (float32 for "
                             f"integer data), got {pr.dtype.name}")
        reads.append(("prob", acc(pr)))
    from nki.lang.rng import emit_dropout

    return emit_dropout(call, d, reads, None if isinstance(pr, NkiTensor) else float(pr), name)


# ----- cross-partition shuffle -------------------------------------------------------------
def _start_partition(t: NkiTensor) -> int:
    part = t.access().partition.const
    if t.decl.user_address and t.decl.address is not None:
        part += t.decl.address[0]
    return part


def _shuffle_mask(call: Call, mask) -> tuple[int, ...]:
    try:
        m = tuple(int(v) for v in mask)
    except (TypeError, ValueError):
        raise call.error("nki_invalid_argument", "shuffle_mask must be a list of 32 ints") \
            from None
    if len(m) != 32 or any(not (0 <= v < 32 or v == 255) for v in m):
        raise call.error("nki_invalid_argument", f"shuffle_mask must hold 32 entries in "
                         f"[0, 32) or 255, got {list(mask)!r}")
    return m


def _emit_shuffle(call: Call, d: NkiTensor, s: NkiTensor, mask: tuple[int, ...], name=""):
    for p in range(d.shape[0]):
        m = mask[p % 32]
        if m != 255 and (p // 32) * 32 + m >= s.shape[0]:
            raise call.error("nki_invalid_argument", f"shuffle_mask[{p % 32}]={m} makes dst "
                             f"partition {p} read src partition {(p // 32) * 32 + m}, but src "
                             f"has {s.shape[0]} partitions")
    reads = [("src", acc(s))]
    if any(mask[p % 32] == 255 for p in range(d.shape[0])):
        reads.append(("dst_in", acc(d)))   # partitions with mask 255 keep dst's contents
    return _emit(call, Opcode.NC_STREAM_SHUFFLE, (("dst", acc(d)),), reads,
                 (("shuffle_mask", mask),), name)


def nc_stream_shuffle(dst, src, shuffle_mask, name=""):
    """Within each 32-partition quadrant, ``dst[q*32+i] = src[q*32+shuffle_mask[i]]``
    (``255`` leaves ``dst`` partition i unchanged); same dtype and elements per partition;
    in-place allowed; start partitions must suit the active quadrants.

    Example:
        >>> nisa.nc_stream_shuffle(dst=b, src=a, shuffle_mask=[0] * 32)  # doctest: +SKIP
    """
    call = Call("nisa.nc_stream_shuffle")
    d, s = call.tile(dst, "dst"), call.tile(src, "src")
    if d.dtype != s.dtype:
        raise call.error("nki_dtype_mismatch", f"dst ({d.dtype.name}) and src "
                         f"({s.dtype.name}) must have the same dtype")
    if _free(d) != _free(s):
        raise call.error("nki_shape_mismatch", f"dst {d.shape} and src {s.shape} must have "
                         "the same elements per partition")
    active = -(-max(d.shape[0], s.shape[0]) // 32) * 32
    starts = {128: (0,), 96: (0,), 64: (0, 64), 32: (0, 32, 64, 96)}[active]
    for t, role in ((d, "dst"), (s, "src")):
        if _start_partition(t) not in starts:
            raise call.error("nki_invalid_argument", f"{role} starts at partition "
                             f"{_start_partition(t)}; with {active} active partitions it must "
                             f"start at {' or '.join(map(str, starts))}")
    return _emit_shuffle(call, d, s, _shuffle_mask(call, shuffle_mask), name)


# ----- top-8 search ------------------------------------------------------------------------
def _top8_data(call: Call, value, role: str) -> NkiTensor:
    t = _plain(call, call.tile(value, role), role)
    if t.ndim > 3 or not _TOP8_MIN <= _free(t) <= _TOP8_MAX:
        raise call.error("nki_shape_mismatch", f"{role!r} {t.shape} must be at most 3-D with "
                         f"{_TOP8_MIN} to {_TOP8_MAX} elements per partition")
    return t


def _eight(call: Call, value, role: str, parts: int, dtypes=None) -> NkiTensor:
    t = _plain(call, call.tile(value, role), role)
    if t.shape[0] != parts:
        raise call.error("err_num_partition_mismatch", f"{role!r} has {t.shape[0]} partitions "
                         f"but the data has {parts}")
    if _free(t) != 8 or t.ndim > 3:
        raise call.error("nki_shape_mismatch", f"{role!r} must hold 8 elements per partition, "
                         f"got shape {t.shape}")
    if dtypes is not None:
        _dtype_in(call, t, role, dtypes)
    return t


def max8(dst, src, name=""):
    """The 8 largest values of each partition of ``src`` (compared in fp32), descending, into
    ``dst`` [P, 8]; ``src`` ≤ 3-D with 8 to 16384 elements per partition.

    Example:
        >>> nisa.max8(dst=top, src=scores)  # doctest: +SKIP
    """
    call = Call("nisa.max8")
    s = _top8_data(call, src, "src")
    d = _eight(call, dst, "dst", s.shape[0])
    return _emit(call, Opcode.MAX8, (("dst", acc(d)),), (("src", acc(s)),), (), name)


def nc_find_index8(dst, data, vals, name=""):
    """Flattened free index of the first occurrence of each of the 8 ``vals`` per partition
    (compared in fp32; a repeated value maps to the next occurrence; not found gives all ones)
    into ``dst`` [P, 8] of uint16/uint32.

    Example:
        >>> nisa.nc_find_index8(dst=idx, data=scores, vals=top)  # doctest: +SKIP
    """
    call = Call("nisa.nc_find_index8")
    x = _top8_data(call, data, "data")
    v = _eight(call, vals, "vals", x.shape[0])
    d = _eight(call, dst, "dst", x.shape[0], _INDEX_DTYPES)
    return _emit(call, Opcode.NC_FIND_INDEX8, (("dst", acc(d)),),
                 (("data", acc(x)), ("vals", acc(v))), (), name)


def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=""):
    """``dst`` = ``data`` with the first occurrence of each of the 8 ``vals`` (successive
    occurrences for repeated values) replaced by ``imm``; ``dst_idx`` [P, 8] (uint16/uint32),
    if given, receives their indices (all ones when not found). The values are matched from
    ``vals[7]`` down to ``vals[0]`` (the hardware's order), so of repeated values the last
    slot gets the first occurrence and lower slots the later ones, in descending order
    (``nc_find_index8`` pairs them ascending). Values pass through fp32.

    Example:
        >>> nisa.nc_match_replace8(dst=s, data=s, vals=top, imm=-3e38)  # doctest: +SKIP
    """
    call = Call("nisa.nc_match_replace8")
    x = _top8_data(call, data, "data")
    v = _eight(call, vals, "vals", x.shape[0])
    d = _plain(call, call.tile(dst, "dst"), "dst")
    call.same_elements(d, x, "dst", "data")
    writes = [("dst", acc(d))]
    if dst_idx is not None:
        writes.append(("dst_idx", acc(_eight(call, dst_idx, "dst_idx", x.shape[0],
                                             _INDEX_DTYPES))))
    return _emit(call, Opcode.NC_MATCH_REPLACE8, writes, (("data", acc(x)), ("vals", acc(v))),
                 (("imm", _number(call, imm, "imm")),), name)


# ----- nl-level wrappers -------------------------------------------------------------------
def _new_tile(shape, dtype) -> NkiTensor:
    from nki.lang.creation import value_result

    return value_result(shape, dtype, buffer=Memory.SBUF)


def where(condition, x, y, dtype=None):
    """A new SBUF tile: ``x`` where ``condition`` is nonzero, else ``y``; ``x``/``y`` are tiles
    of ``condition``'s shape or numbers. Bit-exact when all dtypes match, else via fp32.

    Example:
        >>> masked = nl.where(mask, scores, -9984.0)  # doctest: +SKIP
    """
    call = Call("nl.where")
    c = call.tile(condition, "condition")
    for value, role in ((x, "x"), (y, "y")):
        if isinstance(value, NkiTensor):
            if call.tile(value, role).shape != c.shape:
                raise call.error("nki_shape_mismatch", f"{role!r} {value.shape} must have "
                                 f"the condition's shape {c.shape} (no broadcasting)")
            _plain(call, value, role)
        else:
            _number(call, value, role)
    like = x if isinstance(x, NkiTensor) else y if isinstance(y, NkiTensor) else None
    out_dtype = dtype_of(dtype) if dtype is not None else \
        (like.dtype if like is not None else dtype_of("float32"))
    out = _new_tile(c.shape, out_dtype)
    _emit_predicated(call, out, x, c, y, False)
    return out


def _replicate_partition(call: Call, rows: NkiTensor, x: NkiTensor) -> None:
    """rows[p] = x[0] for every partition, exactly: one shuffle fills the first quadrant from
    the single source partition, then quadrant-to-quadrant shuffles copy it on."""
    n = rows.shape[0]
    _emit_shuffle(call, rows[0:min(32, n)], x, (0,) * 32)
    for q0 in range(32, n, 32):
        k = min(32, n - q0)
        _emit_shuffle(call, rows[q0:q0 + k], rows[0:k], tuple(range(32)))


def broadcast_to(x, shape, dtype=None):
    """A new SBUF tile of ``shape`` (same rank as ``x``) repeating ``x`` along its size-1 dims;
    a [1, ...] tile is replicated across partitions exactly (stream shuffles), free dims by a
    stride-0 view and a copy (cast to ``dtype`` if given).

    Example:
        >>> b = nl.broadcast_to(bias_row, (128, 512))  # doctest: +SKIP
    """
    from nki.lang.vector import tensor_copy

    call = Call("nl.broadcast_to")
    t = _plain(call, call.tile(x, "x"), "x")
    shape = tuple(int(s) for s in shape)
    if len(shape) != t.ndim or any(a != b and a != 1 for a, b in zip(t.shape, shape)):
        raise call.error("nki_shape_mismatch", f"cannot broadcast {t.shape} to {shape}: same "
                         "rank needed and only size-1 dims may grow")
    out = _new_tile(shape, dtype_of(dtype) if dtype is not None else t.dtype)
    src = t
    if shape[0] != t.shape[0]:
        src = _new_tile((shape[0],) + t.shape[1:], t.dtype)
        _replicate_partition(call, src, t)
    tensor_copy(dst=out, src=src.broadcast_to(shape))
    return out


def nl_dropout(x, rate, dtype=None):
    """A new SBUF tile: ``x`` with each element zeroed with probability ``rate`` (no
    rescaling), cast to ``dtype`` if given.

    Example:
        >>> y = nl.dropout(x, 0.1)  # doctest: +SKIP
    """
    from nki.lang.vector import tensor_copy

    call = Call("nl.dropout")
    t = call.tile(x, "x")
    out = _new_tile(t.shape, t.dtype)
    dropout(dst=out, data=t, prob=rate)
    if dtype is None or dtype_of(dtype) == t.dtype:
        return out
    cast = _new_tile(t.shape, dtype_of(dtype))
    tensor_copy(dst=cast, src=out)
    return cast


def device_print(prefix, tensor):
    """Print a tensor at run time (the rule lives in ``nki/lang/misc.py``).

    Example:
        >>> nl.device_print("scores", s)  # doctest: +SKIP
    """
    from nki.lang.misc import device_print as _device_print

    return _device_print(prefix, tensor)


nl_dropout.__name__ = nl_dropout.__qualname__ = "dropout"

# nl-level functions this family adds to nki.language: {name: function}
NL_EXPORTS: dict = {"where": where, "broadcast_to": broadcast_to, "dropout": nl_dropout,
                    "device_print": device_print}
