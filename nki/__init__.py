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
from nki.jit.multirank import multi_rank_execute, multi_rank_simulate

# AWS's nki_cpu_simulator spells nki.simulate ``cpu_simulate`` (nki-library's harness calls
# ``nki.cpu_simulate(kernel)[lnc](**inputs)``)
cpu_simulate = simulate

# The type of nl.float32 & co.: AWS's nki-library annotates dtype parameters `nki.dtype`.
dtype = DType

__version__ = "0.1.0"

# AWS's own distributions beside ours: their import names win (nki/compat.py); say so once
from nki.compat import warn_once_if_aws_installed as _warn_once_if_aws_installed  # noqa: E402

_warn_once_if_aws_installed()

__all__ = ["jit", "simulate", "cpu_simulate", "simulate_kernel", "multi_rank_simulate",
           "multi_rank_execute", "Kernel", "dtype", "NkiError",
           "NkiValidationError", "NkiRuntimeError", "NkiCapacityError", "NkiUnsupportedError",
           "__version__"]
