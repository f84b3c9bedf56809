"""Exact conversions between torch tensors and numpy arrays (bf16/fp8 through their bits).

The implementation lives in :mod:`nki.jit.torch_values`, so that calling a kernel with torch
tensors never imports this package (which enables the ``neuron`` device).
"""

from nki.jit.torch_values import copy_into, from_numpy, to_numpy

__all__ = ["copy_into", "from_numpy", "to_numpy"]
