"""Registers: ``register_move`` / ``register_load`` / ``register_store``, and the register
file the generated code's runtime loops read.

The register file is ``NUM_REGS`` int64 slots (each holding a 32-bit register value) in the
PSUM arena's engine-state tail, ``REG_FILE_FROM_END`` bytes before its end (clear of the
Scalar/Vector accumulators at the start of that area). The tail is zeroed at the start of
every run, so registers start at 0. Generated code binds the same bytes as ``R``
(:func:`register_file_source`) and loops over them directly.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from nki.ir.ops import Opcode
from nki.sim.emit import emitter
from nki.sim.helpers.memory import load_i64, store_i64
from nki.sim.helpers.registry import helper
from nki.sim.layout import REGS_BYTES, operand_base

# NKI's registers are virtual (the compiler maps them onto each engine's 64 physical ones,
# nki.isa.register_alloc's docs): kernels allocate many, one per runtime loop at least, and
# nki-library's context-parallel attention more than 128
NUM_REGS = 4096
REG_FILE_FROM_END = 1024 + 8 * NUM_REGS
OP0 = operand_base(0)
MOVE_IMM, MOVE_REG, LOAD, STORE = 0, 1, 2, 3

assert REG_FILE_FROM_END - 8 * NUM_REGS >= 4 and REG_FILE_FROM_END <= REGS_BYTES - 1024


def register_file_source(ps: str = "PS", like: str = "L") -> str:
    """The expression binding the register file in generated code (int64 like ``L``)."""
    return (f"{ps}[{ps}.size - {REG_FILE_FROM_END}:{ps}.size - "
            f"{REG_FILE_FROM_END - 8 * NUM_REGS}].view({like}.dtype)")


@njit(cache=True, nogil=True)
def registers(PS):
    """The register file: NUM_REGS int64 slots in the PSUM arena's tail."""
    start = PS.size - REG_FILE_FROM_END
    return PS[start:start + 8 * NUM_REGS].view(np.int64)


@helper
@njit(cache=True, nogil=True)
def register_op(H, S, PS, irow, frow, L):
    """ints: mode (move imm / move reg / load / store), register, source register, imm.
    operand 0: the one-element tensor of a load or store."""
    R = registers(PS)
    mode, r = irow[2], irow[3]
    if mode == MOVE_IMM:
        R[r] = irow[5]
    elif mode == MOVE_REG:
        R[r] = R[irow[4]]
    elif mode == LOAD:
        R[r] = load_i64(H, S, PS, irow, OP0, L)[0, 0]
    else:
        store_i64(H, S, PS, irow, OP0, L, np.full((1, 1), R[r], np.int64))
    return 0


def reference_register_store(value: int, dtype) -> np.ndarray:
    """Oracle: a register stored to a one-element tensor wraps to its integer width."""
    return np.array([[value]], np.int64).astype(dtype)


@emitter(Opcode.REGISTER_MOVE, register_op)
def encode_register_move(ins, w, ops):
    src = ins.attr("src_reg", -1)
    w.ints(MOVE_REG if src >= 0 else MOVE_IMM, ins.attr("reg"), max(src, 0), ins.attr("imm"))


@emitter(Opcode.REGISTER_LOAD, register_op)
def encode_register_load(ins, w, ops):
    w.ints(LOAD, ins.attr("reg"), 0, 0).operand(ops["src"])


@emitter(Opcode.REGISTER_STORE, register_op, reference_register_store)
def encode_register_store(ins, w, ops):
    w.ints(STORE, ins.attr("reg"), 0, 0).operand(ops["dst"])
