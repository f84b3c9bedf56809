"""Vector/GpSimd elementwise rules: ``tensor_tensor``, ``tensor_scalar``, ``tensor_copy``,
``memset``, ``reciprocal`` (spec §4.1)."""

from __future__ import annotations

from nki.ir.nodes import Instr
from nki.ir.ops import Alu, Engine, Opcode
from nki.ir.types import Memory
from nki.lang.common import Call, acc
from nki.lang.hints import records
from nki.lang.operators import as_alu, op_name
from nki.lang.tensor import NkiTensor

_INT_GPSIMD = (Alu.add, Alu.subtract, Alu.multiply, Alu.maximum, Alu.minimum)


def _engine(call: Call, engine, *tensors: NkiTensor) -> Engine:
    eng = Engine(int(engine)) if engine is not None else Engine.unknown
    if eng is Engine.gpsimd:
        for t in tensors:
            if t.buffer is Memory.PSUM:
                raise call.error("err_unsupported_memory",
                                 f"the GpSimd engine cannot access PSUM ({t.name!r})")
    return eng


def _alu(call: Call, op, role: str = "op") -> Alu:
    alu = as_alu(op)
    if alu is None:
        raise call.error("nki_invalid_argument", f"{role}={op_name(op)} is not an ALU operator")
    return alu


def _int_math(alu: Alu, *tensors: NkiTensor) -> bool:
    """Bit operations always, and all-32-bit-integer arithmetic (GpSimd native ints)."""
    if alu.is_bitvec:
        return True
    return alu in _INT_GPSIMD and all(t.dtype.name in ("int32", "uint32") for t in tensors)


@records("engine")
def tensor_tensor(dst, data1, data2, op, engine=None, name=""):
    """``dst = data1 op data2`` elementwise; same partitions and elements per partition; not
    both inputs in PSUM.

    Example:
        >>> nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.add)  # doctest: +SKIP
    """
    call = Call("nisa.tensor_tensor")
    d, a, b = call.tile(dst, "dst"), call.tile(data1, "data1"), call.tile(data2, "data2")
    call.same_elements(a, b, "data1", "data2")
    call.same_elements(d, a, "dst", "data1")
    call.not_both_psum(a, b, "data1", "data2")
    alu = _alu(call, op)
    _engine(call, engine, d, a, b)
    if alu.is_bitvec and not all(t.dtype.is_int for t in (a, b, d)):
        raise call.error("nki_dtype_mismatch", f"bitwise op {alu.name} needs integer operands")
    ins = Instr(Opcode.TENSOR_TENSOR, (("dst", acc(d)),),
                (("data1", acc(a)), ("data2", acc(b))),
                (("op", alu), ("int_math", _int_math(alu, a, b, d))), call.loc, name)
    return call.trace.emit(ins, api=call.api)


@records("engine")
def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None,
                  reverse1=False, engine=None, name=""):
    """``dst = (data op0 operand0) op1 operand1``; operands are scalars or [P,1] tiles.

    Example:
        >>> nisa.tensor_scalar(dst=y, data=x, op0=nl.multiply, operand0=2.0)  # doctest: +SKIP
    """
    call = Call("nisa.tensor_scalar")
    d, x = call.tile(dst, "dst"), call.tile(data, "data")
    call.same_elements(d, x, "dst", "data")
    a0 = _alu(call, op0, "op0")
    if (op1 is None) != (operand1 is None) and not (op1 is not None and as_alu(op1) and
                                                    as_alu(op1).is_unary):
        raise call.error("nki_invalid_argument", "op1 and operand1 must be given together")
    reads = [("data", acc(x))]
    attrs = [("op0", a0), ("reverse0", bool(reverse0))]
    s0 = call.scalar_vector(0.0 if operand0 is None else operand0, "operand0", x.shape[0])
    _scalar_attr(reads, attrs, s0, "operand0", "imm0")
    a1 = None
    if op1 is not None:
        a1 = _alu(call, op1, "op1")
        s1 = call.scalar_vector(0.0 if operand1 is None else operand1, "operand1", x.shape[0])
        _scalar_attr(reads, attrs, s1, "operand1", "imm1")
    attrs += [("op1", a1), ("reverse1", bool(reverse1))]
    bitvec = a0.is_bitvec or (a1 is not None and a1.is_bitvec)
    if bitvec and (a0.is_bitvec != (a1 is None or a1.is_bitvec)):
        raise call.error("nki_invalid_argument", "op0 and op1 must both be bitvec operators "
                         "or both arithmetic")
    attrs.append(("int_math", bitvec or (_int_math(a0, x, d) and (a1 is None or
                                                                 _int_math(a1, x, d)))))
    _engine(call, engine, d, x)
    ins = Instr(Opcode.TENSOR_SCALAR, (("dst", acc(d)),), tuple(reads), tuple(attrs),
                call.loc, name)
    return call.trace.emit(ins, api=call.api)


def _scalar_attr(reads, attrs, value, role, imm):
    if isinstance(value, NkiTensor):
        reads.append((role, acc(value)))
        attrs.append((imm, None))
    else:
        attrs.append((imm, float(value)))


@records("engine")
def tensor_copy(dst, src, engine=None, name=""):
    """``dst = src`` (bit-exact when dtypes match, else through fp32).

    Example:
        >>> nisa.tensor_copy(dst=sb, src=ps)  # doctest: +SKIP
    """
    call = Call("nisa.tensor_copy")
    d, s = call.tile(dst, "dst"), call.tile(src, "src")
    call.same_elements(d, s, "dst", "src")
    _engine(call, engine, d, s)
    ins = Instr(Opcode.TENSOR_COPY, (("dst", acc(d)),), (("src", acc(s)),), (), call.loc,
                name)
    return call.trace.emit(ins, api=call.api)


def emit_memset(call: Call, d: NkiTensor, value) -> Instr:
    is_int = d.dtype.is_int
    if is_int and float(value) != int(value):
        raise call.error("nki_dtype_mismatch", f"memset value {value!r} is not an integer "
                         f"but dst is {d.dtype.name}")
    ins = Instr(Opcode.MEMSET, (("dst", acc(d)),), (),
                (("value", int(value) if is_int else float(value)), ("is_int", is_int)),
                call.loc)
    return call.trace.emit(ins, api=call.api)


@records("engine", "name")
def memset(dst, value, engine=None, name=""):
    """Fill ``dst`` with a compile-time constant.

    Example:
        >>> nisa.memset(dst=acc, value=0.0)  # doctest: +SKIP
    """
    call = Call("nisa.memset")
    d = call.tile(dst, "dst")
    _engine(call, engine, d)
    return emit_memset(call, d, value)


def reciprocal(dst, data, name=""):
    """``dst = 1 / data`` on the Vector engine (IEEE fp32 division)."""
    call = Call("nisa.reciprocal")
    d, x = call.tile(dst, "dst"), call.tile(data, "data")
    call.same_elements(d, x, "dst", "data")
    ins = Instr(Opcode.RECIPROCAL, (("dst", acc(d)),), (("data", acc(x)),), (), call.loc, name)
    return call.trace.emit(ins, api=call.api)
