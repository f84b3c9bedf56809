"""``neuronxcc.nki``: the legacy (NKI 0.1, "Beta 1") dialect on the nki simulator.

    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl
    import neuronxcc.nki.isa as nisa
"""

from neuronxcc.nki import compiler, isa, language, typing
from nki.errors import NkiError, NkiUnsupportedError, NkiValidationError
from nki.legacy.jit import (
    LegacyKernel,
    baremetal,
    benchmark,
    jit,
    profile,
    simulate_kernel,
    trace,
)
from nki.legacy.tile import LegacyTile as tensor  # noqa: N813 - AWS names it nki.tensor

__all__ = ["jit", "simulate_kernel", "baremetal", "benchmark", "profile", "trace", "language",
           "isa", "typing", "compiler", "tensor", "LegacyKernel", "NkiError",
           "NkiValidationError", "NkiUnsupportedError"]
