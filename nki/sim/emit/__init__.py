"""Emitters: per instruction family, how an IR instruction becomes a helper call.

Each family module (same name as its rule module in ``nki/lang``) defines, beside each other,
the compiled helper, the encoder that writes the helper's row, and a numpy reference of the
family's semantics (the oracle the tests and the fuzzer compare against). They register with
:func:`emitter`; nothing keeps a second list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nki.ir.ops import Opcode


@dataclass(frozen=True)
class Emitter:
    """How to run one opcode.

    Attributes:
        opcode: the family's opcode.
        helper: the compiled helper (registered in ``nki.sim.helpers.registry``).
        encode: ``encode(instr, writer, operands)`` fills the row; ``operands`` maps role →
            :class:`~nki.sim.layout.PhysOperand`.
        reference: numpy oracle, or None for pure data movement checked bit-exactly.
    """

    opcode: Opcode
    helper: Callable
    encode: Callable
    reference: Callable | None = None


EMITTERS: dict[Opcode, Emitter] = {}


def emitter(opcode: Opcode, helper: Callable, reference: Callable | None = None):
    """Register ``encode`` as the emitter of ``opcode`` (decorator)."""

    def deco(encode: Callable) -> Callable:
        if opcode in EMITTERS:
            raise RuntimeError(f"two emitters for {opcode.name}")
        EMITTERS[opcode] = Emitter(opcode, helper, encode, reference)
        return encode

    return deco


def imm(value) -> float:
    """A float immediate for an instruction row; None (absent) is 0.0. (``value or 0.0``
    would turn an explicit -0.0 into +0.0.)"""
    return 0.0 if value is None else float(value)


def load_all() -> None:
    """Import every family module (registration happens on import)."""
    from nki.sim.emit import families  # noqa: F401
