"""torch.distributed backend ``neuron``: collectives on neuron tensors, run by Gloo.

``dist.init_process_group(backend="neuron")`` then works as with CUDA and NCCL: DDP, FSDP2
(``fully_shard`` on ``init_device_mesh("neuron", ...)``) and DTensor tensor parallelism. Each
collective hands Gloo CPU tensors over the neuron tensors' bytes (neuron memory is host
memory), so nothing is copied. The C++ backend (``csrc/c10d.cpp``) is compiled on the first
process-group creation (or by ``python -m nki.torch.build``). Ranks may share one host: give
rank ``r`` the device ``neuron:r`` (``torch.neuron.set_device(r)``).
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

from nki.torch import _build

BACKEND = "neuron"


def register() -> None:
    """Register the ``neuron`` backend with torch.distributed (idempotent)."""
    if not dist.is_available() or BACKEND in dist.Backend.backend_list:
        return
    # CPU tensors in a neuron group go to Gloo as they are, so one group serves both.
    dist.Backend.register_backend(BACKEND, _create_backend, devices=["cpu", "neuron"])


def _create_backend(store: dist.Store, rank: int, size: int, timeout: timedelta):
    """torch's creator hook: the C++ NeuronBackend around a fresh Gloo backend."""
    ext = _build.load("c10d")
    gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
    return ext.NeuronBackend(gloo)
