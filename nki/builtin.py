"""``nki.builtin``: the namespace AWS's CPU simulator publishes as the global name ``builtin``.

nki-library's harness runs ``builtins.builtin = nki_cpu_simulator.nki.builtin`` before its
kernels are imported, so that name resolves in every module. No published kernel or test reads
it: AWS's source-rewriting frontend (``NKI_COMPILER_FRONTEND=custom``) is what calls into it.
This simulator rewrites no code (kernels trace as plain Python), so the module holds only the
public namespaces a kernel can reach through it: ``builtin.language`` is ``nki.language``,
``builtin.isa`` is ``nki.isa``, and so on.
"""

from nki import collectives, compiler, isa, language, lnc, tensor, typing

__all__ = ["collectives", "compiler", "isa", "language", "lnc", "tensor", "typing"]
