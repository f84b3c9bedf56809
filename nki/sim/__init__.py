"""The simulated NeuronCore: numerics, compiled helpers, emitters, codegen, runtime."""

from nki._digest import refresh_numba_caches as _refresh
from nki.sim.compile import source_dir as _source_dir

_refresh(__import__("pathlib").Path(_source_dir()))
