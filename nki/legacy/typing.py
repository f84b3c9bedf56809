"""Legacy ``nt`` (``neuronxcc.nki.typing``): ``nt.tensor[shape]`` and ``nt.mutable_tensor``,
the current dialect's annotations."""

from nki.typing import mutable_tensor, tensor

__all__ = ["tensor", "mutable_tensor"]
