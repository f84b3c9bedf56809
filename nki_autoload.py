"""torch's ``torch.backends`` entry point for nki: the opt-in autoload of the ``neuron`` device.

torch calls every installed backend's entry point on ``import torch``. This module lives
outside the ``nki`` package on purpose: importing anything inside ``nki`` runs
``nki/__init__`` (numba and the simulator, ~0.3 s), which a plain ``import torch`` must never
pay for. So it reads its one switch itself (the exception to "environment variables are read
in nki/config.py"; the variable is documented in that table) and imports ``nki.torch`` only
when asked to.
"""

import os


def autoload() -> None:
    """Enable the ``neuron`` device on ``import torch`` when ``NKI_TORCH_AUTOLOAD=1``."""
    if os.environ.get("NKI_TORCH_AUTOLOAD", "0").strip() == "1":
        import nki.torch  # noqa: F401  (importing it enables the device)
