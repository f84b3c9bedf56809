"""``nki.tensor``: trace-time (compile-time) constant tensors for ``nl.shared_constant``.

AWS's docs describe ``nki.tensor.zeros()``, ``identity()`` and ``arange()`` as builders of a
``TraceTimeTensor``, an array evaluated while the kernel is traced, combined with plain
arithmetic (``ntensor.zeros((64, 64), dtype=nl.int8) + 1``) and handed to
``nl.shared_constant`` (aws-neuron-sdk ``nki.language.shared_constant``). nki-library's RoPE
builds its permutation matrix from ``ntensor.identity(d_head, nl.float32)``. A host numpy
array already has exactly these semantics (trace-time values, numpy arithmetic, accepted by
``shared_constant``), so the builders return numpy arrays of the NKI dtype's host type.
"""

from __future__ import annotations

import numpy as np

from nki.lang.common import dtype_of

TraceTimeTensor = np.ndarray


def _host(dtype) -> np.dtype:
    # the host numpy type of an NKI dtype (ml_dtypes for bf16/fp8); numpy dtypes pass through
    return dtype_of(dtype).host_dtype()


def zeros(shape, dtype="float32") -> TraceTimeTensor:
    """A trace-time tensor of zeros.

    Args:
        shape: int or tuple of ints.
        dtype: an ``nki.language`` dtype (or numpy dtype).

    Example:
        ``nl.shared_constant(ntensor.zeros((64, 64), dtype=nl.int8) + 1)``
    """
    return np.zeros(shape, dtype=_host(dtype))


def identity(n: int, dtype="float32") -> TraceTimeTensor:
    """A trace-time ``n``×``n`` identity matrix.

    Example:
        ``nl.shared_constant(ntensor.identity(128, dtype=nl.int8), dtype=nl.float16)``
    """
    return np.eye(int(n), dtype=_host(dtype))


def arange(start, stop=None, step=1, dtype="int32") -> TraceTimeTensor:
    """A trace-time 1-D tensor ``start, start+step, ...`` below ``stop`` (numpy's arange).

    Example:
        ``nl.shared_constant(ntensor.arange(0, 32, 1, dtype=nl.int32), dtype=nl.float32)``
    """
    if stop is None:
        start, stop = 0, start
    return np.arange(start, stop, step).astype(_host(dtype))


__all__ = ["TraceTimeTensor", "zeros", "identity", "arange"]
