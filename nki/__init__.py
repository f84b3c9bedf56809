"""nki: AWS's Neuron Kernel Interface, simulated exactly and checked, on any CPU.

    import nki, nki.language as nl, nki.isa as nisa

    @nki.jit
    def kernel(x): ...
"""

from nki.errors import (
                        NkiCapacityError,
                        NkiError,
                        NkiRuntimeError,
                        NkiUnsupportedError,
                        NkiValidationError,
)
from nki.jit.kernel import Kernel, jit, simulate, simulate_kernel

__version__ = "0.1.0"

__all__ = ["jit", "simulate", "simulate_kernel", "Kernel", "NkiError", "NkiValidationError",
           "NkiRuntimeError", "NkiCapacityError", "NkiUnsupportedError", "__version__"]
