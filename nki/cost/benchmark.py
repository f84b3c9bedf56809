"""``nki.benchmark``: the model's latency in AWS's result shape.

AWS's (now removed) ``nki.benchmark`` ran a kernel on a device and exposed
``k.benchmark_result.nc_latency.get_latency_percentile(50)`` in microseconds. Ours returns the
cost model's estimate in that shape: deterministic, so every percentile is the one latency.
What the host spent simulating is never called a device latency: when the kernel is run
(``run=True``, the legacy dialect's default) its host wall time is
``benchmark_result.host_wall_time_us``.

Example:
    >>> bench = nki.benchmark(target="trn2", save_trace_name="mm.json.gz")(matmul)  # doctest: +SKIP
    >>> bench(a, b)                                                     # doctest: +SKIP
    >>> bench.benchmark_result.nc_latency.get_latency_percentile(50)    # doctest: +SKIP
"""

from __future__ import annotations

import time

from nki.cost.estimate import Estimate, estimate

# AWS's benchmark keywords that change nothing in a model (there is one deterministic run)
_IGNORED = {"warmup", "iters", "save_neff_name", "additional_compile_opt", "device_count"}


class Latency:
    """``nc_latency``: the estimate's latency at every percentile (µs)."""

    def __init__(self, us: float) -> None:
        self._us = us

    def get_latency_percentile(self, p: int) -> float:
        """The model's latency in microseconds (deterministic: the same for every ``p``)."""
        if not 0 <= p <= 100:
            raise ValueError(f"percentile {p} is not in 0..100")
        return self._us


class BenchmarkResult:
    """``benchmark_result``: ``nc_latency`` (model, µs), the full ``estimate``, and the host
    wall time of the simulator run when there was one (``host_wall_time_us``, else None)."""

    def __init__(self, est: Estimate, host_wall_time_us: float | None = None) -> None:
        self.estimate = est
        self.nc_latency = Latency(est.latency_us)
        self.host_wall_time_us = host_wall_time_us


class Benchmarked:
    """A kernel whose calls estimate it (and, with ``run=True``, also run it)."""

    def __init__(self, kernel, target: str | None, save_trace_name: str | None,
                 run: bool) -> None:
        self.kernel = kernel
        self.target = target
        self.save_trace_name = save_trace_name
        self.run = run
        self.benchmark_result: BenchmarkResult | None = None

    def __getitem__(self, grid) -> Benchmarked:
        return Benchmarked(self.kernel[grid], self.target, self.save_trace_name, self.run)

    def __call__(self, *args, **kwargs):
        """Estimate the call; returns the kernel's outputs when ``run``, else None."""
        est = estimate(self.kernel, target=self.target)(*args, **kwargs)
        out, wall = None, None
        if self.run:
            t0 = time.perf_counter()
            out = self.kernel(*args, **kwargs)
            wall = (time.perf_counter() - t0) * 1e6
        self.benchmark_result = BenchmarkResult(est, wall)
        if self.save_trace_name:
            est.save_trace(self.save_trace_name)
        return out


def benchmark(kernel=None, *, target: str | None = None, save_trace_name: str | None = None,
              run: bool = False, as_kernel=None, **aws_options):
    """Decorator (or call) making a kernel report the cost model's latency.

    ``target`` picks the generation (the kernel's own, with a warning, when omitted);
    ``save_trace_name`` writes the Perfetto trace there; ``run=True`` also runs the kernel on
    the simulator and returns its outputs (else the call returns None). ``warmup``,
    ``iters`` and ``save_neff_name`` are accepted and ignored: the model has one run.
    ``as_kernel`` turns a plain function into a kernel (``nki.benchmark`` passes
    ``nki.jit``; this package never imports the jit layer).
    """
    unknown = set(aws_options) - _IGNORED
    if unknown:
        raise TypeError(f"nki.benchmark got unexpected keyword(s) {sorted(unknown)}")

    def wrap(k):
        if not hasattr(k, "specialize"):
            if as_kernel is None:
                raise TypeError(f"nki.benchmark: {k!r} is not an nki.jit kernel")
            k = as_kernel(k)
        return Benchmarked(k, target, save_trace_name, run)

    return wrap if kernel is None else wrap(kernel)
