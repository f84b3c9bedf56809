"""Tutorial 11 — code written for AWS's TorchNeuron, run on the simulator.

TorchNeuron (``torch-neuronx``) is AWS's PyTorch backend for Trainium: a ``neuron`` device,
``torch.compile(backend="neuron")`` and NKI kernels as PyTorch operators. Where AWS's package
is not installed, ``import torch_neuronx`` is nki's (``nki.torch.neuronx``), so the same
script runs here, on host memory and the simulated NeuronCore:

1. **Eager training on ``neuron``**: a small GPT-2-style model (token + position embeddings,
   pre-norm blocks of causal attention and a GELU MLP, tied to nothing exotic) trained with
   AdamW. Its ``nn.Linear`` layers and attention run NKI kernels; its losses match the same
   model trained on CPU.
2. **A fused attention layer as an NKI custom op**: ``@nki_op`` around the library's flash
   attention kernel (launched with ``wrap_nki(kernel)[1](...)``), no fake kernel written (the
   kernel's trace gives the output shapes), the backward kernel registered with
   ``register_autograd``, and the whole layer compiled with
   ``torch.compile(backend="neuron", fullgraph=True)``, forward and backward.

Tutorial 12 runs the distributed workflows (FSDP2, tensor parallelism) on two processes.
Run: ``python tutorials/12_torchneuron.py`` or ``python -m tutorials.12_torchneuron``.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # numpy's BLAS threads vs torch's

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402,N812
import torch_neuronx  # noqa: E402  (nki's, unless AWS's package is installed)
from nki.kernels.attention import flash_attention  # noqa: E402
from nki.kernels.attention_bwd import flash_attention_bwd  # noqa: E402
from torch import Tensor, nn  # noqa: E402
from torch_neuronx import nki_op, register_autograd, wrap_nki  # noqa: E402

from nki.torch import count_kernels  # noqa: E402
from nki.torch.showcase import GPT, GPTConfig, make_batches  # noqa: E402

# ---------------------------------------------------------------- 1. eager training

def train_losses(device: str, cfg: GPTConfig) -> list[float]:
    """AdamW steps of a fresh GPT (same seed on every device); the losses."""
    torch.manual_seed(cfg.seed)
    model = GPT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    losses = []
    for x, y in make_batches(cfg):
        logits = model(x.to(device))
        loss = F.cross_entropy(logits.flatten(0, 1), y.to(device).flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def part1_eager_training() -> None:
    cfg = GPTConfig(steps=8)
    with count_kernels() as seen:
        on_neuron = train_losses("neuron", cfg)
    on_cpu = train_losses("cpu", cfg)
    print(f"1. GPT eager on neuron, {cfg.steps} AdamW steps: loss {on_neuron[0]:.3f} -> "
          f"{on_neuron[-1]:.3f} (CPU: {on_cpu[0]:.3f} -> {on_cpu[-1]:.3f})")
    print(f"   NKI kernels that ran: {seen}")
    torch.testing.assert_close(torch.tensor(on_neuron), torch.tensor(on_cpu),
                               rtol=2e-3, atol=2e-3)
    assert on_neuron[-1] < on_neuron[0] and seen.get("matmul", 0) > 0


# ---------------------------------------------------------------- 2. a fused attention op

@nki_op("tutorial::causal_attention")
def causal_attention(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """``(out, logsumexp)`` of causal attention, ``[B, H, S, d]``; no fake kernel: the flash
    attention kernel's trace tells torch.compile the output shapes."""
    return wrap_nki(flash_attention)[1](q.contiguous(), k.contiguous(), v.contiguous(),
                                        None, True)


@nki_op("tutorial::causal_attention_backward")
def causal_attention_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                              lse: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(dq, dk, dv)`` by the flash attention backward kernel."""
    return wrap_nki(flash_attention_bwd)[1](q, k, v, out, dout.contiguous(), lse, None, True)


def _save(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs, *output)


def _backward(ctx, dout: Tensor, dlse: Tensor):
    q, k, v, out, lse = ctx.saved_tensors     # (nothing downstream uses lse: dlse is zero)
    return causal_attention_backward(dout, q, k, v, out, lse)


register_autograd(causal_attention, _backward, setup_context=_save)


class FusedAttention(nn.Module):
    """Causal self-attention whose core is the NKI custom op (``fused=False``: torch's SDPA)."""

    def __init__(self, d_model: int, n_head: int, fused: bool = True):
        super().__init__()
        self.n_head, self.fused = n_head, fused
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in self.qkv(x).split(C, dim=-1))
        if self.fused:
            y = causal_attention(q, k, v)[0]
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


def part2_fused_attention_compiled() -> None:
    from nki.torch import compile as ncompile

    ncompile.register_backend()      # installed, the entry points do this
    torch.manual_seed(0)
    layer = FusedAttention(32, 2)
    reference = FusedAttention(32, 2, fused=False)
    reference.load_state_dict(layer.state_dict())
    x = torch.randn(2, 64, 32)
    compiled = torch.compile(layer.to("neuron"), backend="neuron", fullgraph=True)
    xn = x.to("neuron").requires_grad_()
    with count_kernels() as seen:
        y = compiled(xn)
        y.square().sum().backward()
    xr = x.clone().requires_grad_()
    want = reference(xr)
    want.square().sum().backward()
    print(f"2. FusedAttention compiled (fullgraph) on neuron, fwd+bwd: kernels {seen}")
    torch.testing.assert_close(y.detach().cpu(), want.detach(), rtol=2e-4, atol=2e-4)
    torch.testing.assert_close(xn.grad.cpu(), xr.grad, rtol=2e-3, atol=2e-3)
    for p, q in zip(layer.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=2e-3, atol=2e-3)
    assert seen.get("flash_attention") == 1 and seen.get("flash_attention_bwd") == 1


def main() -> int:
    print(f"torch_neuronx {torch_neuronx.__version__} ({torch_neuronx.__name__})")
    part1_eager_training()
    part2_fused_attention_compiled()
    print("tutorial 11 OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
