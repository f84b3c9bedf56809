"""DMA family: ``dma_copy`` (HBM/SBUF ↔ HBM/SBUF, casting through fp32 when dtypes differ)."""

from __future__ import annotations

import numpy as np
from numba import njit

from nki.ir.ops import Opcode
from nki.sim.emit import emitter
from nki.sim.helpers.memory import copy_raw, load_f32, store_f32
from nki.sim.helpers.registry import helper
from nki.sim.layout import operand_base

DST, SRC = operand_base(0), operand_base(1)


@helper(row_wise=True)
@njit(cache=True, nogil=True)
def dma_copy(H, S, PS, irow, frow, L):
    """Copy src to dst: bit-exact when the dtypes match, else decode → fp32 → encode."""
    if irow[2] == 1:
        copy_raw(H, S, PS, irow, DST, SRC, L)
    else:
        store_f32(H, S, PS, irow, DST, L, load_f32(H, S, PS, irow, SRC, L))
    return 0


def reference_dma_copy(src: np.ndarray, dst_dtype) -> np.ndarray:
    """Oracle: the source values converted to the destination dtype."""
    return np.asarray(src).astype(np.float32).astype(dst_dtype)


@emitter(Opcode.DMA_COPY, dma_copy, reference_dma_copy)
def encode_dma_copy(ins, w, ops):
    same = ops["dst"].code == ops["src"].code
    w.ints(int(same)).operand(ops["dst"]).operand(ops["src"])
