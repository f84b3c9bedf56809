"""The torch bridge (imported lazily; the core never imports torch).

``import nki.torch`` makes ``neuron`` a PyTorch device (torch's PrivateUse1 backend, memory on
the host; see :mod:`nki.torch.device`, which is also ``torch.neuron``) and registers the
``neuron`` torch.distributed backend (:mod:`nki.torch.distributed`)::

    import torch, nki.torch
    model = torch.nn.Linear(8, 8).to("neuron")

If the device's C++ extension cannot be built here, the import warns and the rest of the
bridge (e.g. :mod:`nki.torch.convert`, used by kernels called with CPU tensors) still works;
``nki.torch.device.enable()`` raises the build error itself.
"""

from __future__ import annotations

import warnings

from nki.torch import device, distributed
from nki.torch.device import as_cpu, as_neuron

__all__ = ["as_cpu", "as_neuron", "device", "distributed"]

try:
    device.enable()
except RuntimeError as _error:  # BuildError or PrivateUse1 taken by another backend
    warnings.warn(f"nki.torch: the neuron device is unavailable: {_error}", stacklevel=2)
else:
    distributed.register()

# ---- the rest of the bridge (nki.torch.ops / routing / compile) is wired here by the lead:
# they rely on the device being enabled above.
