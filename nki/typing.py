"""``nki.typing`` (``nt``): tensor annotations for kernel parameters and locals.

``x: nt.tensor[128, 512]`` and ``x: nt.tensor[[128, 512], nl.float32]`` document shapes;
``out: nt.mutable_tensor`` marks a parameter the kernel writes. In the current dialect writing
a parameter is legal either way (spec §1.1), so these are accepted and carry no checks.

Passed as a kernel *argument*, ``nt.tensor[[8192, 4096], nl.bfloat16]`` is a shape-only
placeholder (AWS's benchmark scripts pass them): the kernel specializes as for an array of
that shape and dtype (``kernel.specialize``, a cost estimate), and a call that would
simulate it raises ``nki_shape_only_argument``, since there is no data to run on.
"""

from __future__ import annotations


class _TensorAnnotation:
    """Subscriptable marker: ``tensor[shape]`` or ``tensor[[shape], dtype]``."""

    def __init__(self, name: str, shape=None, dtype=None):
        self._name, self.shape, self.dtype = name, shape, dtype

    def __getitem__(self, item) -> _TensorAnnotation:
        if item is mutable:                  # legacy ``nt.tensor[nt.mutable]``
            return mutable_tensor
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], (list, tuple)):
            return _TensorAnnotation(self._name, tuple(item[0]), item[1])
        shape = item if isinstance(item, tuple) else (item,)
        return _TensorAnnotation(self._name, shape)

    def __repr__(self) -> str:
        if not self.shape:
            return f"nt.{self._name}"
        shape = list(self.shape)
        if self.dtype is None:
            return f"nt.{self._name}[{shape}]"
        dtype = getattr(self.dtype, "name", self.dtype)
        return f"nt.{self._name}[{shape}, {dtype}]"


class _Mutable:
    """``nt.mutable``: the legacy qualifier of ``nt.tensor[nt.mutable]`` (= ``mutable_tensor``)."""

    def __repr__(self) -> str:
        return "nt.mutable"


mutable = _Mutable()

TensorAnnotation = _TensorAnnotation     # what nki.jit recognises as a shape-only argument

tensor = _TensorAnnotation("tensor")
mutable_tensor = _TensorAnnotation("mutable_tensor")

__all__ = ["tensor", "mutable_tensor"]
