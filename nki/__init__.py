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
from nki.ir.types import DType
from nki.jit.kernel import Kernel, jit, simulate, simulate_kernel

# The type of nl.float32 & co.: AWS's nki-library annotates dtype parameters `nki.dtype`.
dtype = DType

__version__ = "0.1.0"

__all__ = ["jit", "simulate", "simulate_kernel", "Kernel", "dtype", "NkiError",
           "NkiValidationError", "NkiRuntimeError", "NkiCapacityError", "NkiUnsupportedError",
           "__version__"]
