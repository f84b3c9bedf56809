"""``neuronxcc.nki.isa`` (``nisa``): the legacy instruction set (calls return tiles)."""

from nki.isa import (  # noqa: F401
    dge_mode,
    engine,
    fp32,
    get_nc_version,
    gpsimd_engine,
    nc_version,
    oob_mode,
    reduce_cmd,
    scalar_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from nki.legacy.isa import *  # noqa: F403
from nki.legacy.isa import __all__ as _legacy_all

__all__ = _legacy_all + ["dge_mode", "engine", "fp32", "get_nc_version", "gpsimd_engine",
                         "nc_version", "oob_mode", "reduce_cmd", "scalar_engine",
                         "tensor_engine", "unknown_engine", "vector_engine"]
