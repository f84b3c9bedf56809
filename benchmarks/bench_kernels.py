"""Kernel-library benchmark: every library kernel of issue 4 against its torch CPU counterpart,
one thread each, in one process.

    python benchmarks/bench_kernels.py [--quick] [--only NAME] [--json PATH]

(default PATH: benchmarks/results/kernels-<machine kind>.json)

Prints a table of time ratios (simulated kernel / torch) and writes a JSON record. The nki
side is the simulated NKI kernel on the CPU (Numba-compiled, one helper call per
instruction); the torch side is torch's own CPU kernel for the same computation (for
backward kernels: ``backward`` alone on a retained graph). Each kernel is warmed up first, so
compile time is excluded; times are the best of a few runs.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from _record import best_of, default_json, write_record  # noqa: E402  (benchmarks/_record.py)


def _backward_only(forward, inputs, grad):
    """A callable timing torch's backward alone: the graph is built once and retained."""
    import torch

    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = forward(*leaves)

    def run():
        for t in leaves:
            t.grad = None
        torch.autograd.backward(out, grad, retain_graph=True)
    return run


class _Inputs:
    """Seeded random inputs and their torch twins (fp32 for torch unless said)."""

    def __init__(self):
        import torch

        self.torch = torch
        self.rng = np.random.default_rng(0)

    def rnd(self, *shape, dtype=np.float32, scale=1.0):
        return (self.rng.standard_normal(shape) * scale).astype(dtype)

    def tt(self, a):
        a = np.asarray(a)
        return self.torch.from_numpy(a if a.dtype == np.float32 else a.astype(np.float32))


def _matmul_cases(inp, quick):
    import torch
    from nki.kernels.matmul import batched_matmul, matmul

    rnd, tt = inp.rnd, inp.tt
    n = 1024 if quick else 2048
    a, b = rnd(n, n), rnd(n, n)
    ta, tb = tt(a), tt(b)
    yield f"matmul {n}^3 fp32", lambda: matmul(a, b), lambda: ta @ tb, 2 * n ** 3
    m = 1024
    a16, b16 = rnd(m, m, dtype=ml_dtypes.bfloat16), rnd(m, m, dtype=ml_dtypes.bfloat16)
    ta16, tb16 = tt(a16).bfloat16(), tt(b16).bfloat16()
    yield f"matmul {m}^3 bf16", lambda: matmul(a16, b16), lambda: ta16 @ tb16, 2 * m ** 3
    a8, b8 = (rnd(m, m, dtype=ml_dtypes.float8_e4m3fn), rnd(m, m, dtype=ml_dtypes.float8_e4m3fn))
    ta8, tb8 = tt(a8), tt(b8)   # torch: fp32 matmul of the decoded fp8 values
    yield f"matmul {m}^3 fp8->fp32 (torch fp32)", lambda: matmul(a8, b8), lambda: ta8 @ tb8, \
        2 * m ** 3
    B, s = 8, 512
    ba, bb = rnd(B, s, s), rnd(B, s, s)
    tba, tbb = tt(ba), tt(bb)
    yield f"batched_matmul {B}x{s}^3 fp32", lambda: batched_matmul(ba, bb), \
        lambda: torch.bmm(tba, tbb), 2 * B * s ** 3



def _linear_mlp_cases(inp, quick):
    import torch.nn.functional as F
    from nki.kernels.linear import linear
    from nki.kernels.mlp import gelu, silu, swiglu_mlp

    rnd, tt = inp.rnd, inp.tt
    N, K, Dout = (1024, 1024, 2048) if quick else (2048, 1024, 4096)
    x, w, bias = rnd(N, K), rnd(Dout, K, scale=K ** -0.5), rnd(Dout)
    tx, tw, tbias = tt(x), tt(w), tt(bias)
    yield f"linear+bias+gelu {N}x{K}->{Dout} fp32", lambda: linear(x, w, bias, "gelu"), \
        lambda: F.gelu(F.linear(tx, tw, tbias)), 2 * N * K * Dout
    yield f"linear+bias+silu {N}x{K}->{Dout} fp32", lambda: linear(x, w, bias, "silu"), \
        lambda: F.silu(F.linear(tx, tw, tbias)), 2 * N * K * Dout
    N, D, Fh = (512, 1024, 2816)
    x, wg, wu, wd = (rnd(N, D), rnd(D, Fh, scale=D ** -0.5), rnd(D, Fh, scale=D ** -0.5),
                     rnd(Fh, D, scale=Fh ** -0.5))
    tx, twg, twu, twd = (tt(t) for t in (x, wg, wu, wd))
    yield f"swiglu_mlp {N}x{D}x{Fh} fp32", lambda: swiglu_mlp(x, wg, wu, wd), \
        lambda: (F.silu(tx @ twg) * (tx @ twu)) @ twd, 6 * N * D * Fh
    e = rnd(4096, 1024, scale=3.0)
    te = tt(e)
    yield "gelu 4096x1024 fp32", lambda: gelu(e), lambda: F.gelu(te), None
    yield "silu 4096x1024 fp32", lambda: silu(e), lambda: F.silu(te), None



