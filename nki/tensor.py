"""``nki.tensor`` (``import nki.tensor as ntensor``): trace-time constant tensors.

A re-export of :mod:`nki.lang.trace_tensor`, where the builders are documented.
"""

from nki.lang.trace_tensor import TraceTimeTensor, arange, identity, zeros

__all__ = ["TraceTimeTensor", "zeros", "identity", "arange"]
