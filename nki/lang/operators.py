"""Operator tokens: what ``op=nl.add`` (or ``op=np.add``) means to an instruction.

``nl.add`` and friends are functions (the convenience wrappers in ``nki.language``) that also
serve as operator names. This module maps each of them — and the numpy ufuncs legacy kernels
pass — to the IR's :class:`Alu` and :class:`Act` enums.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nki.ir.ops import Act, Alu

_ALU: dict[object, Alu] = {}
_ACT: dict[object, Act] = {}


def token(alu: Alu | None = None, act: Act | None = None) -> Callable:
    """Decorator: register a function as the token of an ALU op and/or activation."""

    def deco(fn):
        if alu is not None:
            _ALU[fn] = alu
        if act is not None:
            _ACT[fn] = act
        return fn

    return deco


_NUMPY_ALU = {
    np.add: Alu.add, np.subtract: Alu.subtract, np.multiply: Alu.multiply,
    np.divide: Alu.divide, np.true_divide: Alu.divide, np.maximum: Alu.maximum,
    np.minimum: Alu.minimum, np.max: Alu.maximum, np.amax: Alu.maximum, np.min: Alu.minimum,
    np.amin: Alu.minimum, np.power: Alu.power, np.mod: Alu.mod, np.fmod: Alu.fmod,
    np.equal: Alu.equal, np.not_equal: Alu.not_equal, np.greater: Alu.greater,
    np.greater_equal: Alu.greater_equal, np.less: Alu.less, np.less_equal: Alu.less_equal,
    np.logical_and: Alu.logical_and, np.logical_or: Alu.logical_or,
    np.logical_xor: Alu.logical_xor, np.bitwise_and: Alu.bitwise_and,
    np.bitwise_or: Alu.bitwise_or, np.bitwise_xor: Alu.bitwise_xor,
    np.left_shift: Alu.left_shift, np.right_shift: Alu.right_shift, np.abs: Alu.abs,
    np.negative: Alu.negative, np.square: Alu.square, np.sqrt: Alu.sqrt,
    np.reciprocal: Alu.reciprocal, np.sign: Alu.sign, np.invert: Alu.invert,
    np.logical_not: Alu.logical_not, np.sum: Alu.add, np.prod: Alu.multiply,
}
_NUMPY_ACT = {np.exp: Act.exp, np.log: Act.log, np.sin: Act.sin, np.cos: Act.cos,
              np.tan: Act.tan, np.arctan: Act.arctan, np.tanh: Act.tanh, np.sqrt: Act.sqrt,
              np.square: Act.square, np.abs: Act.abs, np.sign: Act.sign,
              np.negative: Act.negative, np.reciprocal: Act.reciprocal}


def as_alu(op) -> Alu | None:
    """The ALU operator of a token, or None."""
    if isinstance(op, Alu):
        return op
    found = _ALU.get(op)
    return _NUMPY_ALU.get(op) if found is None else found


def as_act(op) -> Act | None:
    """The activation function of a token, or None."""
    if isinstance(op, Act):
        return op
    found = _ACT.get(op)
    return _NUMPY_ACT.get(op) if found is None else found


def op_name(op) -> str:
    return getattr(op, "__name__", repr(op))
