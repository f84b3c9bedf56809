"""``nl`` elementwise math: each function is both an operator token (``op=nl.add``) and a
convenience wrapper that allocates its result tile (``nl.add(a, b)``), lowering to one ISA
instruction as NKI's wrappers do (spec §3.4)."""

from __future__ import annotations

from nki.ir.ops import Act, Alu
from nki.ir.types import Memory
from nki.lang.common import Call
from nki.lang.operators import token
from nki.lang.tensor import NkiTensor


def _result(x: NkiTensor, dtype) -> NkiTensor:
    from nki.lang.creation import value_result

    return value_result(x.shape, dtype or x.dtype, buffer=Memory.SBUF)


def _binary(api: str, alu: Alu, x, y, dtype):
    from nki.lang import vector

    call = Call(api)
    if isinstance(x, NkiTensor) and isinstance(y, NkiTensor):
        if x.shape != y.shape:
            raise call.error("nki_shape_mismatch", f"operands must have the same shape (no "
                             f"broadcasting between tiles), got {x.shape} and {y.shape}")
        out = _result(x, dtype)
        vector.tensor_tensor(dst=out, data1=x, data2=y, op=alu)
        return out
    if isinstance(x, NkiTensor):
        out = _result(x, dtype)
        vector.tensor_scalar(dst=out, data=x, op0=alu, operand0=float(y))
        return out
    if isinstance(y, NkiTensor):
        out = _result(y, dtype)
        vector.tensor_scalar(dst=out, data=y, op0=alu, operand0=float(x), reverse0=True)
        return out
    raise call.error("nki_invalid_argument", "at least one operand must be a tensor")


def _unary_act(api: str, act: Act, x, dtype):
    from nki.lang.activation import activation

    Call(api)
    out = _result(x, dtype)
    activation(dst=out, op=act, data=x)
    return out


def _make_binary(name: str, alu: Alu):
    def fn(x, y, dtype=None):
        return _binary(f"nl.{name}", alu, x, y, dtype)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise ``{name}`` of two same-shape tiles, or a tile and a scalar."
    return token(alu=alu)(fn)


def _make_unary(name: str, act: Act | None, alu: Alu | None = None):
    def fn(x, dtype=None):
        return _unary_act(f"nl.{name}", act, x, dtype)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise ``{name}`` (Scalar engine activation)."
    return token(alu=alu, act=act)(fn)


_BINARY = {n: Alu[n] for n in (
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "mod", "fmod",
    "abs_max", "abs_min", "equal", "not_equal", "greater", "greater_equal", "less",
    "less_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
    "bitwise_xor", "left_shift", "right_shift")}
_UNARY = {"exp": (Act.exp, Alu.exp), "log": (Act.log, None), "sin": (Act.sin, None),
          "cos": (Act.cos, None), "tan": (Act.tan, None), "arctan": (Act.arctan, None),
          "tanh": (Act.tanh, None), "sigmoid": (Act.sigmoid, None),
          "relu": (Act.relu, Alu.relu), "gelu": (Act.gelu, None),
          "gelu_dx": (Act.gelu_dx, None), "gelu_apprx_tanh": (Act.gelu_apprx_tanh, None),
          "gelu_apprx_sigmoid": (Act.gelu_apprx_sigmoid, None),
          "gelu_apprx_sigmoid_dx": (Act.gelu_apprx_sigmoid_dx, None),
          "silu": (Act.silu, None), "silu_dx": (Act.silu_dx, None), "erf": (Act.erf, None),
          "erf_dx": (Act.erf_dx, None), "softplus": (Act.softplus, None),
          "mish": (Act.mish, None), "square": (Act.square, Alu.square),
          "sqrt": (Act.sqrt, Alu.sqrt), "rsqrt": (Act.rsqrt, Alu.rsqrt),
          "reciprocal": (Act.reciprocal, Alu.reciprocal), "sign": (Act.sign, Alu.sign),
          "abs": (Act.abs, Alu.abs), "negative": (Act.negative, Alu.negative),
          "floor": (Act.floor, None), "ceil": (Act.ceil, None), "trunc": (Act.trunc, None),
          "copy": (Act.copy, Alu.bypass), "identity": (Act.copy, Alu.bypass),
          "prelu": (Act.prelu, None)}

OPERATORS = {name: _make_binary(name, alu) for name, alu in _BINARY.items()}
OPERATORS.update({name: _make_unary(name, act, alu) for name, (act, alu) in _UNARY.items()})
bypass = token(alu=Alu.bypass, act=Act.copy)(lambda x, dtype=None: x)
bypass.__name__ = "bypass"
OPERATORS["bypass"] = bypass
