"""``nki.isa`` (``nisa``): the instruction set of the current NKI dialect (dst first)."""

import enum

from nki.ir.nodes import Dependency as dependency
from nki.ir.nodes import NkiInstruction
from nki.ir.ops import DgeMode as dge_mode
from nki.ir.ops import DmaEngine as dma_engine
from nki.ir.ops import Engine as engine
from nki.ir.ops import MatmulPerfMode as matmul_perf_mode
from nki.ir.ops import OobMode as oob_mode
from nki.ir.ops import ReduceCmd as reduce_cmd
from nki.ir.target import TARGETS as _TARGETS
from nki.lang.activation import *  # noqa: F403
from nki.lang.lnc import isa_core_barrier as core_barrier
from nki.lang.lnc import isa_sendrecv as sendrecv
from nki.lang.lnc import isa_sendrecv_compute as sendrecv_compute
from nki.lang.matmul import *  # noqa: F403
from nki.lang.misc import (
    activate2,
    exponential,
    nonzero_with_count,
    sequence_bounds,
    tensor_scalar_cumulative,
    topk,
)
from nki.lang.mx import nc_matmul_mx, quantize_mx
from nki.lang.reduce import *  # noqa: F403
from nki.lang.rng import rand2, rand_get_state, rand_set_state, rng, set_rng_seed
from nki.lang.select import *  # noqa: F403
from nki.lang.tracer import active as _active
from nki.lang.vector import memset, reciprocal, tensor_copy, tensor_scalar, tensor_tensor

tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown


class nc_version(enum.IntEnum):  # noqa: N801 - NKI's spelling
    """NeuronCore generations (``nisa.nc_version.gen3`` ...). Members compare as integers
    (``get_nc_version() >= nc_version.gen3``) and carry AWS's names (``gen3.name``: nki-library's
    harness sets ``NKI_NC_VERSION`` to it)."""

    gen2 = 2
    gen3 = 3
    gen4 = 4


def get_nc_sub_version() -> int:
    """Sub-version of the generation (always 0 in the simulator)."""
    return 0


def get_nc_version() -> nc_version:
    """The generation of the target being traced (trn3 = gen4 by default)."""
    trace = _active()
    return nc_version(trace.target.nc_version if trace is not None
                      else _TARGETS["trn3"].nc_version)


class _FloatInfo:
    """``nisa.fp32.min``: the most negative finite fp32 (bits 0xff7fffff), as in ``nl.fp32``."""

    min = -3.4028234663852886e38
    max = 3.4028234663852886e38


fp32 = _FloatInfo()

# registers and indirect/dynamic DMA; this dma_copy handles indirect views and register
# offsets and hands every other call to nki.lang.dma.dma_copy
from nki.lang.control import (  # noqa: E402
    VirtualRegister,
    register_alloc,
    register_load,
    register_move,
    register_store,
)
from nki.lang.indirect import dma_compute, dma_copy, local_gather, nc_n_gather  # noqa: E402

# spellings earlier releases accepted (dtype= on tensor_copy, is_moving_zero=, ...): see
# nki/lang/releases.py and docs/releases.md
from nki.lang.releases import wrap_namespace as _wrap_namespace  # noqa: E402

_wrap_namespace(globals())

__all__ = [n for n in dir() if not n.startswith("_")]
