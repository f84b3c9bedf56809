"""An opt-in pytest plugin that lets AWS's nki-library test suite start against ``nki``.

Run it from an nki-library checkout (never committed here)::

    pytest test/integration --test-mode simulation -p nki.testing.nki_library

The suite's simulation mode imports AWS's ``nki_cpu_simulator`` and ``neuron_dtypes``, which
``nki`` answers to (``nki.compat``). What the public checkout still lacks, this plugin supplies
for the run, and nothing else; each item is the one allowed exception to "no monkey-patching"
(test-only, opt-in):

1. Stand-ins for modules AWS did not publish, found only when the real ones are absent (a
   finder placed *last* on ``sys.meta_path``):
   ``test.utils.scripts.remote_lock_scripts`` (``LockStatus``, ``LockResult``: the suite's
   remote core locking, which simulation never reaches), ``test.utils.perf_analysis_private``
   (``analyze_trace``: hardware profile analysis; raises if called) and
   ``neuronxcc.starfish.support.dtype`` (``static_cast``, imported by ``test_qkv_cte``: the
   same function as ``neuron_dtypes.static_cast``).
2. ``Orchestrator._compiled_kernel = None`` as a class default: in simulation mode the
   harness never sets it, and ``_rename_neff_outputs_to_python_names`` reads it.
3. ``Orchestrator._run_simulator_inference`` for multi-rank tests only
   (``InferenceArgs.collective_ranks > 1``): the suite's ``simulate_kernel`` takes one input
   dict, so a ``PerRankLazyInputGenerator`` (or one dict meant for every rank) never reaches
   the ranks. Those tests run on ``nki.multi_rank_simulate`` with each rank's inputs, and
   each rank's outputs are dumped to ``infer_result/output_worker_{r}/``, where the suite's
   ``OutputValidator`` looks for them. Single-rank tests keep the suite's own code path.
4. After a failed test, pytest's record of the failure (``sys.last_value`` and friends, kept
   for post-mortem debugging) is dropped and the cyclic garbage collector run: the
   traceback holds the failed test's frames, and with them its inputs, golden and outputs
   (GiBs in output_proj_cte); frames that hold their own exception are a reference cycle
   that the collector, counting objects rather than bytes, may not reach for many tests. So
   under the suite's per-process memory limit the tests after a large failure failed with
   MemoryError.

And one option of its own, not a patch: ``--nki-sample K[:OFFSET]`` runs every K-th collected
test, so the whole default selection's time can be estimated from a slice of it.
"""

from __future__ import annotations

import enum
import gc
import importlib.abc
import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from types import ModuleType

import numpy as np
import pytest


class LockStatus(enum.Enum):
    """Outcomes of the suite's remote core-lock helper, with the helper's exit codes."""

    ALLOCATED = 0
    RELEASED = 1
    DRAINED = 2
    UNDRAINED = 3
    DRAINING = 4
    NO_CORES = 5
    FLOCK_TIMEOUT = 6
    ERROR = 7

    @property
    def exit_code(self) -> int:
        return self.value

    @classmethod
    def from_exit_code(cls, code: int) -> LockStatus:
        return next((s for s in cls if s.value == code), cls.ERROR)


@dataclass
class LockResult:
    """What the remote core-lock helper reports."""

    status: LockStatus
    cores: list = field(default_factory=list)
    max_lock_expiry: float | None = None

    @classmethod
    def from_json(cls, text: str) -> LockResult:
        data = json.loads(text)
        return cls(LockStatus[data.get("status", "ERROR")], data.get("cores", []),
                   data.get("max_lock_expiry"))


def analyze_trace(**kwargs) -> None:
    """AWS's private analysis of hardware profiles: there is none on a CPU."""
    raise NotImplementedError("test.utils.perf_analysis_private is AWS-internal; hardware "
                              "profile analysis does not run in simulation mode")


def _lock_scripts(module: ModuleType) -> None:
    module.LockStatus, module.LockResult = LockStatus, LockResult


def _perf_analysis(module: ModuleType) -> None:
    module.analyze_trace = analyze_trace


def _starfish_dtype(module: ModuleType) -> None:
    from nki.host_dtypes import static_cast

    module.static_cast = static_cast


def _package(module: ModuleType) -> None:
    module.__path__ = []


STAND_INS = {
    "test.utils.scripts": _package,
    "test.utils.scripts.remote_lock_scripts": _lock_scripts,
    "test.utils.perf_analysis_private": _perf_analysis,
    "neuronxcc.starfish": _package,
    "neuronxcc.starfish.support": _package,
    "neuronxcc.starfish.support.dtype": _starfish_dtype,
}


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the names of ``STAND_INS`` that no earlier finder found."""

    def find_spec(self, name, path=None, target=None):
        if name not in STAND_INS:
            return None
        return importlib.util.spec_from_loader(name, self,
                                               is_package=STAND_INS[name] is _package)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        STAND_INS[module.__name__](module)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """Before the suite's conftest imports its utilities: make the stand-ins findable."""
    if not any(isinstance(f, _StandInFinder) for f in sys.meta_path):
        sys.meta_path.append(_StandInFinder())


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    """After the suite's conftest is loaded: the harness's missing attribute default."""
    orchestrator = sys.modules.get("test.utils.test_orchestrator")
    if orchestrator is not None and not hasattr(orchestrator.Orchestrator, "_compiled_kernel"):
        orchestrator.Orchestrator._compiled_kernel = None
    if orchestrator is not None and not getattr(orchestrator.Orchestrator,
                                                "_nki_multi_rank_routed", False):
        _route_multi_rank(orchestrator)


