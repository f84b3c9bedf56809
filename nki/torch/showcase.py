"""Showcase: a small GPT trained on the ``neuron`` device, every matmul and attention on NKI.

The model is plain PyTorch — ``nn.Linear``, ``F.scaled_dot_product_attention(is_causal=True)``,
``nn.LayerNorm``, ``nn.GELU`` — with nothing NKI-specific in it. Moved to ``neuron``, its
linear layers (forward and backward) run the NKI matmul kernel and its attention runs the NKI
flash attention kernel through ``nki.torch.routing``; everything else runs torch's CPU kernels on
the same host memory. :func:`compare` trains the same initial model on CPU and on ``neuron``
(or with ``torch.compile(backend="neuron")``) and returns both loss curves.

Run ``python -m nki.torch.showcase`` to see the curves and the kernel counts.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F  # noqa: N812  (the universal PyTorch spelling)
from torch import Tensor, nn


@dataclass(frozen=True)
class GPTConfig:
    """Model and training sizes; the defaults keep a 15-step run to seconds on one core."""

    vocab: int = 64
    seq: int = 16
    d_model: int = 32
    n_head: int = 2
    n_layer: int = 2
    batch: int = 4
    steps: int = 15
    distinct_batches: int = 3
    lr: float = 1e-2
    seed: int = 0


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention through ``F.scaled_dot_product_attention``."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    """Pre-norm transformer block: attention and a GELU MLP, each with a residual."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token + position embeddings, ``n_layer`` blocks, a final norm and the LM head."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq, cfg.d_model)
        self.blocks = nn.Sequential(*(Block(cfg) for _ in range(cfg.n_layer)))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, idx: Tensor) -> Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln_f(self.blocks(self.tok(idx) + self.pos(pos))))


def make_batches(cfg: GPTConfig) -> list[tuple[Tensor, Tensor]]:
    """Deterministic (input, target) token batches of a learnable toy language: each
    sequence counts up by a per-sequence stride modulo the vocabulary. A few distinct batches
    are cycled, so a 15-step run shows a clearly falling loss."""
    g = torch.Generator().manual_seed(cfg.seed + 1)
    batches = []
    for _ in range(cfg.distinct_batches):
        start = torch.randint(0, cfg.vocab, (cfg.batch, 1), generator=g)
        stride = torch.randint(1, 4, (cfg.batch, 1), generator=g)
        seq = (start + stride * torch.arange(cfg.seq + 1)) % cfg.vocab
        batches.append((seq[:, :-1], seq[:, 1:]))
    return [batches[i % len(batches)] for i in range(cfg.steps)]


def train(model: nn.Module, cfg: GPTConfig, device: str | torch.device,
          compile_backend: str | None = None) -> list[float]:
    """Train ``model`` (moved to ``device``) for ``cfg.steps`` AdamW steps; the losses."""
    if compile_backend == "neuron":
        from nki.torch.compile import register_backend

        register_backend()
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    step_fn = torch.compile(model, backend=compile_backend) if compile_backend else model
    losses = []
    for x, y in make_batches(cfg):
        x, y = x.to(device), y.to(device)
        logits = step_fn(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@dataclass
class Comparison:
    """Loss curves of the same initial model trained two ways, and the NKI kernels used."""

    reference: list[float]
    nki: list[float]
    kernel_counts: dict[str, int] = field(default_factory=dict)

    def max_abs_diff(self) -> float:
        return max(abs(a - b) for a, b in zip(self.reference, self.nki))


def compare(cfg: GPTConfig = GPTConfig(), device: str = "neuron",
            compile_backend: str | None = None) -> Comparison:
    """Train one initial model on CPU (reference) and on ``device`` (optionally compiled)."""
    from nki.torch import routing
    from nki.torch.ops import count_kernels

    routing.enable()            # idempotent; nki.torch's import normally did it already
    torch.manual_seed(cfg.seed)
    model = GPT(cfg)
    reference = train(copy.deepcopy(model), cfg, "cpu")
    with count_kernels() as counts:
        losses = train(copy.deepcopy(model), cfg, device, compile_backend)
    return Comparison(reference, losses, counts)


def main() -> None:
    """Print both loss curves and the NKI kernel counts of the neuron run."""
    import nki.torch  # noqa: F401  (enables the neuron device and the routing)
    from nki.torch.ops import neuron_available

    torch.set_num_threads(1)
    device = "neuron" if neuron_available() else "cpu"
    backend = None if device == "neuron" else "neuron"   # no device: show the compile path
    result = compare(GPTConfig(), device, backend)
    label = f"nki loss ({device}{', compiled' if backend else ''})"
    print(f"{'step':>4}  {'cpu loss':>9}  {label:>24}")
    for i, (a, b) in enumerate(zip(result.reference, result.nki)):
        print(f"{i:4d}  {a:9.5f}  {b:24.5f}")
    print(f"max |difference| = {result.max_abs_diff():.2e}")
    print(f"NKI kernels that ran: {result.kernel_counts}")


if __name__ == "__main__":
    main()
