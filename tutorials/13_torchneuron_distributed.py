"""Tutorial 12 — TorchNeuron's distributed workflows on two processes: FSDP2, then tensor
parallelism with DTensor.

TorchNeuron's guide sets ``PROCESS_GROUP_BACKEND = "neuron"`` and ``DEVICE_TYPE = "neuron"``
and then writes plain PyTorch. Here ``import torch_neuronx`` (nki's, where AWS's package is
absent) registers both: the ``neuron`` device and the ``neuron`` process-group backend, whose
collectives run on Gloo over the neuron tensors' bytes (neuron memory is host memory). Rank
``r`` of a two-process group on this host uses device ``neuron:r``.

1. **FSDP2**: ``fully_shard`` over a 2-device mesh shards each parameter across the ranks;
   three SGD steps on per-rank batches. Every rank then gathers the full parameters and checks
   them against one CPU model trained on both ranks' batches (what data parallelism computes).
2. **Tensor parallelism**: ``parallelize_module`` with ``ColwiseParallel`` then
   ``RowwiseParallel`` splits an MLP's two linears across the ranks (DTensor); the forward and
   the gradients of the full weights match the unsplit CPU model.

Each workflow is its own ``torch.multiprocessing`` launch (a fresh process group each).
Run: ``python tutorials/13_torchneuron_distributed.py`` or
``python -m tutorials.13_torchneuron_distributed``.
"""

from __future__ import annotations

import importlib
import os
import socket
import sys
from datetime import timedelta
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

PROCESS_GROUP_BACKEND = "neuron"
DEVICE_TYPE = "neuron"
WORLD = 2
STEPS = 3


def _mlp(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                               torch.nn.Linear(32, 8))


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(4, 16, generator=g), torch.randn(4, 8, generator=g)


def _setup(rank: int, port: int) -> None:
    import torch_neuronx  # noqa: F401  (the neuron device and process-group backend)

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.neuron.set_device(rank)
    dist.init_process_group(PROCESS_GROUP_BACKEND, rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=120))


# ---------------------------------------------------------------- 1. FSDP2

def fsdp2_rank(rank: int, port: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    _setup(rank, port)
    mesh = init_device_mesh(DEVICE_TYPE, (WORLD,))
    model = _mlp().to(DEVICE_TYPE)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        x, y = _batch(rank, step)
        loss = torch.nn.functional.mse_loss(model(x.to(DEVICE_TYPE)), y.to(DEVICE_TYPE))
        opt.zero_grad()
        loss.backward()            # gradients reduce-scattered to each rank's shard
        opt.step()
    shard = next(model.parameters())
    full = {name: p.full_tensor().cpu() for name, p in model.named_parameters()}
    reference = _data_parallel_reference()
    for name, p in reference.named_parameters():
        torch.testing.assert_close(full[name], p.detach(), rtol=1e-4, atol=1e-5)
    if rank == 0:
        print(f"   rank 0 holds {shard.to_local().shape[0]} of {shard.shape[0]} rows of "
              f"{type(shard).__name__} '{next(model.named_parameters())[0]}' on "
              f"{shard.to_local().device}; all parameters match the CPU reference")
    dist.destroy_process_group()


def _data_parallel_reference() -> torch.nn.Module:
    """One CPU model trained on both ranks' batches: loss = mean of the ranks' losses."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        opt.zero_grad()
        for r in range(WORLD):
            x, y = _batch(r, step)
            (torch.nn.functional.mse_loss(model(x), y) / WORLD).backward()
        opt.step()
    return model


# ---------------------------------------------------------------- 2. tensor parallelism

def tensor_parallel_rank(rank: int, port: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    _setup(rank, port)
    mesh = init_device_mesh(DEVICE_TYPE, (WORLD,))
    model = parallelize_module(_mlp().to(DEVICE_TYPE), mesh,
                               {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x, _ = _batch(0, 0)                       # every rank feeds the same input
    out = model(x.to(DEVICE_TYPE))
    out.square().sum().backward()
    reference = _mlp()
    want = reference(x)
    want.square().sum().backward()
    torch.testing.assert_close(out.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad.full_tensor().cpu(), q.grad, rtol=1e-4, atol=1e-5)
    if rank == 0:
        w = model[0].weight
        print(f"   rank 0 holds {tuple(w.to_local().shape)} of the first weight "
              f"{tuple(w.shape)} ({w.placements[0]}); output and gradients match the CPU "
              "model")
    dist.destroy_process_group()


# ---------------------------------------------------------------- launching

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _importable(fn):
    """``fn`` as a spawned child can find it: run as a script, children re-run ``__main__``;
    loaded from its file under another name (the tests do), through the ``tutorials``
    package."""
    if fn.__module__ == "__main__":
        return fn
    module = importlib.import_module(f"tutorials.{Path(__file__).stem}")
    return getattr(module, fn.__name__)


def launch(fn) -> None:
    """Run ``fn(rank, port)`` on two spawned processes; a rank's failure raises here."""
    if os.path.exists("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.start_processes(_importable(fn), args=(_free_port(),), nprocs=WORLD,
                       start_method="spawn")


def main() -> int:
    import torch_neuronx  # noqa: F401

    from nki.torch import _build

    _build.load("c10d")      # build the process-group backend once, before both ranks need it
    print("1. FSDP2 (fully_shard) over 2 processes on the neuron backend, "
          f"{STEPS} SGD steps:")
    launch(fsdp2_rank)
    print("2. tensor parallelism (DTensor, Colwise + Rowwise) over 2 processes:")
    launch(tensor_parallel_rank)
    print("tutorial 12 OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
