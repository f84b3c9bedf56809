"""``nki.typing`` (``nt``): tensor annotations for kernel parameters and locals.

``x: nt.tensor[128, 512]`` and ``x: nt.tensor[[128, 512], nl.float32]`` document shapes;
``out: nt.mutable_tensor`` marks a parameter the kernel writes. In the current dialect writing
a parameter is legal either way (spec §1.1), so these are accepted and carry no checks.
"""

from __future__ import annotations


class _TensorAnnotation:
    """Subscriptable marker: ``tensor[shape]`` or ``tensor[[shape], dtype]``."""

    def __init__(self, name: str, shape=None, dtype=None):
        self._name, self.shape, self.dtype = name, shape, dtype

    def __getitem__(self, item) -> _TensorAnnotation:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], (list, tuple)):
            return _TensorAnnotation(self._name, tuple(item[0]), item[1])
        shape = item if isinstance(item, tuple) else (item,)
        return _TensorAnnotation(self._name, shape)

    def __repr__(self) -> str:
        return f"nt.{self._name}" + (f"[{self.shape}]" if self.shape else "")


tensor = _TensorAnnotation("tensor")
mutable_tensor = _TensorAnnotation("mutable_tensor")

__all__ = ["tensor", "mutable_tensor"]
