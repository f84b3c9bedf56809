"""nki: AWS's Neuron Kernel Interface, simulated exactly and checked, on any CPU.

    import nki, nki.language as nl, nki.isa as nisa

    @nki.jit
    def kernel(x): ...
"""

from nki.cost.benchmark import benchmark as _cost_benchmark
from nki.cost.estimate import Estimate, estimate
from nki.errors import (
                        NkiCapacityError,
                        NkiError,
                        NkiRuntimeError,
                        NkiUnsupportedError,
                        NkiValidationError,
)
from nki.ir.types import DType
from nki.jit.kernel import Kernel, jit, simulate, simulate_kernel
from nki.jit.multirank import multi_rank_execute, multi_rank_simulate

# AWS's nki_cpu_simulator spells nki.simulate ``cpu_simulate`` (nki-library's harness calls
# ``nki.cpu_simulate(kernel)[lnc](**inputs)``)
cpu_simulate = simulate



def benchmark(kernel=None, **options):
    """``nki.benchmark(target="trn2")(kernel)``: calls report the cost model's latency in
    AWS's shape, ``k.benchmark_result.nc_latency.get_latency_percentile(50)`` (µs); see
    ``nki.cost.benchmark`` (``save_trace_name=``, ``run=``).

    Example:
        >>> bench = nki.benchmark(target="trn2")(kernel)   # doctest: +SKIP
        >>> bench(a, b)                                    # doctest: +SKIP
        >>> bench.benchmark_result.nc_latency.get_latency_percentile(50)  # doctest: +SKIP
    """
    return _cost_benchmark(kernel, as_kernel=jit, **options)


# The type of nl.float32 & co.: AWS's nki-library annotates dtype parameters `nki.dtype`.
dtype = DType

__version__ = "0.1.0"

# AWS's own distributions beside ours: their import names win (nki/compat.py); say so once
from nki.compat import warn_once_if_aws_installed as _warn_once_if_aws_installed  # noqa: E402

_warn_once_if_aws_installed()

__all__ = ["jit", "simulate", "cpu_simulate", "simulate_kernel", "multi_rank_simulate",
           "estimate", "Estimate", "benchmark",
           "multi_rank_execute", "Kernel", "dtype", "NkiError",
           "NkiValidationError", "NkiRuntimeError", "NkiCapacityError", "NkiUnsupportedError",
           "__version__"]
