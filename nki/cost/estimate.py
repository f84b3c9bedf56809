"""``nki.estimate(kernel, target="trn2")(*args)``: what the kernel would cost on Trainium.

Reads only the specialized program (IR), the spill record on it and the target's cost facts;
never runs the kernel. Deterministic: the same program gives the same numbers.
"""

from __future__ import annotations

import inspect
import warnings
from collections import defaultdict
from dataclasses import dataclass, field

from nki.cost.facts import CostFacts, cost_facts
from nki.cost.instr import COMPUTE_ENGINES, DMA
from nki.cost.prep import Prepared, prepare
from nki.cost.schedule import Timeline, schedule
from nki.cost.spills import add_spills
from nki.results import MODEL

# bump when a formula or a constant changes, so numbers across commits compare
MODEL_VERSION = "nki-cost 0.5"   # 0.5: nl.zeros starting a PSUM accumulation group is
#   folded into its first matmul; 0.4: VectorE perf modes as the trn2 guide words them
#   (no fp32 side, tensor_scalar operands aside), bf16-only fast paths, the perf-mode bus
#   VectorE shares with GpSimdE; 0.3: DMA = max(latency, descriptors + bytes / bandwidth),
# 8 partitions per DMA engine, round-robin engine sharing; 0.2: trn1 ports per memory,
# chained-instruction overhead, legacy partition broadcasts on TensorE; 0.1.1: record merges
# always shorten (a crash fix)
ENGINES = (*COMPUTE_ENGINES, DMA)


@dataclass
class CoreEstimate:
    """One core's numbers. Times in ns."""

    core: int
    latency_ns: float
    busy_ns: dict[str, float]
    flops: float
    hbm_bytes: int
    instructions: int


@dataclass
class Estimate:
    """The model's estimate of one kernel call (see ``print(est)``).

    Attributes:
        target: the generation estimated for; ``target_defaulted`` when nobody chose it.
        model_version: :data:`MODEL_VERSION`.
        latency_us: first issue to last completion, the maximum over LNC cores.
        cores: per-core numbers; ``timelines``: every executed instruction per core.
    """

    kernel: str
    target: str
    target_defaulted: bool
    model_version: str
    facts: CostFacts = field(repr=False)
    cores: list[CoreEstimate] = field(repr=False)
    preps: list[Prepared] = field(repr=False, default_factory=list)
    timelines: list[Timeline] = field(repr=False, default_factory=list)
    kind: str = MODEL   # nki.results.KernelResult: a model, not a host measurement
    order: str = "program"   # how engines take their instructions (nki.cost.schedule)

    def __repr__(self) -> str:
        return (f"Estimate({self.kernel!r}, target={self.target!r}, "
                f"latency_us={self.latency_us:.3f}, bottleneck={self.bottleneck!r}, "
                f"{self.model_version!r})")

    @property
    def latency_ns(self) -> float:
        return max((c.latency_ns for c in self.cores), default=0.0)

    @property
    def latency_us(self) -> float:
        return self.latency_ns / 1e3

    def busy_ns(self, engine: str) -> float:
        """Busy time of ``engine`` summed over cores (DMA: queue time / number of queues)."""
        return sum(c.busy_ns.get(engine, 0.0) for c in self.cores)

    def utilisation(self, engine: str) -> float:
        total = self.latency_ns * len(self.cores)
        return self.busy_ns(engine) / total if total else 0.0

    @property
    def bottleneck(self) -> str:
        """The engine busiest for the longest (DMA counts its average queue)."""
        return max(ENGINES, key=self.busy_ns)

    @property
    def flops(self) -> float:
        """TensorE matmul FLOPs (a multiply-add is 2)."""
        return sum(c.flops for c in self.cores)

    @property
    def mfu(self) -> float:
        """Matmul FLOPs over what TensorE's bf16 peak could do in the latency, all cores."""
        peak = self.facts["tensor_peak_tflops_bf16"] * 1e3 * self.latency_ns * len(self.cores)
        return self.flops / peak if peak else 0.0

    @property
    def hbm_bytes(self) -> int:
        return sum(c.hbm_bytes for c in self.cores)

    @property
    def hbm_gbps(self) -> float:
        return self.hbm_bytes / self.latency_ns if self.latency_ns else 0.0

    @property
    def hbm_peak_gbps(self) -> float:
        """The cores' share of the device's HBM bandwidth (GB/s)."""
        return (self.facts["hbm_bytes_per_ns_device"] / self.facts["neuron_cores_per_device"]
                * len(self.cores))

    def table(self) -> str:
        """The summary as text (what ``print(est)`` shows)."""
        from nki.cost.report import summary_text
        return summary_text(self)

    def __str__(self) -> str:
        return self.table()

    def by_line(self):
        """Time on the critical path per source line, longest first (a :class:`LineTable`)."""
        from nki.cost.report import by_line
        return by_line(self)

    def save_trace(self, path: str, max_events: int = 200_000) -> str:
        """Write a Chrome/Perfetto trace-event JSON (gzip when ``path`` ends in .gz)."""
        from nki.cost.trace import save_trace
        return save_trace(self, path, max_events)

    def plot(self, path: str) -> str:
        """A PNG timeline of engines and DMA queues (needs matplotlib)."""
        from nki.cost.trace import plot
        return plot(self, path)

    def tables(self) -> dict:
        """Neuron Explorer-shaped tables: ``Instruction`` rows and a ``Summary`` row."""
        from nki.cost.tables import tables
        return tables(self)

    def save_tables(self, folder: str) -> list[str]:
        """Write the tables as CSV (and Parquet when pyarrow is installed) into ``folder``."""
        from nki.cost.tables import save_tables
        return save_tables(self, folder)


