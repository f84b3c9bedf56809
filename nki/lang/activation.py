"""Scalar-engine activation rules: ``activation`` and ``activation_reduce`` (spec §4.1, §4.2).

``dst = op(data * scale + bias)`` with fp32 internal math. The optional free-dim sum goes into
the Scalar engine's 128 per-partition fp32 reduce registers, which persist between
instructions (they are shared by every ``activation``/``activation_reduce`` of a run) and are
driven by ``reduce_cmd``.
"""

from __future__ import annotations

from collections.abc import Hashable
from numbers import Real

from nki.errors import NkiUnsupportedError, fail
from nki.ir.nodes import Instr
from nki.ir.ops import Act, Alu, Opcode, ReduceCmd
from nki.lang.common import Call, acc
from nki.lang.operators import _ACT as _ACT_TOKENS
from nki.lang.operators import as_act, as_alu, op_name
from nki.lang.tensor import NkiTensor

__all__ = ["activation", "activation_reduce"]

# Activation functions the spec names but whose semantics it does not define for
# ``activation`` (prelu's slope has no parameter here; only activate2 has ``relu_param``).
_UNDEFINED = (Act.prelu,)


def _act(call: Call, op) -> Act:
    act = None
    if isinstance(op, Hashable):
        # as_act loses Act.copy (value 0 is falsy in its ``a or b`` lookup): look it up here
        act = as_act(op)
        act = _ACT_TOKENS.get(op) if act is None else act
    if act is None:
        raise call.error("nki_invalid_argument",
                         f"op={op_name(op)} is not a Scalar-engine activation function")
    if act in _UNDEFINED:
        raise fail("nki_not_implemented", f"{call.api}: op={act.name} has no defined "
                   f"semantics for activation (no slope parameter)", call.loc,
                   NkiUnsupportedError)
    return act


