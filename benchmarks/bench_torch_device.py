"""Per-op overhead of the ``neuron`` device: the same torch code on ``cpu`` and on ``neuron``.

    python benchmarks/bench_torch_device.py [--repeat 21] [--json PATH]

Ops without a neuron kernel run torch's CPU kernel on zero-copy views (nki/torch/csrc), so the
difference is pure dispatch overhead. Prints microseconds per op (best of ``--repeat`` runs,
one thread) and writes a JSON record (default benchmarks/results/torch_device-<machine kind>.json).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from _record import default_json, write_record  # noqa: E402  (benchmarks/_record.py)

import nki.torch  # noqa: E402, F401  (the neuron device)


def per_call_us(fn, repeat: int, budget_s: float = 0.05) -> float:
    """Best-of-``repeat`` mean time of one call, in microseconds."""
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < budget_s / 5:
        fn()
        n += 1
    n = max(n, 3)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def _mlp_step(device: str, foreach: bool | None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 64)).to(device)
    # torch's default is the foreach AdamW on accelerators (neuron) and the per-tensor loop
    # on CPU; foreach=False compares the same op sequence on both devices
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=foreach)
    x, y = torch.randn(32, 64, device=device), torch.randn(32, 64, device=device)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return step


def cases(device: str) -> dict:
    """name -> zero-argument callable running the op on ``device``."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(4, 4, generator=g).to(device)
    b = torch.randn(4, 4, generator=g).to(device)
    big = torch.randn(256, 256, generator=g).to(device)
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 64).to(device)
    xl = torch.randn(8, 64, generator=g).to(device)
    return {
        "add 4x4": lambda: a + b,
        "relu 4x4": lambda: torch.relu(a),
        "sum 4x4": lambda: a.sum(),
        "add_ 4x4 (in place)": lambda: a.add_(0.0),
        "t() (view)": lambda: a.t(),
        "empty(16)": lambda: torch.empty(16, device=device),
        "mm 4x4": lambda: a @ b,
        "mm 256x256": lambda: big @ big,
        "nn.Linear 8x64 fwd": lambda: lin(xl),
        "MLP 64-128-64 AdamW step (foreach=False)": _mlp_step(device, False),
        "MLP 64-128-64 AdamW step (torch default)": _mlp_step(device, None),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--json", default=default_json("torch_device"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    cpu, neuron = cases("cpu"), cases("neuron")
    rows = []
    print(f"{'op':42s} {'cpu us':>9s} {'neuron us':>10s} {'overhead':>9s}")
    for name in cpu:
        c, n = per_call_us(cpu[name], args.repeat), per_call_us(neuron[name], args.repeat)
        rows.append({"op": name, "cpu_us": round(c, 2), "neuron_us": round(n, 2),
                     "overhead_us": round(n - c, 2)})
        print(f"{name:42s} {c:9.2f} {n:10.2f} {n - c:+9.2f}")
    write_record(args.json, benchmark="torch_device", torch=torch.__version__, threads=1,
                 routing="nki.torch.routing" in sys.modules, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
