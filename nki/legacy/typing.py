"""Legacy ``nt`` (``neuronxcc.nki.typing``): ``nt.tensor[shape]``, ``nt.mutable_tensor`` and
``nt.tensor[nt.mutable]``, the current dialect's annotations."""

from nki.typing import mutable, mutable_tensor, tensor

__all__ = ["tensor", "mutable_tensor", "mutable"]
