"""The torch bridge (imported lazily; the core never imports torch).

``import nki.torch`` makes ``neuron`` a PyTorch device (torch's PrivateUse1 backend, memory on
the host; see :mod:`nki.torch.device`, which is also ``torch.neuron``) and registers the
``neuron`` torch.distributed backend (:mod:`nki.torch.distributed`); on ``neuron`` tensors,
matmuls and attention run the NKI kernels of :mod:`nki.kernels` (:mod:`nki.torch.routing`,
:mod:`nki.torch.ops`)::

    import torch, nki.torch
    model = torch.nn.Linear(8, 8).to("neuron")

If the device's C++ extension cannot be built here, the import warns and the rest of the
bridge (e.g. :mod:`nki.torch.convert`, used by kernels called with CPU tensors) still works;
``nki.torch.device.enable()`` raises the build error itself.
"""

from __future__ import annotations

import warnings

from nki.torch import _build, device, distributed
from nki.torch.device import PrivateUse1TakenError, as_cpu, as_neuron
from nki.torch.ops import count_kernels, kernel_counts, nki_op, reset_kernel_counts

__all__ = ["PrivateUse1TakenError", "as_cpu", "as_neuron", "count_kernels", "device", "distributed",
           "kernel_counts", "nki_op", "register_autograd", "reset_kernel_counts", "wrap_nki"]

try:
    device.enable()   # PrivateUse1 held by another backend: PrivateUse1TakenError, raised as is
except _build.BuildError as _error:
    warnings.warn(f"nki.torch: the neuron device is unavailable: {_error}", stacklevel=2)
else:
    distributed.register()
    # aten mm/bmm/addmm and SDPA on neuron tensors run NKI kernels (replacing the device's
    # CPU-backed kernels for those ops, so this comes after enabling the device).
    # torch.compile(backend="nki") (and "neuron" where no other package has that name) is
    # found through the torch_dynamo_backends entry points, or nki.torch.compile.register_backend.
    from nki.torch import routing

    routing.enable()

from nki.torch.wrap import register_autograd, wrap_nki  # noqa: E402  (after the device)
