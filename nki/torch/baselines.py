"""torch CPU counterparts of the library kernels, for demos and benchmarks (one thread)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch


def counterpart(name: str, arrays: list[np.ndarray]) -> Callable[[], object]:
    """A zero-argument callable running torch's version of kernel ``name`` on ``arrays``."""
    t = [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
    table = {
        "attention": lambda: torch.nn.functional.scaled_dot_product_attention(
            t[0][None], t[1][None], t[2][None], is_causal=True),
        "softmax": lambda: torch.softmax(t[0], -1),
        "layernorm": lambda: torch.nn.functional.layer_norm(t[0], t[0].shape[-1:], t[1], t[2]),
        "rmsnorm": lambda: torch.nn.functional.rms_norm(t[0], t[0].shape[-1:], t[1], 1e-6),
        "matmul": lambda: t[0].T @ t[1],
    }
    return table[name]


def best_time(fn: Callable[[], object], repeat: int = 3) -> float:
    """Best wall time of ``repeat`` runs after one warm-up, with torch on one thread."""
    torch.set_num_threads(1)
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