_LAST_FAILURE = ("last_type", "last_value", "last_traceback", "last_exc")


def pytest_addoption(parser):
    """``--nki-sample K[:OFFSET]``: run only every K-th collected test (from OFFSET), to
    estimate the whole selection's time from a slice of it (not a patch of the suite)."""
    parser.addoption("--nki-sample", default=None, metavar="K[:OFFSET]",
                     help="run every K-th collected test only (nki's time estimate)")


def pytest_collection_modifyitems(config, items):
    """``--nki-sample``: keep every K-th item, in collection order (ids of the suite's
    generated sweeps change between collections, so sampling by id does not work)."""
    spec = config.getoption("--nki-sample")
    if not spec:
        return
    k, _, offset = spec.partition(":")
    step, start = int(k), int(offset or 0)
    if step < 1 or not 0 <= start < step:
        raise pytest.UsageError(f"--nki-sample {spec}: need K >= 1 and 0 <= OFFSET < K")
    kept = items[start::step]
    dropped = [item for i, item in enumerate(items) if i % step != start]
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    """Item 4 of the module docstring: release a failed test's frames (and arrays)."""
    if not hasattr(sys, "last_value"):
        return                       # the test passed: nothing held, no collection to pay
    for name in _LAST_FAILURE:
        if hasattr(sys, name):
            delattr(sys, name)
    gc.collect()


def _route_multi_rank(harness: ModuleType) -> None:
    """Patch 3 of the module docstring: multi-rank tests go to ``nki.multi_rank_simulate``.
    ``harness`` is the suite's ``test.utils.test_orchestrator`` module."""
    single_rank = harness.Orchestrator._run_simulator_inference

    def _run_simulator_inference(self, kernel_under_test):
        if kernel_under_test.inference_args.collective_ranks <= 1:
            return single_rank(self, kernel_under_test)
        try:
            with self.emitter.get_collector().timer(harness.MetricName.SIMULATION_TIME):
                per_rank = simulate_ranks(kernel_under_test)
        except Exception as e:  # the suite's own wrapping of a failed inference
            raise harness.InferenceException(str(e)) from e
        root = os.path.join(self.fs_config.artifacts_output_directory_path,
                            harness.INF_ARTIFACT_DIR_NAME)
        for rank, tensors in enumerate(per_rank):
            self.__dump_tensors__(os.path.join(root, f"output_worker_{rank}"), tensors,
                                  lambda name: name)
        return root

    harness.Orchestrator._run_simulator_inference = _run_simulator_inference
    harness.Orchestrator._nki_multi_rank_routed = True


def simulate_ranks(kernel_under_test) -> list[dict]:
    """Each rank's outputs of a multi-rank test, named and typed like its golden tensors
    (the suite's ``run_simulator_inference``, once per rank)."""
    from test.utils.common_dataclasses import PerRankLazyInputGenerator, normalize_golden_output

    import nki

    world = kernel_under_test.inference_args.collective_ranks
    compiler = kernel_under_test.compiler_input
    os.environ["NKI_NC_VERSION"] = compiler.platform_target.get_nc_gen()
    given = kernel_under_test.kernel_input or {}
    inputs = [given.for_rank(r) if isinstance(given, PerRankLazyInputGenerator) else given
              for r in range(world)]
    pairs = [((), {k.removesuffix(".must_alias_input"): v for k, v in rank_inputs.items()})
             for rank_inputs in inputs]
    kernel = kernel_under_test.kernel_func
    if compiler.logical_nc_config > 1:
        kernel = kernel[compiler.logical_nc_config]
    results = nki.multi_rank_simulate(kernel, world_size=world, per_rank_inputs=pairs)
    golden_output = kernel_under_test.validation_args.golden_output
    per_rank = []
    for rank, result in enumerate(results):
        outputs = [] if result is None else list(result) if isinstance(result, (list, tuple)) \
            else [result]
        golden = normalize_golden_output(golden_output, rank_id=rank)
        if len(outputs) != len(golden):
            raise RuntimeError(f"rank {rank}: kernel returned {len(outputs)} outputs but "
                               f"expected {len(golden)} ({list(golden)})")
        per_rank.append({name: np.asarray(out, dtype=g.dtype)
                         for (name, g), out in zip(golden.items(), outputs)})
    return per_rank
