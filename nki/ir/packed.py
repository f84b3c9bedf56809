"""Host numpy dtypes of the packed MX types (``float8_e4m3fn_x4``, ``float8_e5m2_x4``,
``float4_e2m1fn_x4``): four fp8 or fp4 values in one 4- or 2-byte element, element 0 in the
lowest bits, as nki-library's unpack helpers read them.
"""

from __future__ import annotations

import numpy as np


def _packed_type(name: str) -> type:
    return type(name, (np.void,), {"__doc__": f"A host element of {name}: four values packed."})


float8_e4m3fn_x4 = np.dtype((_packed_type("float8_e4m3fn_x4"), 4))
float8_e5m2_x4 = np.dtype((_packed_type("float8_e5m2_x4"), 4))
float4_e2m1fn_x4 = np.dtype((_packed_type("float4_e2m1fn_x4"), 2))

BY_NAME: dict[str, np.dtype] = {d.type.__name__: d for d in
                                (float8_e4m3fn_x4, float8_e5m2_x4, float4_e2m1fn_x4)}


def packed_name(dtype: np.dtype) -> str | None:
    """The MX name of a host dtype, or None when it is not a packed MX dtype."""
    scalar_type = np.dtype(dtype).type
    known = BY_NAME.get(scalar_type.__name__)
    return scalar_type.__name__ if known is not None and known.type is scalar_type else None
