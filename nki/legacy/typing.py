"""Legacy ``nt`` (``neuronxcc.nki.typing``): ``nt.tensor[shape]``, ``nt.mutable_tensor`` and
``nt.tensor[nt.mutable]``, the current dialect's annotations; ``nt.scalar(t)``, a tile's value
read at run time as a runtime loop's trip count (:mod:`nki.legacy.scalar_loop`)."""

from nki.legacy.scalar_loop import scalar
from nki.typing import mutable, mutable_tensor, tensor

__all__ = ["tensor", "mutable_tensor", "mutable", "scalar"]
