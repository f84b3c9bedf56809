"""Matmul benchmark: ``nki.kernels.matmul.matmul_lhsT`` in bf16, fp8 and fp32 against torch's
CPU matmul (one thread each, timed alternately in one process), with the bf16 dot unit on
and off; plus bf16 flash attention against torch's bf16 SDPA, called as the kernel and as
torch's own SDPA on ``neuron`` tensors (the device runs the same kernel).

    python benchmarks/bench_matmul.py [--quick] [--repeat N] [--json PATH]

Issue 13 targets: bf16 2048^3 <= 1.5x torch bf16 (target 2), fp32 2048^3 <= 1.1x torch fp32
(target 3), flash attention forward bf16 S=4096 d128 causal <= 2x torch bf16 SDPA. The
record names the CPU, its vector/matrix features and the bf16 unit nki found. fp8 inputs
have no torch CPU matmul: they are shown against torch bf16 on the same values.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from _record import best_of_pair, cpu_features, default_json, write_record  # noqa: E402  (benchmarks/_record.py)


def paired(fn_a, fn_b, repeat: int, tlabel: str) -> dict:
    """Wall and CPU times of nki (``fn_a``) and torch (``fn_b``) and their ratios."""
    w_nki, w_torch = best_of_pair(fn_a, fn_b, repeat)
    # CPU time of this thread (torch with one thread, nki's core 0): on a shared machine the
    # wall time also counts the slices the scheduler gave to others
    c_nki, c_torch = best_of_pair(fn_a, fn_b, repeat, clock=time.thread_time)
    return {"nki_ms": w_nki * 1e3, f"torch_{tlabel}_ms": w_torch * 1e3,
            f"ratio_vs_torch_{tlabel}": w_nki / w_torch, "nki_cpu_ms": c_nki * 1e3,
            f"torch_{tlabel}_cpu_ms": c_torch * 1e3,
            f"cpu_ratio_vs_torch_{tlabel}": c_nki / c_torch}


def _torch_of(x):
    import torch
    if x.dtype == np.float32:
        return torch.from_numpy(x)
    return torch.from_numpy(x.astype(np.float32)).bfloat16()   # fp8 values are exact in bf16


def matmul_cases(n: int):
    """(name, lhsT, rhs, unit on?, torch dtype label)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    bf = ml_dtypes.bfloat16
    yield f"matmul {n}^3 bf16 (bf16 unit)", a.astype(bf), b.astype(bf), True, "bf16"
    yield f"matmul {n}^3 bf16 (unit off: fp32 sgemm)", a.astype(bf), b.astype(bf), False, "bf16"
    e4 = ml_dtypes.float8_e4m3fn
    yield f"matmul {n}^3 fp8 e4m3fn (bf16 unit)", a.astype(e4), b.astype(e4), True, "bf16"
    yield f"matmul {n}^3 fp32", a, b, True, "fp32"


def run_matmuls(n: int, repeat: int, report) -> None:
    from nki.kernels.matmul import matmul_lhsT

    from nki.sim import bf16

    for name, lhsT, rhs, unit_on, tlabel in matmul_cases(n):
        ta, tb = _torch_of(np.ascontiguousarray(lhsT.T)), _torch_of(rhs)
        out = "float32" if lhsT.dtype != np.float32 else None
        was = bf16.set_enabled(unit_on)
        try:
            row = paired(lambda: matmul_lhsT(lhsT, rhs, out_dtype=out), lambda: ta @ tb,
                         repeat, tlabel)
        finally:
            bf16.set_enabled(was)
        report({"case": name, **row, "nki_gflops": 2 * n ** 3 / row["nki_ms"] / 1e6})


def run_attention(repeat: int, report, seq: int) -> None:
    import torch
    from nki.kernels.attention import flash_attention

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, seq, 128)).astype(ml_dtypes.bfloat16)
               for _ in range(3))
    tq, tk, tv = (torch.from_numpy(x.astype(np.float32)).bfloat16() for x in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    row = paired(lambda: flash_attention(q, k, v, causal=True),
                 lambda: sdpa(tq, tk, tv, is_causal=True), repeat, "bf16")
    report({"case": f"flash attention fwd b1-h2-s{seq}-d128 bf16 causal", **row})
    # the same call written for the neuron device: torch's own SDPA on neuron tensors, which
    # the device sends to the NKI flash kernel (nki/torch/routing.py), against torch's on CPU
    import nki.torch  # noqa: F401  (registers the neuron device)

    nq, nk, nv = (t.to("neuron") for t in (tq, tk, tv))
    check = sdpa(nq, nk, nv, is_causal=True).cpu().float()
    ref = sdpa(tq, tk, tv, is_causal=True).float()
    assert torch.allclose(check, ref, atol=2e-2, rtol=2e-2), "neuron SDPA is not attention"
    row = paired(lambda: sdpa(nq, nk, nv, is_causal=True),
                 lambda: sdpa(tq, tk, tv, is_causal=True), repeat, "bf16")
    report({"case": f"neuron-device SDPA fwd b1-h2-s{seq}-d128 bf16 causal", **row})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1024^3 and S=2048")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", default=default_json("matmul"))
    args = ap.parse_args()
    import torch

    from nki.sim import bf16

    torch.set_num_threads(1)
    features = cpu_features()
    print(f"bf16 unit: {bf16.UNIT} ({bf16.STATUS}); CPU features: {' '.join(features)}")
    rows = []

    def report(row):
        rows.append(row)
        cells = "".join(f"  {k} {v:.2f}" for k, v in row.items() if k != "case")
        print(f"{row['case']:44s}{cells}", flush=True)

    run_matmuls(1024 if args.quick else 2048, args.repeat, report)
    run_attention(max(3, args.repeat // 2), report, 2048 if args.quick else 4096)
    write_record(args.json, threads=1, timing="best of --repeat: wall and thread CPU",
                 repeat=args.repeat, bf16_unit=bf16.UNIT, bf16_unit_status=bf16.STATUS,
                 openblas_threads=os.environ.get("OPENBLAS_NUM_THREADS"),
                 torch=torch.__version__, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
