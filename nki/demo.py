"""``python -m nki.demo``: run the library's showcase kernels on the simulated NeuronCore and
check each against a float64 numpy reference (and time torch's CPU version when installed)."""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402


def _timed(fn, repeat: int = 3) -> tuple[object, float]:
    result = fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return result, best


def _torch_time(name: str, args) -> float | None:
    try:
        from nki.torch.baselines import best_time, counterpart
    except ImportError:   # torch is optional
        return None
    return best_time(counterpart(name, list(args)))


def main() -> int:
    from nki.kernels.attention import attention_reference, flash_attention_fwd
    from nki.kernels.matmul import matmul_lhsT, matmul_reference
    from nki.kernels.norms import layernorm, layernorm_reference
    from nki.kernels.softmax import softmax_reference, softmax_rows

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1024, 64)).astype(np.float32) for _ in range(3))
    x = rng.standard_normal((1000, 1024)).astype(np.float32)
    g, b = (rng.standard_normal(1024).astype(np.float32) for _ in range(2))
    lhsT, rhs = (rng.standard_normal((512, 512)).astype(np.float32) for _ in range(2))
    cases = [
        ("attention", "causal flash attention 1024x64", lambda: flash_attention_fwd(q, k, v),
         lambda: attention_reference(q, k, v), (q, k, v)),
        ("softmax", "row softmax 1000x1024", lambda: softmax_rows(x),
         lambda: softmax_reference(x), (x,)),
        ("layernorm", "layernorm 1000x1024", lambda: layernorm(x, g, b),
         lambda: layernorm_reference(x, g, b), (x, g, b)),
        ("matmul", "matmul 512^3", lambda: matmul_lhsT(lhsT, rhs),
         lambda: matmul_reference(lhsT, rhs), (lhsT, rhs)),
    ]
    ok = True
    print(f"{'kernel':34s} {'max abs err':>12s} {'check':>6s} {'nki ms':>8s} {'torch ms':>9s}")
    for key, title, run, ref, args in cases:
        out, secs = _timed(run)
        err = float(np.max(np.abs(np.asarray(out, np.float64) - ref())))
        good = err < 1e-3
        ok &= good
        t_torch = _torch_time(key, args)
        torch_ms = f"{t_torch * 1e3:9.2f}" if t_torch is not None else f"{'-':>9s}"
        print(f"{title:34s} {err:12.2e} {'ok' if good else 'FAIL':>6s} {secs * 1e3:8.2f} "
              f"{torch_ms}")
    print("all results match their references" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
