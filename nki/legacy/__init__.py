"""The legacy ``neuronxcc.nki`` dialect (NKI 0.1 / "Beta 1"), a second surface over the same
tracer, rules and IR as the current dialect (spec §0, §1.7, §1.9, §3 and §4 "old" columns).

This package *is* the dialect's public face, spelled without AWS's import root::

    import nki.legacy as nki                # the same module as ``import neuronxcc.nki``
    import nki.legacy.language as nl        # neuronxcc.nki.language
    import nki.legacy.isa as nisa           # neuronxcc.nki.isa

``neuronxcc.nki`` is an alias of it (``nki/foreign-names/neuronxcc``, installed behind any real
``neuronxcc``). Modules, one concern each: ``index`` (``nl.arange``/``nl.mgrid`` index
expressions and predicates), ``mask`` (``mask=`` as a rectangle of the iteration space),
``tile`` (the legacy tile handle: index-expression indexing, block dims, assignment and
operators), ``pending`` (deferred instruction results), ``nl_base`` / ``math`` (the ``nl``
functions, gathered by ``language``), ``isa`` (``nisa``), ``compiler`` (``ncc``), ``jit``
(launch grids, ``simulate_kernel``). Nothing in the core ``nki`` imports this package.
"""

from nki.errors import NkiError, NkiUnsupportedError, NkiValidationError
from nki.legacy import compiler, isa, language, typing
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

# the submodules ``neuronxcc.nki.<name>`` aliases (and the private ones public kernels import)
PUBLIC_MODULES = ("language", "language.constants", "isa", "isa.constants", "typing", "compiler",
                  "_private", "_private.private_api")

__all__ = ["jit", "simulate_kernel", "baremetal", "benchmark", "profile", "trace", "language",
           "isa", "typing", "compiler", "tensor", "LegacyKernel", "NkiError",
           "NkiValidationError", "NkiUnsupportedError"]
