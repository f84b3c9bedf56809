"""How instructions are laid out for the compiled helpers: one int64 row and one float64 row
per instruction.

Row layout (columns)::

    0            helper id
    1            opcode
    2 .. 2+NI    integer attributes (enum values, counts, flags)
    OPS ..       up to MAX_OPERANDS operand records, OPW columns each

Operand record::

    0  space (0 HBM, 1 SBUF, 2 PSUM)     1  dtype code
    2  element offset (constant part)    3 .. 3+NSLOTS  offset coefficient of loop slot k
    then 5 counts, then 5 strides (elements of the operand's dtype), outermost first,
    then the partition count (the count of the operand's first real dim)

The element offset addresses the arena viewed as the operand's storage dtype, so helpers
never deal with bytes. Floating attributes (scales, immediates) go in the float row.
"""

from __future__ import annotations

import numpy as np

from nki.ir.affine import Affine
from nki.ir.nodes import MAX_DIMS

NSLOTS = 8
NI = 16
NF = 16
MAX_OPERANDS = 6
OPW = 4 + NSLOTS + 2 * MAX_DIMS
OPS = 2 + NI
ROW = OPS + MAX_OPERANDS * OPW

SPACE_HBM, SPACE_SBUF, SPACE_PSUM = 0, 1, 2

# Engine state that persists between instructions lives after the 128 PSUM partitions, in
# the PSUM arena (byte offsets): the Scalar engine's 128 fp32 reduce registers (shared by
# activation/activation_reduce) and the Vector engine's 128 fp32 accumulators at its start,
# then one byte per accumulator lane saying whether a run wrote it (scalar lanes, then vector
# lanes), the virtual register file (nki/sim/emit/control.py: 4096 int64 slots) towards its end,
# and last the run's log of accumulator reads before any write (nki/sim/helpers/accumulators.py).
REGS_BYTES = 1024 + 256 + 8 * 4096 + 1024
ACC_WRITTEN_FROM_END = REGS_BYTES - 1024       # PS[-ACC_WRITTEN_FROM_END:][:256]
UNINIT_LOG_FROM_END = 1024                     # PS[-UNINIT_LOG_FROM_END:].view(int64): 128
# float column where the encoders of accumulator instructions put their own row index, so a
# helper can say which instruction read a never-written accumulator (RowWriter.site)
SITE_COL = NF - 1


# offsets inside an operand record
O_SPACE, O_DTYPE, O_OFF, O_COEF = 0, 1, 2, 3
O_COUNT = 3 + NSLOTS
O_STRIDE = O_COUNT + MAX_DIMS
O_PARTS = O_STRIDE + MAX_DIMS     # the partition count (dims are padded, so it is explicit)

# helpers find them from the end of the PSUM arena: fp32 element index of register 0
SCALAR_ACC_FROM_END = REGS_BYTES // 4          # PS.view(f32)[-SCALAR_ACC_FROM_END:][:128]
VECTOR_ACC_FROM_END = (REGS_BYTES - 512) // 4  # PS.view(f32)[-VECTOR_ACC_FROM_END:][:128]


def operand_base(index: int) -> np.int64:
    """First column of operand ``index`` in an instruction row.

    A numpy integer, not a Python int: Numba types a Python int global as a literal and
    would compile every memory function once per operand position (4x the machine code)."""
    return np.int64(OPS + index * OPW)


class PhysOperand:
    """A fully placed operand: space, dtype code, affine element offset, five dims; the id
    and element size of the tensor it views (HBM operands of read-only inputs are moved to
    the caller's own arrays at run time, see ``RowWriter.hbm_slots``)."""

    __slots__ = ("space", "code", "offset", "dims", "partitions", "real_dims", "tensor",
                 "itemsize")

    def __init__(self, space: int, code: int, offset: Affine, dims, tensor: int = -1,
                 itemsize: int = 0):
        self.space, self.code, self.offset = space, code, offset
        self.tensor, self.itemsize = tensor, itemsize
        self.partitions = dims[0][1] if dims else 1
        self.real_dims = tuple(dims)
        # pad after the first dim, so dim 0 is always the partition (or outermost HBM) dim
        pad = MAX_DIMS - len(dims)
        self.dims = tuple(dims[:1]) + ((0, 1),) * pad + tuple(dims[1:])

    def key(self) -> tuple:
        return (self.space, self.code, self.offset, self.dims)


class RowWriter:
    """Fills one instruction's int and float rows; emitters call it in operand order."""

    def __init__(self, helper_id: int, opcode: int, row: int = -1):
        self.irow = np.zeros(ROW, np.int64)
        self.frow = np.zeros(NF, np.float64)
        self.irow[0] = helper_id
        self.irow[1] = opcode
        self.row = row     # this instruction's row in the program's table (-1: unknown)
        self._n_ops = 0
        self.hbm_slots: list[tuple[int, int, int]] = []   # (offset column, tensor, itemsize)

    def ints(self, *values: int) -> RowWriter:
        if len(values) > NI:
            raise ValueError("too many integer attributes")
        self.irow[2:2 + len(values)] = values
        return self

    def floats(self, *values: float) -> RowWriter:
        self.frow[:len(values)] = values
        return self

    def site(self) -> RowWriter:
        """Record the row's own index in the float row (``SITE_COL``), for helpers whose
        run-time findings name the instruction (accumulator reads before any write)."""
        self.frow[SITE_COL] = self.row
        return self

    def operand(self, op: PhysOperand | None) -> RowWriter:
        """Append an operand record (``None`` leaves an empty record, space -1)."""
        b = operand_base(self._n_ops)
        self._n_ops += 1
        if op is None:
            self.irow[b + O_SPACE] = -1
            return self
        self.irow[b + O_SPACE] = op.space
        self.irow[b + O_DTYPE] = op.code
        self.irow[b + O_OFF] = op.offset.const
        if op.space == 0:
            self.hbm_slots.append((int(b + O_OFF), op.tensor, op.itemsize))
        for slot, coef in op.offset.terms:
            if slot >= NSLOTS:
                raise ValueError(f"loop nest deeper than {NSLOTS}")
            self.irow[b + O_COEF + slot] = coef
        for k, (stride, count) in enumerate(op.dims):
            self.irow[b + O_COUNT + k] = count
            self.irow[b + O_STRIDE + k] = stride
        self.irow[b + O_PARTS] = op.partitions
        return self
