"""Row and elementwise kernels (issue 13, target 1) against torch fp32 and against their floor.

    python benchmarks/bench_rowfloor.py [--only NAME] [--repeat N] [--profile] [--json PATH]

(default PATH: benchmarks/results/rowfloor-<machine kind>.json, one record per kind)

Four timings per case, 4096x1024 fp32 (bf16 inputs too, against torch fp32 on the same
values), one thread, thread CPU time (the machine is shared: wall time counts the other
jobs' slices too), the four called in turn:

* ``nki``: the library kernel, simulated (compiled helpers, one call per instruction or,
  in row chains, per instruction and partition chunk: nki/sim/rowchain.py);
* ``plain``: the same without row chains (``row_chains=False``: each instruction over all
  its partitions before the next);
* ``torch``: torch's CPU kernel;
* ``floor``: the same instructions with nothing but their memory traffic and their
  results materialised: per 128-row tile, one contiguous numpy/Numba pass per engine
  instruction, each result written to its own tile buffer as the SBUF tiles are, and the
  sums the engines fold in order folded in order (the rounding the simulator must keep).
  No decoding of an instruction table, no arena addressing, no checks. The transcendental
  passes call the simulator's own functions (``nki.sim.transcend``), whose bits are fixed.
  With bf16 inputs the load is one widening pass into the fp32 tile and a bf16 output's
  store one rounding pass (the engines compute in fp32; a bf16 tile is widened by its
  first reader and rounded by its writer).

Where ``floor / torch`` is above 1.5, the 1.5x target is out of reach for a simulator that
materialises every instruction's result (the design): the gap to torch is then the
numerics' and the design's, not the helpers' overhead, which is ``nki / floor``.
``--profile`` adds each fp32 kernel's slowest instructions (``Kernel.profile``) to the record.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from _record import (  # noqa: E402  (benchmarks/_record.py)
    default_json,
    wait_compiled,
    write_record,
)
from numba import njit  # noqa: E402

from nki.sim import transcend as tr  # noqa: E402
from nki.sim.helpers import alu  # noqa: E402
from nki.sim.transcend.elementary import _exp_k  # noqa: E402

N, D, P = 4096, 1024, 128
F32 = np.float32


@njit(nogil=True)
def _exp_bias_rows(t, b, e):
    """``e = exp(t + b)`` per row (the activation's one pass), then its in-order row sums."""
    for r in range(t.shape[0]):
        br = b[r]
        for i in range(t.shape[1]):
            e[r, i] = _exp_k(t[r, i] + br)
    return alu.fold_rows_f32(alu.ADD, e[:, 0], e[:, 1:])


@njit(nogil=True)
def _square_rows(t, sq):
    """``sq = t * t`` and its in-order row sums (rmsnorm's activation_reduce)."""
    for r in range(t.shape[0]):
        for i in range(t.shape[1]):
            sq[r, i] = t[r, i] * t[r, i]
    return alu.fold_rows_f32(alu.ADD, sq[:, 0], sq[:, 1:])


@njit(nogil=True)
def _sub_mul_rows(t, c, u, out):
    """``out = (t - c) * u`` (scalar_tensor_tensor: a column, then a tile), one pass."""
    for r in range(t.shape[0]):
        cr = c[r]
        for i in range(t.shape[1]):
            out[r, i] = (t[r, i] - cr) * u[r, i]


@njit(nogil=True)
def _mul_mul_rows(t, c, u, out):
    """``out = (t * c) * u`` (scalar_tensor_tensor), one pass."""
    for r in range(t.shape[0]):
        cr = c[r]
        for i in range(t.shape[1]):
            out[r, i] = (t[r, i] * cr) * u[r, i]


@njit(nogil=True)
def _mul_add_rows(t, c, u, out):
    """``out = t * c + u`` (scalar_tensor_tensor), one pass."""
    for r in range(t.shape[0]):
        cr = c[r]
        for i in range(t.shape[1]):
            out[r, i] = t[r, i] * cr + u[r, i]


@njit(nogil=True)
def _decode_bf16(src, dst):
    """bf16 bits -> fp32 bits (the widening a bf16 tile's first reader does), one pass."""
    for r in range(src.shape[0]):
        for i in range(src.shape[1]):
            dst[r, i] = np.uint32(src[r, i]) << 16


@njit(nogil=True)
def _encode_bf16(src, dst):
    """fp32 bits -> bf16 bits, round to nearest even, a NaN the quiet NaN of its sign (a
    bf16 destination's rounding, ``nki.sim.numerics.f32_to_bf16``), one pass."""
    for r in range(src.shape[0]):
        for i in range(src.shape[1]):
            u = src[r, i]
            if (u & 0x7FFFFFFF) > 0x7F800000:
                dst[r, i] = np.uint16(((u >> 16) & 0x8000) | 0x7FC0)
            else:
                dst[r, i] = np.uint16((u + 0x7FFF + ((u >> 16) & 1)) >> 16)


def _load(tile: np.ndarray, src: np.ndarray) -> None:
    """The DMA in: a copy, or for bf16 inputs the widening pass into the fp32 tile (the
    floor computes in fp32 as the engines do)."""
    if src.dtype == F32:
        np.copyto(tile, src)
    else:
        _decode_bf16(src.view(np.uint16), tile.view(np.uint32))


def _store(dst: np.ndarray, res: np.ndarray) -> None:
    """The DMA out: a copy, or for a bf16 output the rounding pass."""
    if dst.dtype == F32:
        np.copyto(dst, res)
    else:
        _encode_bf16(res.view(np.uint32), dst.view(np.uint16))


def _tiles(n_rows: int, step: int = P):
    return [(p0, min(n_rows, p0 + step)) for p0 in range(0, n_rows, step)]


_BUFFERS: dict[tuple, list[np.ndarray]] = {}


def _buffers(k: int, shape=(P, D)) -> list[np.ndarray]:
    """``k`` tile buffers, allocated once: fresh 512 KiB arrays per call would move glibc's
    mmap threshold and with it torch's own allocation costs in the next call."""
    key = (k, shape)
    if key not in _BUFFERS:
        _BUFFERS[key] = [np.empty(shape, F32) for _ in range(k)]
    return _BUFFERS[key]


def softmax_floor(x, out, log: bool = False):
    """dma in, row max, exp(x - max) with sums, reciprocal (or log), one scale (or shift)
    pass, dma out."""
    t, e, res = _buffers(3)
    for p0, p1 in _tiles(x.shape[0]):
        _load(t, x[p0:p1])
        neg_max = -t.max(axis=1)
        s = _exp_bias_rows(t, neg_max, e)
        if log:
            np.add(t, (neg_max - np.log(s))[:, None], out=res)
        else:
            np.multiply(e, (F32(1.0) / s)[:, None], out=res)
        _store(out[p0:p1], res)
    return out


@njit(nogil=True)
def _mean_var_rows(t, dev):
    """Per row: the in-order mean, then the squared deviations (one pass into ``dev``) and
    their in-order mean (bn_stats + bn_aggr's results, without the chunked pair sums)."""
    n = t.shape[1]
    mean = alu.fold_rows_f32(alu.ADD, np.zeros(t.shape[0], np.float32), t) / np.float32(n)
    for r in range(t.shape[0]):
        m = mean[r]
        for i in range(n):
            d = t[r, i] - m
            dev[r, i] = d * d
    var = alu.fold_rows_f32(alu.ADD, np.zeros(t.shape[0], np.float32), dev) / np.float32(n)
    return mean, var


def layernorm_floor(x, out, g, b, eps=1e-5):
    """dma in, per-row mean and variance, 1/sqrt(var + eps), (x - mean) * gamma, that *
    rstd + beta, dma out."""
    t, dev, nrm, res, gt, bt = _buffers(6)
    gt[:], bt[:] = g, b
    for p0, p1 in _tiles(x.shape[0]):
        _load(t, x[p0:p1])
        mean, var = _mean_var_rows(t, dev)
        rstd = F32(1.0) / np.sqrt(var + F32(eps))
        _sub_mul_rows(t, mean, gt, nrm)
        _mul_add_rows(nrm, rstd, bt, res)
        _store(out[p0:p1], res)
    return out


def rmsnorm_floor(x, out, g, eps=1e-6):
    """dma in, x*x with sums, rstd, (x * rstd) * gamma in one pass, dma out."""
    t, sq, res, gt = _buffers(4)
    gt[:] = g
    for p0, p1 in _tiles(x.shape[0]):
        _load(t, x[p0:p1])
        ss = _square_rows(t, sq)
        rstd = F32(1.0) / np.sqrt(ss * F32(1.0 / D) + F32(eps))
        _mul_mul_rows(t, rstd, gt, res)
        _store(out[p0:p1], res)
    return out


def elementwise_floor(x, out, fn):
    """The library's elementwise layout ([128, 8192] tiles): dma in, the function, dma out."""
    flat_x, flat_o = x.reshape(-1, 8192), out.reshape(-1, 8192)
    t, r = _buffers(2, (P, 8192))
    for p0, p1 in _tiles(flat_x.shape[0]):
        _load(t, flat_x[p0:p1])
        fn(t.reshape(-1), r.reshape(-1))
        _store(flat_o[p0:p1], r)
    return out


def silu_mul_floor(a, b, out):
    """The library's elementwise layout ([128, 8192] tiles): dma in both, silu into fp32,
    the product, dma out."""
    flat_a, flat_b, flat_o = (t.reshape(-1, 8192) for t in (a, b, out))
    t, r, u, prod = _buffers(4, (P, 8192))
    for p0, p1 in _tiles(flat_a.shape[0]):
        _load(t, flat_a[p0:p1])
        tr.silu(t.reshape(-1), r.reshape(-1))
        _load(u, flat_b[p0:p1])
        np.multiply(r, u, out=prod)
        _store(flat_o[p0:p1], prod)
    return out


def cross_entropy_floor(x, tgt, loss):
    """dma in, row max, exp(x - max) with sums, log, and the [P, 1] work (the target logit
    is one gathered element per row: no pass over the tile)."""
    (t, e), rows = _buffers(2), np.arange(P)
    for p0, p1 in _tiles(x.shape[0]):
        _load(t, x[p0:p1])
        neg_max = -t.max(axis=1)
        s = _exp_bias_rows(t, neg_max, e)
        loss[p0:p1] = (np.log(s) - neg_max) - t[rows, tgt[p0:p1]]
    return loss.mean()


@njit(nogil=True)
def _row_sums(t):
    """Per row, the in-order sum (a tensor_reduce)."""
    return alu.fold_rows_f32(alu.ADD, np.zeros(t.shape[0], np.float32), t)


def layernorm_bwd_floor(dy, x, g, out, eps=1e-5):
    """layernorm_bwd's instructions per tile, each a pass with its result materialised:
    two loads, mean and variance, x̂, dy·x̂, the [dy·x̂ | dy] column sums (a ones-vector
    matmul into PSUM), dy·gamma and its row sum, (dy·gamma)·x̂ and its row sum, two
    combining passes, the store."""
    xt, xhat, g_t, prod, tmp, res, dev, gb = _buffers(8)
    cat = _buffers(1, (P, 2 * D))[0]
    gb[:] = g
    ones, acc = np.ones((1, P), F32), np.zeros((1, 2 * D), F32)
    for p0, p1 in _tiles(x.shape[0]):
        _load(xt, x[p0:p1])
        _load(cat[:, D:], dy[p0:p1])
        mean, var = _mean_var_rows(xt, dev)
        rstd = F32(1.0) / np.sqrt(var + F32(eps))
        _sub_mul_scalars(xt, mean, rstd, xhat)
        np.multiply(cat[:, D:], xhat, out=cat[:, :D])
        acc += ones @ cat
        np.multiply(cat[:, D:], gb, out=g_t)
        m0 = _row_sums(g_t) * F32(1.0 / D)
        np.multiply(g_t, xhat, out=prod)
        m1 = _row_sums(prod) * F32(1.0 / D)
        _mul_sub_rows(xhat, m1, g_t, tmp)
        _sub_mul_scalars(tmp, m0, rstd, res)
        _store(out[p0:p1], res)
    return out, acc


@njit(nogil=True)
def _sub_mul_scalars(t, c, d, out):
    """``out = (t - c) * d`` with two per-row scalars (tensor_scalar), one pass."""
    for r in range(t.shape[0]):
        cr, dr = c[r], d[r]
        for i in range(t.shape[1]):
            out[r, i] = (t[r, i] - cr) * dr


@njit(nogil=True)
def _mul_sub_rows(t, c, u, out):
    """``out = u - t * c`` (scalar_tensor_tensor, reversed subtract), one pass."""
    for r in range(t.shape[0]):
        cr = c[r]
        for i in range(t.shape[1]):
            out[r, i] = u[r, i] - t[r, i] * cr


def without_chains(call: partial) -> partial:
    """The same kernel call with row chains off."""
    import nki

    kernel = call.func
    return partial(nki.jit(kernel.fn, **{**kernel.options, "row_chains": False}), *call.args)


def cases(only: str):
    """(name, nki call as a ``partial`` of the kernel, torch callable, floor callable or
    None)."""
    import torch
    import torch.nn.functional as tf
    from nki.kernels.mlp import gelu, silu, silu_mul
    from nki.kernels.norms import layernorm, rmsnorm
    from nki.kernels.softmax import log_softmax, softmax_rows

    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, D)).astype(F32)
    e = (rng.standard_normal((N, D)) * 3).astype(F32)
    u = rng.standard_normal((N, D)).astype(F32)
    g, b = rng.standard_normal(D).astype(F32), rng.standard_normal(D).astype(F32)
    tg, tb = torch.from_numpy(g), torch.from_numpy(b)
    out = np.empty((N, D), F32)
    for dt in ("fp32", "bf16"):
        xs, es, us = (x, e, u) if dt == "fp32" else (a.astype(ml_dtypes.bfloat16)
                                                     for a in (x, e, u))
        tx, te, tu = (torch.from_numpy(np.asarray(a, F32)) for a in (xs, es, us))
        o = out if dt == "fp32" else out.astype(ml_dtypes.bfloat16)   # the kernels' dtype
        rows = [
            ("softmax", partial(softmax_rows, xs), lambda: torch.softmax(tx, -1),
             lambda: softmax_floor(xs, o)),
            ("log_softmax", partial(log_softmax, xs), lambda: torch.log_softmax(tx, -1),
             lambda: softmax_floor(xs, o, log=True)),
            ("layernorm", partial(layernorm, xs, g, b),
             lambda: tf.layer_norm(tx, (D,), tg, tb, 1e-5), lambda: layernorm_floor(xs, o, g, b)),
            ("rmsnorm", partial(rmsnorm, xs, g), lambda: tf.rms_norm(tx, (D,), tg, 1e-6),
             lambda: rmsnorm_floor(xs, o, g)),
            ("gelu", partial(gelu, es), lambda: tf.gelu(te),
             lambda: elementwise_floor(es, o, tr.gelu)),
            ("silu", partial(silu, es), lambda: tf.silu(te),
             lambda: elementwise_floor(es, o, tr.silu)),
            ("silu_mul", partial(silu_mul, es, us), lambda: tf.silu(te) * tu,
             lambda: silu_mul_floor(es, us, o)),
        ]
        for name, nki_fn, torch_fn, floor_fn in rows:
            label = f"{name} {N}x{D} {dt}"
            if only in label:
                yield label, nki_fn, torch_fn, floor_fn
    yield from _backward_cases(only, x, g, b)


