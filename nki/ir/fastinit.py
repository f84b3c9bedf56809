"""A faster ``__init__`` for the IR's hottest frozen dataclasses.

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__`` (a
global lookup, an attribute lookup and a call per field): building ``Affine``, ``Access``,
``Placed`` and ``Instr`` objects was ~half of lowering and a tenth of tracing and reroll
(py-spy, flash attention S=4096). :func:`fast_init` gives such a class an ``__init__`` with
the same parameters and defaults that fills the instance's ``__dict__`` in one call. The
class stays frozen: assignment still raises ``FrozenInstanceError``.
"""

from __future__ import annotations

from dataclasses import MISSING, fields


def fast_init(cls: type) -> type:
    """Class decorator, applied above ``@dataclass(frozen=True)``: see the module docstring.
    Only for classes without ``__post_init__``, ``init=False`` fields or default factories
    (what the generated ``__init__`` would do beyond storing the arguments).

    Example:
        >>> from dataclasses import dataclass
        >>> @fast_init
        ... @dataclass(frozen=True)
        ... class P:
        ...     x: int
        ...     y: int = 0
        >>> P(1), P(1, y=2) == P(1, 2)
        (P(x=1, y=0), True)
    """
    fs = fields(cls)
    if hasattr(cls, "__post_init__") or any(
            not f.init or f.default_factory is not MISSING for f in fs):
        raise TypeError(f"fast_init: {cls.__name__} needs the generated __init__")
    defaults = {f"_d_{f.name}": f.default for f in fs if f.default is not MISSING}
    params = ", ".join(f.name if f.default is MISSING else f"{f.name}=_d_{f.name}"
                       for f in fs)
    store = ", ".join(f"{f.name!r}: {f.name}" for f in fs)
    namespace = dict(defaults)
    exec(f"def __init__(self, {params}):\n    self.__dict__.update({{{store}}})\n",
         namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init
    return cls
