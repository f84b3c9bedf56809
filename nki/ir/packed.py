"""Host numpy dtypes of the packed MX types (``float8_e4m3fn_x4``, ``float8_e5m2_x4``,
``float4_e2m1fn_x4``): four fp8 or fp4 values in one 4- or 2-byte element, element 0 in the
lowest bits, as nki-library's unpack helpers read them.

They are numpy user dtypes registered by a small C extension (:mod:`nki.hostx4`), so
``str(arr.dtype) == "float8_e4m3fn_x4"``, ``arr.view(np.uint32)`` and
``arr.astype(np.uint32)`` copy the bits, ``==`` compares bits, and arithmetic or a float cast
raises ``TypeError`` (``nki.host_dtypes.static_cast`` converts values). Without a C compiler
they fall back to opaque void dtypes (one warning says what then does not work).

Example:
    >>> import numpy as np
    >>> a = np.zeros((2, 3), BY_NAME["float8_e4m3fn_x4"])
    >>> a.view(np.uint32).shape
    (2, 3)
"""

from __future__ import annotations

import warnings

import numpy as np

from nki import hostx4

WIDTHS = {"float8_e4m3fn_x4": 4, "float8_e5m2_x4": 4, "float4_e2m1fn_x4": 2}


def _void_dtypes() -> dict[str, np.dtype]:
    """The fallback: a void dtype per type, told apart only by its scalar type."""
    def scalar(name: str) -> type:
        return type(name, (np.void,), {"__doc__": f"A host element of {name}: four values "
                                                  "packed."})

    return {name: np.dtype((scalar(name), width)) for name, width in WIDTHS.items()}


def _host_dtypes() -> tuple[dict[str, np.dtype], bool]:
    try:
        ext = hostx4.load()
    except hostx4.BuildError as e:
        warnings.warn(
            f"nki could not build its MX x4 numpy dtypes ({e}). float8_e4m3fn_x4, "
            "float8_e5m2_x4 and float4_e2m1fn_x4 fall back to void dtypes: their str() is "
            "'|V4'/'|V2' (so checks like \"'x4' in str(arr.dtype)\" fail), .astype(np.uint32) "
            "and == raise (use .view(np.uint32)); static_cast and kernels still work. "
            "Install gcc or set CC to a C compiler.", RuntimeWarning, stacklevel=3)
        return _void_dtypes(), False
    return {name: np.dtype(getattr(ext, name)) for name in WIDTHS}, True


BY_NAME, NATIVE = _host_dtypes()    # NATIVE: the C extension's dtypes (not the fallback)
float8_e4m3fn_x4 = BY_NAME["float8_e4m3fn_x4"]
float8_e5m2_x4 = BY_NAME["float8_e5m2_x4"]
float4_e2m1fn_x4 = BY_NAME["float4_e2m1fn_x4"]


def packed_name(dtype: np.dtype) -> str | None:
    """The MX name of a host dtype, or None when it is not a packed MX dtype."""
    scalar_type = np.dtype(dtype).type
    known = BY_NAME.get(scalar_type.__name__)
    return scalar_type.__name__ if known is not None and known.type is scalar_type else None


def dtype_key(dtype: np.dtype) -> str:
    """A host dtype's name for cache and specialization keys: the MX name of a packed dtype
    even in the fallback, where ``str()`` gives ``|V4`` for both fp8 kinds."""
    return packed_name(dtype) or str(dtype)
