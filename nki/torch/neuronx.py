"""TorchNeuron's Python API on the simulator: the module ``import torch_neuronx`` gives.

AWS's ``torch-neuronx`` (TorchNeuron) makes ``neuron`` a PyTorch device on Trainium. Code
written for it starts with ``import torch_neuronx`` or ``from torch_neuronx import nki_op,
wrap_nki``; where AWS's package is not installed, that name is this module (through
``nki/foreign-names/torch_neuronx``, behind any real one on ``sys.path``: see
:mod:`nki.compat`). Importing it imports :mod:`nki.torch`, which enables the simulated
``neuron`` device and the ``neuron`` torch.distributed backend. Our own spellings:

| TorchNeuron | nki |
|---|---|
| ``torch_neuronx.nki_op`` | :func:`nki.torch.nki_op` |
| ``torch_neuronx.wrap_nki`` | :func:`nki.torch.wrap_nki` |
| ``torch_neuronx.register_autograd`` | :func:`nki.torch.register_autograd` |
| ``torch.compile(backend="neuron")`` | ``backend="nki"`` (and ``"neuron"``, see below) |
| ``torch_neuronx.__version__`` | torch's version, nki's as local part: ``2.13.0+nki.0.1.0`` |

``backend="neuron"`` is ours unless another package (AWS's) provides a backend of that name.
TorchNeuron's documented environment variables are accepted; :data:`ENVIRONMENT` says what
each means here (most nothing: there is no NEFF, compiler or runtime). nki's own variables
are listed in :mod:`nki.config`.
"""

from __future__ import annotations

import torch

import nki
from nki.torch import nki_op, register_autograd, wrap_nki

__version__ = f"{torch.__version__.split('+')[0]}+nki.{nki.__version__}"

ENVIRONMENT: dict[str, str] = {
    "TORCH_NEURONX_NEFF_CACHE_DIR": "ignored: no NEFF is built; programs are cached in "
                                    "NKI_CACHE_DIR",
    "NKI_ENABLE_TRACE_CACHE": "ignored: traces are cached in memory always, on disk unless "
                              "NKI_CACHE=0",
    "TORCH_NEURONX_DEBUG_DIR": "ignored: nothing is written there",
    "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS": "ignored: there are no compiler artifacts",
    "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": "ignored: graphs always run eagerly",
    "TORCH_NEURONX_COMPLEX_DECOMPOSE": "ignored: complex ops run torch's CPU kernels",
    "NEURON_CC_FLAGS": "ignored: there is no neuronx-cc",
    "NEURON_RT_VISIBLE_CORES": "ignored: NEURON_SIM_DEVICE_COUNT sets the device count",
    "NKI_SIMULATOR": "accepted: every call runs on the simulator",
    "TORCH_DEVICE_BACKEND_AUTOLOAD": "torch's own; the device autoloads only with "
                                     "NKI_TORCH_AUTOLOAD=1 too",
}
"""TorchNeuron's environment variables and what each means here (nothing reads them)."""

__all__ = ["ENVIRONMENT", "__version__", "nki_op", "register_autograd", "wrap_nki"]