def _backward_cases(only: str, x, g, b):
    """The backward kernels and cross-entropy, against torch (rmsnorm_bwd, already below
    torch, has no floor)."""
    import torch
    import torch.nn.functional as tf
    from bench_kernels import _backward_only  # noqa: E402  (benchmarks/bench_kernels.py)
    from nki.kernels.losses import cross_entropy
    from nki.kernels.norms import layernorm_bwd, rmsnorm_bwd

    rng = np.random.default_rng(1)
    dy = rng.standard_normal((N, D)).astype(F32)
    tgt = rng.integers(0, D, N).astype(np.int32)
    tx, tdy, tg, tb = (torch.from_numpy(t) for t in (x, dy, g, b))
    ttgt = torch.from_numpy(tgt.astype(np.int64))
    out, loss = np.empty((N, D), F32), np.empty(N, F32)
    rows = [
        ("layernorm_bwd", partial(layernorm_bwd, dy, x, g),
         _backward_only(lambda x, g, b: tf.layer_norm(x, (D,), g, b, 1e-5), (tx, tg, tb), tdy),
         lambda: layernorm_bwd_floor(dy, x, g, out)),
        ("rmsnorm_bwd", partial(rmsnorm_bwd, dy, x, g),
         _backward_only(lambda x, g: tf.rms_norm(x, (D,), g, 1e-6), (tx, tg), tdy), None),
        ("cross_entropy", partial(cross_entropy, x, tgt),
         lambda: tf.cross_entropy(tx, ttgt, reduction="none").mean(),
         lambda: cross_entropy_floor(x, tgt, loss)),
    ]
    for name, nki_fn, torch_fn, floor_fn in rows:
        label = f"{name} {N}x{D} fp32"
        if only in label:
            yield label, nki_fn, torch_fn, floor_fn


