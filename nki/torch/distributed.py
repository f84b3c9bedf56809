"""torch.distributed backend ``neuron``: collectives on neuron tensors, run by Gloo.

``dist.init_process_group(backend="neuron")`` then works as with CUDA and NCCL: DDP, FSDP2
(``fully_shard`` on ``init_device_mesh("neuron", ...)``) and DTensor tensor parallelism. Each
collective hands Gloo CPU tensors over the neuron tensors' bytes (neuron memory is host
memory), so nothing is copied. The C++ backend (``csrc/c10d.cpp``) is compiled on the first
process-group creation (or by ``python -m nki.torch.build``). Ranks may share one host: give
rank ``r`` the device ``neuron:r`` (``torch.neuron.set_device(r)``).
"""

from __future__ import annotations

import atexit
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


_exit_hook = {"registered": False}


def _create_backend(store: dist.Store, rank: int, size: int, timeout: timedelta):
    """torch's creator hook: the C++ NeuronBackend around a fresh Gloo backend.

    Gloo's worker threads live until its backend object is destroyed, which Python may never
    do before it exits (no ``destroy_process_group``, or a process group still referenced);
    a worker finishing a collective while the interpreter finalizes aborts the process
    ("terminate called without an active exception", see ``csrc/c10d.cpp``). So at exit,
    before finalization, every neuron backend is stopped: its Gloo workers finish their work
    (or time out) and are joined.
    """
    ext = _build.load("c10d")
    gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
    if not _exit_hook["registered"]:
        atexit.register(ext.stop_all)
        _exit_hook["registered"] = True
    return ext.NeuronBackend(gloo)
