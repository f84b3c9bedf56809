"""``nki_cpu_simulator``: AWS's CPU-simulator package, answered by ``nki`` itself.

``nki_cpu_simulator.nki`` *is* our ``nki`` module (and ``.language``, ``.isa``, ...), so
nki-library's harness, which aliases ``sys.modules["nki"]`` to it, changes nothing. This folder
sits behind any real ``nki_cpu_simulator`` on ``sys.path`` (see ``nki.compat``).
"""

from nki.compat import alias_modules

nki = alias_modules("nki_cpu_simulator.nki", "nki", (
    "builtin", "collectives", "compiler", "isa", "isa.constants", "language",
    "language.dtypes", "tensor", "typing"))