def _core_estimate(prep: Prepared, tl: Timeline, facts: CostFacts) -> CoreEstimate:
    busy: dict[str, float] = defaultdict(float)
    flops = 0.0
    hbm = 0
    queues = facts["dma_queues"]
    for sidx, s, e in zip(tl.sidx, tl.start, tl.end):
        cost = prep.instrs[sidx].cost
        if cost.engine == DMA:
            busy[DMA] += cost.ns * cost.packets / queues
        elif cost.engine == "sync":
            busy["sync"] += cost.ns + cost.fixed_ns     # a barrier's wait is not work
        else:
            busy[cost.engine] += e - s
        flops += cost.flops
        hbm += cost.hbm_read + cost.hbm_write
    latency = (max(tl.end) if len(tl) else 0.0) + facts["launch_ns"]
    return CoreEstimate(tl.core, latency, dict(busy), flops, hbm, len(tl))


def estimate_spec(spec, target: str, defaulted: bool, name: str,
                  overrides: dict | None = None, backend: str = "auto",
                  trip_counts: dict | None = None, order: str = "program") -> Estimate:
    """The estimate of a specialized kernel (``Kernel.specialize``'s result); ``backend``
    and ``order`` pick the scheduler loop and its rule (see ``nki.cost.schedule.schedule``)."""
    facts = cost_facts(target).with_overrides(**(overrides or {}))
    preps = [add_spills(prepare(c.program, facts, trip_counts), facts) for c in spec.cores]
    timelines = schedule(preps, facts, backend, order)
    cores = [_core_estimate(p, t, facts) for p, t in zip(preps, timelines)]
    return Estimate(name, facts.target, defaulted, MODEL_VERSION, facts, cores, preps,
                    timelines, order=order)


def estimate(kernel, target: str | None = None, backend: str = "auto",
             trip_counts: dict | None = None, order: str = "program", **overrides):
    """``nki.estimate(kernel, target="trn2")(*args)`` -> :class:`Estimate`.

    The kernel is traced and placed for ``target`` (never run); ``kernel[2]`` estimates an
    LNC-2 launch. ``overrides`` replace cost constants (``rotation_depth=1``, see
    ``nki.cost.facts``). Without ``target`` the kernel's own target is used, with a warning.
    ``backend``: the scheduler loop, ``"numba"``, ``"python"`` or ``"auto"`` (the same
    timeline either way; numba for big programs). ``trip_counts``: a run record of the
    runtime loops whose trip counts are data, ``{"kernel.py:42": 3}`` or a list of counts
    per execution (without one such a loop is an error naming its line). ``order``:
    ``"program"`` (each engine runs its instructions in program order, the default) or
    ``"reorder"`` (a ready instruction may run in an earlier gap of its engine, as the
    compiler's instruction scheduler may move it; scheduled in Python, ~2-10x slower):
    the two bracket what a scheduler that keeps the dependencies can do.

    Example:
        >>> est = nki.estimate(matmul, target="trn2")(a, b)   # doctest: +SKIP
        >>> print(est); print(est.by_line())                  # doctest: +SKIP
    """
    kernel = _as_kernel(kernel)

    def run(*args, **kwargs) -> Estimate:
        k, chosen, defaulted = _for_target(kernel, target)
        spec = k.specialize_for_model(*args, **kwargs)
        if defaulted:
            warnings.warn(f"nki.estimate: no target given; estimating for {chosen} "
                          "(pass target='trn1'|'trn2'|'trn3')", UserWarning, stacklevel=2)
        return estimate_spec(spec, chosen, defaulted, getattr(kernel, "__name__", "kernel"),
                             overrides, backend, trip_counts, order)
    return run


def _as_kernel(kernel):
    """A kernel as ``nki.jit`` makes it; a plain Python function is traced as one."""
    if hasattr(kernel, "specialize_for_model"):
        return kernel
    if inspect.isfunction(kernel):
        from nki.jit.kernel import jit
        return jit(kernel)
    raise TypeError(f"nki.estimate: expected an @nki.jit kernel or a Python function, got "
                    f"{type(kernel).__name__}")


def _for_target(kernel, target: str | None):
    """A view of ``kernel`` specialized for ``target`` (the kernel's own when None)."""
    from nki.ir.target import get_target
    if target is None:
        explicit = kernel.options.get("target")
        chosen = get_target(kernel.settings().target).name
        return kernel, chosen, explicit is None
    chosen = get_target(target).name
    clone = type(kernel).__new__(type(kernel))
    clone.__dict__.update(kernel.__dict__)
    clone.options = {**kernel.options, "target": chosen}
    return clone, chosen, False
