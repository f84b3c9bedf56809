"""Tutorial 10 — PyTorch on NKI: kernels as torch ops, the ``neuron`` device, a GPT.

``import nki.torch`` gives PyTorch a ``neuron`` device, as TorchNeuron does on Trainium. Its
memory is host memory; what makes it a Neuron device is where the heavy ops go:

1. **NKI kernels as torch ops.** ``@nki_op`` turns a wrapper around ``@nki.jit`` kernels
   into ``torch.ops.nki.<name>``, with autograd, a fake kernel for ``torch.compile`` and an
   implementation for ``cpu`` and ``neuron`` tensors.
2. **Plain PyTorch, routed.** On ``neuron`` tensors ``aten::mm``/``bmm``/``addmm`` (so
   ``nn.Linear``) run the NKI matmul kernel and ``F.scaled_dot_product_attention`` the NKI
   flash attention kernel — forward and backward. Everything else runs torch's CPU kernels
   on the same bytes. ``nki.torch.routing.routing(False)`` switches this off.
3. **``torch.compile(model, backend="neuron")``**: AOTAutograd graphs whose matmuls are
   ``nki.matmul`` nodes (and whose CPU attention nodes ``nki.flash_attention`` ones).
4. **A GPT** (``nki.torch.showcase``) trained for 15 steps on ``neuron``; its loss curve
   matches the same model trained on CPU.

Run: ``python tutorials/10_torch_gpt.py`` or ``python -m tutorials.10_torch_gpt``.
"""

from __future__ import annotations

import os
import sys

# numpy's BLAS threads next to torch's slow each other down badly: pin both to one thread
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402,N812

import nki.torch  # noqa: E402,F401  (the neuron device, when its extension is built)
from nki.torch import ops, routing  # noqa: E402
from nki.torch import showcase as gpt  # noqa: E402


def part1_kernel_as_op() -> None:
    """``torch.ops.nki.matmul``: an NKI kernel with autograd and a fake kernel."""
    a = torch.randn(64, 32, requires_grad=True)
    b = torch.randn(32, 48, requires_grad=True)
    with ops.count_kernels() as seen:
        out = torch.ops.nki.matmul(a, b)       # the NKI matmul kernel, traced once
        out.sum().backward()                   # backward: two more NKI matmuls
    torch.testing.assert_close(out, a @ b)
    print(f"1. torch.ops.nki.matmul fwd+bwd: kernels {seen}")
    # opcheck runs the op through FakeTensor, autograd and AOTAutograd and checks they agree
    torch.library.opcheck(torch.ops.nki.matmul.default, (a, b))
    print("   torch.library.opcheck(nki::matmul) passed")


def part2_routing(device: str) -> None:
    """nn.Linear and SDPA on the neuron device run NKI kernels; routing can be turned off."""
    lin = torch.nn.Linear(32, 16).to(device)
    x = torch.randn(4, 8, 32, device=device, requires_grad=True)
    q, k, v = (torch.randn(2, 2, 16, 8, device=device) for _ in range(3))
    with ops.count_kernels() as seen:
        lin(x).sum().backward()
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    print(f"2. nn.Linear fwd+bwd and causal SDPA on {device}: kernels {seen}")
    with routing.routing(False), ops.count_kernels() as seen:
        lin(x).sum().backward()
    print(f"   the same with routing(False): kernels {seen or 'none'}")


def part3_compile(device: str) -> None:
    """torch.compile(backend="neuron") rewrites the graph's matmuls into nki.matmul nodes."""
    from nki.torch import compile as ncompile

    ncompile.register_backend()          # import nki.torch does this once wired in
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 32)).to(device)
    compiled = torch.compile(model, backend="neuron")
    x = torch.randn(8, 32, device=device)
    with ops.count_kernels() as seen:
        out = compiled(x)
        out.sum().backward()
    torch.testing.assert_close(out, model(x))
    print(f"3. torch.compile(backend='neuron'): {ncompile.lowering_stats()}; kernels {seen}")


def part4_gpt(device: str) -> float:
    """Train the showcase GPT on the device and on CPU; return the largest loss difference."""
    cfg = gpt.GPTConfig()
    # without the device, show the same model through the compile backend on CPU instead
    backend = None if device == "neuron" else "neuron"
    result = gpt.compare(cfg, device, backend)
    print(f"4. GPT ({cfg.n_layer} layers, d={cfg.d_model}, {cfg.n_head} heads), "
          f"{cfg.steps} AdamW steps on {device}{' (compiled)' if backend else ''}:")
    print(f"   {'step':>4}  {'cpu':>8}  {'nki':>8}")
    for i, (a, b) in enumerate(zip(result.reference, result.nki)):
        print(f"   {i:4d}  {a:8.4f}  {b:8.4f}")
    print(f"   max |loss difference| {result.max_abs_diff():.2e}; kernels {result.kernel_counts}")
    return result.max_abs_diff()


def main() -> int:
    """Run the four parts; 0 when the GPT's loss curves agree."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    routing.enable()     # registers the neuron kernels of aten mm/addmm/SDPA (idempotent)
    device = "neuron" if ops.neuron_available() else "cpu"
    if device == "cpu":
        print("(the neuron device is not built here: parts 2-4 run on CPU tensors)")
    part1_kernel_as_op()
    part2_routing(device)
    part3_compile(device)
    diff = part4_gpt(device)
    ok = diff < 1e-3
    print("tutorial 10 OK" if ok else "tutorial 10 FAILED: loss curves differ")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
