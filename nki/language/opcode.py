"""``nki.language.opcode``: the operator constants, as a module of their own.

nki-library's attention_cte writes ``from nki.language.opcode import maximum``. The names are
the same token objects as ``nl.maximum`` & co., so ``op=opcode.maximum`` and ``op=nl.maximum``
mean the same: every ``nl`` callable that names an ALU operator or an activation function.
"""

import nki.language as _nl
from nki.lang.operators import as_act as _as_act
from nki.lang.operators import as_alu as _as_alu

__all__ = sorted(
    name for name, value in vars(_nl).items()
    if not name.startswith("_") and callable(value)
    and (_as_alu(value) is not None or _as_act(value) is not None))

globals().update({name: getattr(_nl, name) for name in __all__})