def _row_cases(inp, quick):
    import torch
    import torch.nn.functional as F
    from nki.kernels.norms import layernorm_bwd, rmsnorm_bwd, rmsnorm_residual
    from nki.kernels.softmax import log_softmax

    rnd, tt = inp.rnd, inp.tt
    x = rnd(4096, 1024, scale=4.0)
    tx = tt(x)
    yield "log_softmax 4096x1024 fp32", lambda: log_softmax(x), \
        lambda: torch.log_softmax(tx, -1), None
    x, r, dy, g, bb_ = rnd(4096, 1024), rnd(4096, 1024), rnd(4096, 1024), rnd(1024), rnd(1024)
    tx, tr, tdy, tg, tbb = (tt(t) for t in (x, r, dy, g, bb_))
    yield "rmsnorm_residual 4096x1024 fp32", lambda: rmsnorm_residual(x, r, g), \
        lambda: (F.rms_norm(tx + tr, (1024,), tg, 1e-6), tx + tr), None
    yield "layernorm_bwd 4096x1024 fp32", lambda: layernorm_bwd(dy, x, g), \
        _backward_only(lambda x, g, b: F.layer_norm(x, (1024,), g, b, 1e-5), (tx, tg, tbb),
                       tdy), None
    yield "rmsnorm_bwd 4096x1024 fp32", lambda: rmsnorm_bwd(dy, x, g), \
        _backward_only(lambda x, g: F.rms_norm(x, (1024,), g, 1e-6), (tx, tg), tdy), None



def _rope_loss_transpose_cases(inp, quick):
    import torch
    import torch.nn.functional as F
    from nki.kernels.losses import cross_entropy, cross_entropy_bwd
    from nki.kernels.rope import rope, rope_tables
    from nki.kernels.transpose import transpose2d

    rnd, tt, rng = inp.rnd, inp.tt, inp.rng
    # ----- rope
    H, S, Dh = 32, 2048, 128
    q = rnd(H, S, Dh)
    cos, sin = rope_tables(S, Dh)
    tq, tcos, tsin = tt(q), tt(cos), tt(sin)

    def rope_torch():
        return tq * tcos + torch.cat((-tq[..., Dh // 2:], tq[..., :Dh // 2]), -1) * tsin
    yield f"rope {H}x{S}x{Dh} fp32", lambda: rope(q, cos, sin), rope_torch, None

    # ----- losses
    N, C = 4096, 8192
    lg = rnd(N, C, scale=3.0)
    tg_ = rng.integers(0, C, N).astype(np.int32)
    tlg, ttg = tt(lg), torch.from_numpy(tg_.astype(np.int64))
    yield f"cross_entropy {N}x{C} fp32", lambda: cross_entropy(lg, tg_), \
        lambda: F.cross_entropy(tlg, ttg, reduction="none").mean(), None
    yield f"cross_entropy_bwd {N}x{C} fp32", lambda: cross_entropy_bwd(lg, tg_), \
        _backward_only(lambda x: F.cross_entropy(x, ttg), (tlg,), None), None

    # ----- transpose
    x = rnd(4096, 4096)
    tx = tt(x)
    yield "transpose2d 4096x4096 fp32", lambda: transpose2d(x), lambda: tx.t().contiguous(), \
        None



def cases(quick: bool):
    """(name, nki callable, torch callable, flops or None), family by family."""
    inp = _Inputs()
    for family in (_matmul_cases, _linear_mlp_cases, _row_cases, _rope_loss_transpose_cases):
        yield from family(inp, quick)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller matmul and linear")
    ap.add_argument("--only", default="", help="run only cases whose name contains this")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=default_json("kernels"))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    rows = []
    print(f"{'case':44s} {'nki ms':>10s} {'torch ms':>10s} {'ratio':>7s}")
    for name, nki_fn, torch_fn, flops in cases(args.quick):
        if args.only and args.only not in name:
            continue
        t_nki = best_of(nki_fn, args.repeat)
        t_torch = best_of(torch_fn, max(3, args.repeat))
        row = {"case": name, "nki_ms": t_nki * 1e3, "torch_ms": t_torch * 1e3,
               "ratio": t_nki / t_torch}
        if flops:
            row["nki_gflops"] = flops / t_nki / 1e9
            row["torch_gflops"] = flops / t_torch / 1e9
        rows.append(row)
        print(f"{name:44s} {t_nki * 1e3:10.2f} {t_torch * 1e3:10.2f} {t_nki / t_torch:7.2f}",
              flush=True)
    write_record(args.json, torch=torch.__version__, threads=1, quick=args.quick, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
