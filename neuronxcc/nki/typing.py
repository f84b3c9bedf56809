"""``neuronxcc.nki.typing`` (``nt``): ``nt.tensor[shape]`` and ``nt.mutable_tensor``."""

from nki.typing import mutable_tensor, tensor

__all__ = ["tensor", "mutable_tensor"]
