"""Legacy ``nl`` constants: ``sizeinbytes``."""

from __future__ import annotations

from nki.lang.indexing import as_dtype


def sizeinbytes(dtype) -> int:
    """Bytes per element of ``dtype``.

    Example:
        >>> sizeinbytes(nl.bfloat16)   # doctest: +SKIP
        2
    """
    return as_dtype(dtype).itemsize
