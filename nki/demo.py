"""``python -m nki.demo``: the showcase — library kernels on the simulated NeuronCore, each
checked against an independent float64 reference and timed next to torch's CPU version.

The headline is flash attention (batch × heads, causal, with the log-sum-exp the backward
needs) against ``torch.nn.functional.scaled_dot_product_attention``; then its backward,
matmul, softmax and layernorm. One thread on both sides.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402


def _best(fn: Callable[[], object], repeat: int = 3) -> tuple[object, float]:
    """The result of ``fn`` and its best wall time over ``repeat`` runs after a warm-up."""
    result = fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return result, best


def _torch():
    try:
        import torch
    except ImportError:     # torch is optional for the core
        return None
    torch.set_num_threads(1)
    return torch


def _attention_case(rng, torch):
    """Causal flash attention, 2 heads x 2048 tokens x d 64, vs torch SDPA."""
    from nki.kernels.attention import flash_attention

    q, k, v = (rng.standard_normal((1, 2, 2048, 64)).astype(np.float32) for _ in range(3))

    def reference():
        s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) / 8.0
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        return np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v)

    baseline = None
    if torch is not None:
        tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        baseline = lambda: sdpa(tq, tk, tv, is_causal=True)   # noqa: E731
    return ("flash attention fwd, causal, 2 heads x 2048 x d64",
            lambda: flash_attention(q, k, v, causal=True)[0], reference, baseline)


def _matmul_case(rng, torch):
    from nki.kernels.matmul import matmul

    a, b = (rng.standard_normal((1024, 1024)).astype(np.float32) for _ in range(2))
    baseline = None
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        baseline = lambda: ta @ tb   # noqa: E731
    return ("matmul 1024^3 (fp32 PSUM accumulation)", lambda: matmul(a, b),
            lambda: a.astype(np.float64) @ b, baseline)


def _row_cases(rng, torch):
    from nki.kernels.norms import layernorm, layernorm_reference
    from nki.kernels.softmax import softmax_reference, softmax_rows

    x = rng.standard_normal((4096, 1024)).astype(np.float32)
    g, b = (rng.standard_normal(1024).astype(np.float32) for _ in range(2))
    soft = lay = None
    if torch is not None:
        tx, tg, tb = (torch.from_numpy(a) for a in (x, g, b))
        soft = lambda: torch.softmax(tx, -1)   # noqa: E731
        lay = lambda: torch.nn.functional.layer_norm(tx, (1024,), tg, tb)   # noqa: E731
    return [("row softmax 4096x1024", lambda: softmax_rows(x), lambda: softmax_reference(x),
             soft),
            ("layernorm 4096x1024 (bn_stats/bn_aggr)", lambda: layernorm(x, g, b),
             lambda: layernorm_reference(x, g, b), lay)]


def first_result() -> int:
    """``--first``: one checked result as soon as the core packages are in (no torch, no
    compiled helpers needed: on a cold machine it runs on the compile-free tier while the
    helpers build in the background, ``nki/sim/tier.py``)."""
    from nki.kernels.softmax import softmax_reference, softmax_rows

    x = np.random.default_rng(0).standard_normal((4096, 1024)).astype(np.float32)
    t0 = time.perf_counter()
    out = softmax_rows(x)
    secs = time.perf_counter() - t0
    err = float(np.max(np.abs(out.astype(np.float64) - softmax_reference(x))))
    good = err < 2e-3
    print(f"first result: row softmax 4096x1024 on the simulated NeuronCore, max abs err "
          f"{err:.2e} ({'ok' if good else 'FAIL'}), {secs:.1f} s including its trace",
          flush=True)
    return 0 if good else 1


def main() -> int:
    if "--first" in sys.argv[1:]:
        return first_result()
    torch = _torch()
    rng = np.random.default_rng(0)
    cases = [_attention_case(rng, torch), _matmul_case(rng, torch), *_row_cases(rng, torch)]
    ok = True
    print(f"{'kernel':52s} {'max abs err':>11s} {'check':>5s} {'nki ms':>8s} {'torch ms':>9s}"
          f" {'ratio':>6s}")
    for title, run, reference, baseline in cases:
        out, secs = _best(run)
        err = float(np.max(np.abs(np.asarray(out, np.float64) - reference())))
        good = err < 2e-3
        ok &= good
        t_torch = _best(baseline)[1] if baseline is not None else None
        torch_ms = f"{t_torch * 1e3:9.2f}" if t_torch else f"{'-':>9s}"
        ratio = f"{secs / t_torch:5.2f}x" if t_torch else f"{'-':>6s}"
        print(f"{title:52s} {err:11.2e} {'ok' if good else 'FAIL':>5s} {secs * 1e3:8.2f} "
              f"{torch_ms} {ratio}")
    print("all results match their references" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