def _is_number(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _scale(call: Call, scale, x: NkiTensor) -> NkiTensor | float:
    """A Python number, or a [P, 1] fp32 on-chip tile."""
    if _is_number(scale):
        return float(scale)
    if not isinstance(scale, NkiTensor):
        raise call.error("err_activation_scale_invalid_type",
                         f"scale must be a number or an fp32 [P,1] tile, got "
                         f"{type(scale).__name__}")
    s = call.tile(scale, "scale")
    if s.dtype.name != "float32":
        raise call.error("err_activation_scale_invalid_type",
                         f"a scale tile must be float32, got {s.dtype.name}")
    call.same_partitions(s, x, "scale", "data")
    if s.size // s.shape[0] != 1:
        raise call.error("err_activation_scale_scalar_or_vector",
                         f"scale must be a scalar or a [{x.shape[0]}, 1] vector, got shape "
                         f"{s.shape}")
    return s


def _bias(call: Call, bias, x: NkiTensor) -> NkiTensor | float | None:
    """None, a [P, 1] on-chip tile of a float type other than tfloat32, or (NeuronCore-v3+)
    a Python number."""
    if bias is None:
        return None
    if _is_number(bias):
        if call.trace.target.nc_version < 3:
            raise call.error("err_activation_bias_invalid_type",
                             f"a scalar bias needs NeuronCore-v3 or later; target "
                             f"{call.trace.target.name} takes only a [P,1] vector")
        return float(bias)
    if not isinstance(bias, NkiTensor):
        raise call.error("err_activation_bias_invalid_type",
                         f"bias must be a [P,1] tile, got {type(bias).__name__}")
    b = call.tile(bias, "bias")
    dt = b.dtype
    if not dt.is_float or dt.name == "tfloat32" or dt.packed != 1:
        raise call.error("err_activation_bias_invalid_type",
                         f"bias dtype {dt.name} is not allowed (a float type other than "
                         f"tfloat32)")
    call.same_partitions(b, x, "bias", "data")
    if b.size // b.shape[0] != 1:
        raise call.error("err_activation_bias_invalid_type",
                         f"bias must be a [{x.shape[0]}, 1] vector, got shape {b.shape}")
    return b


def _reduce_res(call: Call, reduce_res, x: NkiTensor) -> NkiTensor | None:
    if reduce_res is None:
        return None
    r = call.tile(reduce_res, "reduce_res")
    call.same_partitions(r, x, "reduce_res", "data")
    if r.size // r.shape[0] != 1:
        raise call.error("nki_shape_mismatch",
                         f"reduce_res must be a [{x.shape[0]}, 1] tile, got shape {r.shape}")
    if r.dtype.packed != 1:
        raise call.error("nki_dtype_mismatch", f"reduce_res cannot be {r.dtype.name}")
    return r


def _reduce_op(call: Call, reduce_op, required: bool) -> None:
    if reduce_op is None and not required:
        return
    if as_alu(reduce_op) is not Alu.add:
        raise call.error("nki_invalid_argument",
                         f"reduce_op must be nl.add, got {op_name(reduce_op)}")


def _reduce_cmd(call: Call, reduce_cmd) -> ReduceCmd:
    try:
        cmd = ReduceCmd(int(reduce_cmd))
    except (TypeError, ValueError):
        cmd = None
    if cmd is None or cmd is ReduceCmd.load_reduce:
        raise call.error("nki_invalid_argument", f"reduce_cmd={reduce_cmd!r} is not one of "
                         f"idle, reset, reduce, reset_reduce")
    return cmd


def _operand_dtypes(call: Call, *pairs: tuple[NkiTensor, str]) -> None:
    for t, role in pairs:
        if t.dtype.packed != 1:
            raise call.error("nki_dtype_mismatch", f"{role!r} cannot be {t.dtype.name} "
                             f"(packed x4 types are matmul/quantize operands only)")


def _emit(call: Call, dst, op, data, bias, scale, reduce_op, reduce_res, cmd: ReduceCmd,
          reduce_required: bool, name: str) -> Instr:
    """Check every operand of an activation and emit it."""
    d, x = call.tile(dst, "dst"), call.tile(data, "data")
    call.same_elements(d, x, "dst", "data")
    _operand_dtypes(call, (d, "dst"), (x, "data"))
    act = _act(call, op)
    s = _scale(call, scale, x)
    b = _bias(call, bias, x)
    if act is Act.reciprocal and b is not None and call.trace.target.nc_version < 3:
        raise call.error("nki_invalid_argument", "reciprocal cannot take a bias on "
                         "NeuronCore-v2 (trn1)")
    _reduce_op(call, reduce_op, reduce_required)
    r = _reduce_res(call, reduce_res, x)
    writes = [("dst", acc(d))] + ([("reduce_res", acc(r))] if r is not None else [])
    reads = [("data", acc(x))]
    if isinstance(b, NkiTensor):
        reads.append(("bias", acc(b)))
    if isinstance(s, NkiTensor):
        reads.append(("scale", acc(s)))
    attrs = (("op", act), ("reduce_cmd", cmd),
             ("scale", None if isinstance(s, NkiTensor) else s),
             ("bias", b if isinstance(b, float) else None))
    ins = Instr(Opcode.ACTIVATION, tuple(writes), tuple(reads), attrs, call.loc, name)
    return call.trace.emit(ins, api=call.api)


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=ReduceCmd.idle, name: str = "") -> Instr:
    """``dst = op(data * scale + bias)`` on the Scalar engine, with an optional free-dim sum
    into the engine's 128 per-partition fp32 reduce registers.

    Math is fp32: ``data`` is decoded to fp32, multiplied by ``scale`` (rounded), ``bias`` is
    added (rounded; skipped when ``bias`` is None), ``op`` is applied, and the result is
    rounded to ``dst.dtype`` (nearest even; integers saturate). Functions are accurate to a
    few fp32 ulp everywhere, also outside the ScalarE's valid input ranges (spec §4.2, e.g.
    sin beyond [-pi, pi]) where hardware results are undefined. ``prelu`` is rejected
    (``nki_not_implemented``): the spec gives ``activation`` no slope parameter for it.

    The reduction sums the fp32 results of ``op`` (before they are rounded to ``dst.dtype``:
    the engine computes in fp32 and casts on write-out; the spec leaves this implicit). Each
    partition's register accumulates the row in free-dim order, one fp32 addition per element,
    starting from the register (``reduce``) or from zero (``reset_reduce``). ``reduce_cmd``:
    ``idle`` leaves the registers alone, ``reset`` zeroes them (and adds nothing),
    ``reset_reduce`` sets them to this call's row sums, ``reduce`` adds this call's row sums.
    ``reduce_res`` ([P, 1], any dtype), if given, receives the registers after the update.
    Register ``i`` belongs to physical partition ``i``: an instruction on partitions
    ``[p, p+P)`` of ``data`` uses registers ``[p, p+P)``.

    Args:
        dst: SBUF/PSUM tile, same partitions and elements per partition as ``data``.
        op: activation function token (``nl.exp``, ``nl.copy``, ``np.tanh``, an ``Act``).
        data: SBUF/PSUM tile, any dtype.
        bias: None, a [P, 1] tile of a float type other than tfloat32, or (trn2+) a number.
        scale: a number or a [P, 1] float32 tile.
        reduce_op: None or ``nl.add`` (the only reduction the engine has).
        reduce_res: None or a [P, 1] tile receiving the registers.
        reduce_cmd: ``nisa.reduce_cmd.idle|reset|reduce|reset_reduce``.
        name: instruction name (scheduling).

    Returns:
        The emitted instruction.

    Example:
        >>> nisa.activation(dst=y, op=nl.exp, data=x, bias=neg_max, scale=1.0,
        ...                 reduce_op=nl.add, reduce_res=row_sum,
        ...                 reduce_cmd=nisa.reduce_cmd.reset_reduce)  # doctest: +SKIP
    """
    call = Call("nisa.activation")
    cmd = _reduce_cmd(call, reduce_cmd)
    return _emit(call, dst, op, data, bias, scale, reduce_op, reduce_res, cmd, False, name)


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0,
                      name: str = "") -> Instr:
    """``activation`` with ``reduce_cmd=reset_reduce``: ``dst = op(data * scale + bias)`` and
    each partition's register is set to the fp32 sum of its row of results, then read out
    into ``reduce_res`` ([P, 1]); ``reduce_res=None`` leaves the sum in the registers for a
    later ``activation(..., reduce_cmd=reduce_cmd.reduce)`` chain.

    Args:
        dst: SBUF/PSUM tile, same partitions and elements per partition as ``data``.
        op: activation function token.
        data: SBUF/PSUM tile.
        reduce_op: must be ``nl.add``.
        reduce_res: [P, 1] tile or None.
        bias: None, a [P, 1] float tile, or (trn2+) a number.
        scale: a number or a [P, 1] float32 tile.
        name: instruction name.

    Returns:
        The emitted instruction.

    Example:
        >>> nisa.activation_reduce(dst=e, op=nl.exp, data=x, reduce_op=nl.add,
        ...                        reduce_res=row_sum, bias=neg_max)  # doctest: +SKIP
    """
    call = Call("nisa.activation_reduce")
    return _emit(call, dst, op, data, bias, scale, reduce_op, reduce_res,
                 ReduceCmd.reset_reduce, True, name)
