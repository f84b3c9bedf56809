# ruff: noqa: N999  (numbered tutorial; run as a script or with python -m tutorials.NN_name)
"""Tutorial 07 — porting a CUDA kernel: a block-per-row layernorm with shared-memory reductions.

The CUDA kernel below gives each row to a thread block. Its threads each sum a strided slice
of the row, combine their partial sums by a tree reduction in shared memory (with a
``__syncthreads()`` between levels), and do it twice (mean, then variance) before
normalising. On a NeuronCore the same algorithm loses most of its machinery:

===============================================  ============================================
CUDA                                             NKI
===============================================  ============================================
one thread block per row (``blockIdx.x``)        one row per partition; a tile holds 128 rows
                                                 and every instruction processes all of them
threads striding over the row, then a            one ``tensor_reduce(axis=1)``: the engine
shared-memory tree (or ``__shfl_down_sync``      streams the free axis and reduces it itself
warp) reduction
``__shared__`` scratch memory                    SBUF tiles (explicit, addressed, 24+ MiB)
global memory loads (coalesced)                  ``dma_copy`` of whole tiles from HBM
a per-thread scalar (``mean``, ``rstd``)         a [P, 1] column, passed as ``operand0=``
``__syncthreads()``                              nothing: instructions are ordered by the
                                                 tiles they read and write (the compiler puts
                                                 semaphores between engines)
``gamma[c]`` read by every block                 broadcast once into all partitions by a DMA
                                                 with a stride-0 partition dimension
===============================================  ============================================

Run: ``python tutorials/07_port_cuda.py``
"""

from __future__ import annotations

import sys

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki.testing import assert_close, randn

CUDA_SOURCE = r"""
// launch: layernorm_rows<<<n_rows, 256, 256 * sizeof(float)>>>(x, gamma, beta, y, n, eps)
__device__ float block_sum(float v, float* partial) {
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int width = blockDim.x / 2; width > 0; width >>= 1) {    // tree reduction
        if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
        __syncthreads();
    }
    float total = partial[0];
    __syncthreads();                       // partial[] is reused by the next reduction
    return total;
}

__global__ void layernorm_rows(const float* x, const float* gamma, const float* beta,
                               float* y, int n, float eps) {
    extern __shared__ float partial[];
    const float* row = x + (size_t)blockIdx.x * n;
    float* out = y + (size_t)blockIdx.x * n;
    float s = 0.f;
    for (int c = threadIdx.x; c < n; c += blockDim.x) s += row[c];
    float mean = block_sum(s, partial) / n;
    float q = 0.f;
    for (int c = threadIdx.x; c < n; c += blockDim.x) { float d = row[c] - mean; q += d * d; }
    float rstd = rsqrtf(block_sum(q, partial) / n + eps);
    for (int c = threadIdx.x; c < n; c += blockDim.x)
        out[c] = (row[c] - mean) * rstd * gamma[c] + beta[c];
}
"""


def broadcast_rows(w, rows: int):
    """``w`` [D] in HBM -> an fp32 SBUF tile [rows, D] with ``w`` in every partition."""
    t = nl.ndarray((rows, w.shape[0]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=w.reshape((1, w.shape[0])).broadcast(0, rows))
    return t


@nki.jit
def layernorm_port(x, gamma, beta, eps=1e-5):
    """The port: same two-pass algorithm, one instruction per CUDA phase."""
    N, D = x.shape
    y = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    g, b = broadcast_rows(gamma, min(N, 128)), broadcast_rows(beta, min(N, 128))
    for i in nl.affine_range((N + 127) // 128):          # 128 "blocks" per iteration
        p0, p1 = i * 128, min(N, i * 128 + 128)
        P = p1 - p0
        t = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[p0:p1, :])             # row = x + blockIdx.x * n
        total = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=total, op=nl.add, data=t, axis=1)     # block_sum(s)
        neg_mean = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=neg_mean, data=total, op0=nl.multiply, operand0=-1.0 / D)
        xc = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=xc, data=t, op0=nl.add, operand0=neg_mean)   # row[c] - mean
        sq = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        ssq = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(dst=sq, op=nl.square, data=xc, reduce_op=nl.add,
                               reduce_res=ssq)                        # block_sum(d * d)
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd, data=ssq, op0=nl.multiply, operand0=1.0 / D,
                           op1=nl.add, operand1=float(eps))
        nisa.activation(dst=rstd, op=nl.rsqrt, data=rstd)             # rsqrtf(...)
        nisa.tensor_scalar(dst=xc, data=xc, op0=nl.multiply, operand0=rstd)
        nisa.tensor_tensor(dst=xc, data1=xc, data2=g[0:P, :], op=nl.multiply)   # * gamma
        res = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=res, data1=xc, data2=b[0:P, :], op=nl.add)       # + beta
        nisa.dma_copy(dst=y[p0:p1, :], src=res)          # out[c] = ...
    return y


def layernorm_reference(x, g, b, eps=1e-5):
    x = x.astype(np.float64)
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * g + b


def torch_layernorm(x, g, b):
    """torch's layer_norm in float64, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    t = [torch.from_numpy(np.asarray(a, np.float64)) for a in (x, g, b)]
    return torch.nn.functional.layer_norm(t[0], t[0].shape[-1:], t[1], t[2], 1e-5).numpy()


def main() -> int:
    """Run the port on ragged sizes, fp32 and bf16; check against numpy and torch."""
    print("the CUDA original:" + CUDA_SOURCE)
    for N, D, dtype in [(300, 1000, "float32"), (128, 4096, "float32"), (77, 640, "bf16")]:
        x = randn((N, D), dtype, seed=D, mean=2.0, std=3.0)
        g, b = randn(D, seed=1), randn(D, seed=2)
        y = layernorm_port(x, g, b)
        c = assert_close(y, layernorm_reference(x, g, b))
        ref_torch = torch_layernorm(x, g, b)
        if ref_torch is not None:
            assert_close(y, ref_torch)
        print(f"[{N}, {D}] {c.dtype}: max abs error {c.max_abs[0]:.2e} vs numpy"
              + (", matches torch's layer_norm too" if ref_torch is not None else ""))
    n_instr = layernorm_port.specialize(*(randn(s, seed=0) for s in ((128, 1000), 1000, 1000)))
    print(f"one 128-row tile: {n_instr.num_instructions} instructions, no barriers")
    print("tutorial 07 OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
