"""Tensor-engine family: ``nc_matmul`` (fp32 PSUM accumulation, bit-exact transpose mode)
and the bit-exact transposes ``nc_transpose`` / ``dma_transpose``.

Matmul products go through BLAS ``sgemm``. Numba's ``np.dot`` calls the sgemm of
``scipy.linalg.cython_blas`` (scipy's bundled OpenBLAS; numpy links a different OpenBLAS
build), so the python backend calls that same library through ``scipy.linalg.blas.sgemm``
with exactly the arguments Numba passes: both backends then get the same bits. Operands are
padded to at least 2 x 2 because Numba's ``np.dot`` switches to gemv/dot for vectors.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.extending import overload, register_jitable
from scipy.linalg.blas import sgemm as _sgemm

from nki.ir.ops import Opcode
from nki.sim.emit import emitter
from nki.sim.helpers.memory import copy_raw, load_bits, load_f32, store_bits, store_f32
from nki.sim.helpers.registry import helper
from nki.sim.layout import PhysOperand, operand_base

OP0, OP1, OP2 = (operand_base(i) for i in range(3))


# ----- BLAS, identical in both backends -----------------------------------------------------
@register_jitable
def _padded(a, b):
    """C-contiguous fp32 copies of ``a`` (m, k) and ``b`` (k, n), zero-padded to m, n >= 2."""
    m, k = a.shape
    n = b.shape[1]
    ap = np.zeros((max(m, 2), k), np.float32)
    ap[:m, :] = a
    bp = np.zeros((k, max(n, 2)), np.float32)
    bp[:, :n] = b
    return ap, bp


def gemm_f32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` of fp32 matrices through scipy's OpenBLAS sgemm (the python backend).

    Numba's ``np.dot(a, b, out)`` on C-contiguous (m, k), (k, n) calls
    ``sgemm('n', 'n', n, m, k, 1, b, n, a, k, 0, out, n)``: the column-major product
    ``out.T = b.T @ a.T``. ``sgemm(1, b.T, a.T)`` on the F-contiguous transposed views issues
    the very same call.

    Example:
        >>> gemm_f32(np.eye(2, dtype=np.float32), np.ones((2, 3), np.float32)).shape
        (2, 3)
    """
    m, n = a.shape[0], b.shape[1]
    ap, bp = _padded(a, b)
    c = _sgemm(np.float32(1.0), bp.T, ap.T)
    return np.ascontiguousarray(c.T[:m, :n])


@overload(gemm_f32, jit_options={"nogil": True})
def _gemm_f32_numba(a, b):
    def impl(a, b):
        m, n = a.shape[0], b.shape[1]
        ap, bp = _padded(a, b)
        out = np.zeros((ap.shape[0], bp.shape[1]), np.float32)
        np.dot(ap, bp, out)
        return np.ascontiguousarray(out[:m, :n])

    return impl


@njit(cache=True, nogil=True)
def _transpose_select(H, S, PS, irow, L, K, M, N):
    """Transpose mode: dst[m, n] = stationary[k, m] (bits) for the first k with
    moving[k, n] != 0, else 0; an identity ``moving`` gives ``stationary.T``."""
    sel = load_f32(H, S, PS, irow, OP2, L).reshape(K, N)
    src = load_bits(H, S, PS, irow, OP1, L, K, M)
    out = np.zeros((M, N), np.int64)
    for n in range(N):
        for k in range(K):
            if sel[k, n] != 0:
                out[:, n] = src[k, :]
                break
    store_bits(H, S, PS, irow, OP0, L, out)


# ----- helpers ------------------------------------------------------------------------------
@helper
@njit(cache=True, nogil=True)
def nc_matmul(H, S, PS, irow, frow, L):
    """dst[M, N] (+)= stationary[K, M].T @ moving[K, N] in fp32 (products exact, fp32
    accumulation), or the bit-exact transpose mode.

    ints: transpose, accumulate, row_split (2 for double_row: [K, 2, F] → [2K, F]), K, M, N."""
    split, K, M, N = irow[4], irow[5], irow[6], irow[7]
    if irow[2] == 1:
        _transpose_select(H, S, PS, irow, L, K, M, N)
        return 0
    st = load_f32(H, S, PS, irow, OP1, L).reshape(K * split, M)
    mv = load_f32(H, S, PS, irow, OP2, L).reshape(K * split, N)
    out = gemm_f32(np.ascontiguousarray(st.T), mv)
    if irow[3] == 1:
        out = load_f32(H, S, PS, irow, OP0, L).reshape(M, N) + out
    store_f32(H, S, PS, irow, OP0, L, out)
    return 0


@helper
@njit(cache=True, nogil=True)
def transpose_copy(H, S, PS, irow, frow, L):
    """dst = src bit-exactly, src read through dims the encoder permuted (the transposes)."""
    copy_raw(H, S, PS, irow, OP0, OP1, L)
    return 0


# ----- references (independent numpy oracles) -----------------------------------------------
def reference_matmul(stationary, moving, psum=None) -> np.ndarray:
    """Oracle: ``stationary.T @ moving`` in float64 of the decoded inputs (+ ``psum``)."""
    s = np.asarray(stationary).astype(np.float64)
    m = np.asarray(moving).astype(np.float64)
    out = s.reshape(s.shape[0], -1).T @ m.reshape(m.shape[0], -1)
    return out if psum is None else out + np.asarray(psum).astype(np.float64)


def reference_transpose(data) -> np.ndarray:
    """Oracle: the 2-D transpose with free dims flattened."""
    data = np.asarray(data)
    return data.reshape(data.shape[0], -1).T.copy()


def reference_dma_transpose(src, axes=None) -> np.ndarray:
    """Oracle: ``np.transpose`` with dma_transpose's default permutations."""
    src = np.asarray(src)
    default = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}[src.ndim]
    return np.transpose(src, axes or default).copy()


# ----- encoders -----------------------------------------------------------------------------
def _permuted(op: PhysOperand, ndim: int, axes) -> PhysOperand:
    """``op`` read in the order of its dims permuted by ``axes`` (placed dims are plain
    element strides, so the partition dim can move like any other)."""
    real = op.real_dims
    assert len(real) == ndim
    return PhysOperand(op.space, op.code, op.offset, tuple(real[a] for a in axes))


@emitter(Opcode.NC_MATMUL, nc_matmul, reference_matmul)
def encode_nc_matmul(ins, w, ops):
    w.ints(int(ins.attr("transpose")), int(ins.attr("accumulate")), int(ins.attr("row_split")),
           int(ins.attr("k")), int(ins.attr("m")), int(ins.attr("n")))
    w.operand(ops["dst"]).operand(ops["stationary"]).operand(ops["moving"])


@emitter(Opcode.NC_TRANSPOSE, transpose_copy, reference_transpose)
def encode_nc_transpose(ins, w, ops):
    ndim = len(ins.operand("data").dims)
    w.operand(ops["dst"]).operand(_permuted(ops["data"], ndim, tuple(range(1, ndim)) + (0,)))


@emitter(Opcode.DMA_TRANSPOSE, transpose_copy, reference_dma_transpose)
def encode_dma_transpose(ins, w, ops):
    ndim = len(ins.operand("src").dims)
    w.operand(ops["dst"]).operand(_permuted(ops["src"], ndim, ins.attr("axes")))
