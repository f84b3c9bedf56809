"""NKI 0.1 dtypes: the same NKI types, seen by numpy as their host dtypes.

In the legacy dialect ``nl.bfloat16`` and a tensor's ``.dtype`` behave like numpy dtypes:
kernels write ``np.dtype(nl.bfloat16).itemsize`` and compare ``q.dtype == np.float32``
(spec §1.10, §3.7: old numpy dtypes are accepted interchangeably). :class:`LegacyDType`
is the NKI :class:`~nki.ir.types.DType` with a numpy ``dtype`` attribute and an equality that
also accepts numpy dtypes; rules canonicalise it back to the plain ``DType``.
"""

from __future__ import annotations

import numpy as np

from nki.ir.types import BY_NAME, DType


class LegacyDType(DType):
    """An NKI dtype numpy can read (``np.dtype(nl.bfloat16)``) and compare
    (``t.dtype == np.float32``).

    Example:
        >>> np.dtype(nl.bfloat16).itemsize            # doctest: +SKIP
        2
    """

    @property
    def dtype(self) -> np.dtype:
        """The host numpy dtype (numpy reads this attribute in ``np.dtype(x)``)."""
        return self.host_dtype()

    def __eq__(self, other) -> bool:
        if isinstance(other, DType):
            return self.name == other.name
        try:
            return bool(self.host_dtype() == np.dtype(other))
        except TypeError:
            return NotImplemented

    __hash__ = DType.__hash__

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self):
        return (_legacy_named, (self.name,))


def _legacy_named(name: str) -> LegacyDType:
    return legacy_dtype(BY_NAME[name])


_LEGACY: dict[str, LegacyDType] = {}


def legacy_dtype(dt: DType) -> LegacyDType:
    """The legacy face of ``dt`` (one instance per type)."""
    found = _LEGACY.get(dt.name)
    if found is None:
        canon = BY_NAME[dt.name]
        found = _LEGACY[dt.name] = LegacyDType(canon.name, canon.code, canon.itemsize,
                                               canon.storage, canon.kind, canon.ml_name,
                                               canon.packed)
    return found
