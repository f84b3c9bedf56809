"""Legacy ``nisa`` (``neuronxcc.nki.isa``): the old instruction signatures of
:mod:`nki.legacy.isa_ops` (calls return tiles) and the enums and queries shared with the
current dialect (``nisa.engine``, ``nisa.nc_version``, ``nisa.get_nc_version``)."""

from nki.isa import (
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
from nki.legacy.isa import constants
from nki.legacy.isa_ops import *  # noqa: F403
from nki.legacy.isa_ops import __all__ as _ops_all

__all__ = _ops_all + ["dge_mode", "engine", "fp32", "get_nc_version", "gpsimd_engine",
                      "nc_version", "oob_mode", "reduce_cmd", "scalar_engine", "tensor_engine",
                      "unknown_engine", "vector_engine", "constants"]
