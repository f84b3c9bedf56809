"""The simulated NeuronCore: numerics, compiled helpers, emitters, codegen, runtime."""

from nki._digest import refresh_numba_caches as _refresh

_refresh()