def _best_of(fns: list, repeat: int) -> list[float]:
    """Best thread CPU time of each of ``fns`` (None: inf), called in turn ``repeat`` times,
    after one untimed call each. Each round starts one function later: whichever runs first
    after the previous round was measured 5% slower (two runs of one program, in turn)."""
    wait_compiled()
    for fn in fns:
        if fn is not None:
            fn()
    best = [float("inf")] * len(fns)
    for r in range(repeat):
        for j in range(len(fns)):
            k = (j + r) % len(fns)
            fn = fns[k]
            if fn is not None:
                t0 = time.thread_time()
                fn()
                best[k] = min(best[k], time.thread_time() - t0)
    return best


def profile_top(call: partial, repeat: int, top: int = 8) -> list[dict]:
    """The ``top`` instructions by host time (``Kernel.profile``; per instruction the best
    of ``repeat`` runs): where a kernel's time goes."""
    profiles = [call.func.profile(*call.args)[0] for _ in range(repeat)]
    seconds = np.min([p.seconds for p in profiles], axis=0)
    calls, origins = profiles[0].calls, profiles[0].origins
    return [{"instruction": origins[k], "calls": int(calls[k]), "ms": seconds[k] * 1e3,
             "us_per_call": seconds[k] / calls[k] * 1e6}
            for k in np.argsort(-seconds)[:top] if calls[k]]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="run only cases whose name contains this")
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--profile", action="store_true",
                    help="also record each fp32 kernel's slowest instructions")
    ap.add_argument("--json", default=None, help="default: results/rowfloor-<kind>.json")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    rows = []
    print(f"{'case':28s} {'nki ms':>8s} {'plain ms':>8s} {'torch ms':>9s} {'floor ms':>9s} "
          f"{'nki/torch':>9s} {'floor/torch':>11s} {'nki/floor':>9s}")
    for name, nki_fn, torch_fn, floor_fn in cases(args.only):
        t_nki, t_plain, t_torch, t_floor = _best_of(
            [nki_fn, without_chains(nki_fn), torch_fn, floor_fn], args.repeat)
        row = {"case": name, "nki_ms": t_nki * 1e3, "plain_ms": t_plain * 1e3,
               "torch_ms": t_torch * 1e3, "ratio": t_nki / t_torch}
        cols = [f"{'-':>9s}", f"{'-':>11s}", f"{'-':>9s}"]
        if floor_fn is not None:
            row.update(floor_ms=t_floor * 1e3, floor_ratio=t_floor / t_torch,
                       nki_over_floor=t_nki / t_floor)
            cols = [f"{t_floor * 1e3:9.2f}", f"{t_floor / t_torch:11.2f}",
                    f"{t_nki / t_floor:9.2f}"]
        if args.profile and "fp32" in name:
            row["profile"] = profile_top(nki_fn, args.repeat)
        rows.append(row)
        print(f"{name:28s} {t_nki * 1e3:8.2f} {t_plain * 1e3:8.2f} {t_torch * 1e3:9.2f} "
              f"{cols[0]} {t_nki / t_torch:9.2f} {cols[1]} {cols[2]}", flush=True)
    path = args.json or default_json("rowfloor")
    write_record(path, torch=torch.__version__, threads=1, clock="thread_time",
                 repeat=args.repeat, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
