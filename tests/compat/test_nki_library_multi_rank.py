"""The opt-in plugin's route for nki-library's multi-rank tests (``nki.testing.nki_library``,
patch 3), replayed on a stand-in of the suite's harness (CI cannot fetch the suite): a test
with ``InferenceArgs.collective_ranks > 1`` hands the orchestrator per-rank inputs (a
``PerRankLazyInputGenerator``, or one dict for every rank); each rank's outputs must land in
``infer_result/output_worker_{r}/<name>.bin``, where the suite's ``OutputValidator`` reads
them, and single-rank tests keep the suite's own path."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl
from nki.testing import nki_library


@dataclass
class PerRankLazyInputGenerator:
    """The suite's per-rank generator: ``for_rank(r)`` calls ``generator(rank_id=r)``."""

    generator: object
    cache: dict = field(default_factory=dict)

    def for_rank(self, rank_id: int) -> dict:
        return self.cache.setdefault(rank_id, self.generator(rank_id=rank_id))


class PerRankLazyGoldenGenerator(PerRankLazyInputGenerator):
    pass


def normalize_golden_output(golden, rank_id: int = 0) -> dict:
    return golden.for_rank(rank_id) if isinstance(golden, PerRankLazyGoldenGenerator) else golden


class InferenceException(Exception):  # noqa: N818 - the suite's name
    pass


class Orchestrator:
    """What the route uses of the suite's orchestrator: its artifacts folder, a metrics
    timer, ``__dump_tensors__`` (raw ``.bin`` files) and the single-rank simulator path."""

    def __init__(self, folder: str):
        self.fs_config = SimpleNamespace(artifacts_output_directory_path=folder)
        self.emitter = SimpleNamespace(get_collector=lambda: SimpleNamespace(
            timer=lambda name: type("T", (), {"__enter__": lambda s: None,
                                               "__exit__": lambda s, *a: None})()))

    def _run_simulator_inference(self, kernel_under_test):
        return "single-rank path"

    def __dump_tensors__(self, folder, tensors, name_fn):
        os.makedirs(folder, exist_ok=True)
        for name, value in tensors.items():
            with open(os.path.join(folder, name_fn(name) + ".bin"), "wb") as f:
                f.write(value.tobytes())


@pytest.fixture
def suite(monkeypatch):
    """Stand-ins of ``test.utils.{common_dataclasses, test_orchestrator}``, routed. The route
    sets ``NKI_NC_VERSION`` for the process, as the suite's own simulator path does; registering
    it with monkeypatch first restores it, so later tests on this worker see their own target."""
    monkeypatch.setenv("NKI_NC_VERSION", "")
    data = ModuleType("test.utils.common_dataclasses")
    data.PerRankLazyInputGenerator = PerRankLazyInputGenerator
    data.normalize_golden_output = normalize_golden_output
    harness = ModuleType("test.utils.test_orchestrator")
    harness.Orchestrator = type("Orchestrator", (Orchestrator,), {})
    harness.MetricName = SimpleNamespace(SIMULATION_TIME="SimulationTime")
    harness.InferenceException = InferenceException
    harness.INF_ARTIFACT_DIR_NAME = "infer_result"
    for name in ("test", "test.utils"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or ModuleType(name))
    monkeypatch.setitem(sys.modules, "test.utils.common_dataclasses", data)
    monkeypatch.setitem(sys.modules, "test.utils.test_orchestrator", harness)
    nki_library._route_multi_rank(harness)
    return harness


@nki.jit
def all_gather_kernel(x: nl.ndarray, replica_group, num_ranks: int) -> nl.ndarray:
    """test_collectives' idiom: copy in, all-gather along dim 0 on shared HBM, copy out."""
    h, w = x.shape
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    dst = nl.ndarray((h * num_ranks, w), dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    out = nl.ndarray((h * num_ranks, w), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.all_gather(dsts=[dst], srcs=[src], replica_group=replica_group, collective_dim=0)
    nisa.dma_copy(dst=out, src=dst)
    return out


def _kernel_args(xs, lnc: int, per_rank: bool):
    world = len(xs)
    group = ncc.ReplicaGroup([list(range(world))])
    want = np.concatenate(xs)
    inputs = (PerRankLazyInputGenerator(lambda rank_id: {"x": xs[rank_id],
                                                          "replica_group": group,
                                                          "num_ranks": world})
              if per_rank else {"x": xs[0], "replica_group": group, "num_ranks": world})
    return SimpleNamespace(
        kernel_func=all_gather_kernel, kernel_input=inputs,
        compiler_input=SimpleNamespace(logical_nc_config=lnc, platform_target=SimpleNamespace(
            get_nc_gen=lambda: "gen3")),
        inference_args=SimpleNamespace(collective_ranks=world),
        validation_args=SimpleNamespace(golden_output=PerRankLazyGoldenGenerator(
            lambda rank_id: {"out": want}))), want


# both LNC cores copy x into one shared src, as the suite's kernel does: a race we report
@pytest.mark.filterwarnings("ignore::nki.errors.NkiRaceWarning")
@pytest.mark.parametrize("lnc", [1, 2])
@pytest.mark.parametrize("per_rank", [True, False])
def test_each_rank_writes_its_output_worker_folder(suite, tmp_path, lnc, per_rank):
    rng = np.random.default_rng(lnc)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    xs = [x + r if per_rank else x for r in range(2)]
    args, want = _kernel_args(xs, lnc, per_rank)
    root = suite.Orchestrator(str(tmp_path))._run_simulator_inference(args)
    for rank in range(2):
        got = np.fromfile(os.path.join(root, f"output_worker_{rank}", "out.bin"), np.float32)
        np.testing.assert_array_equal(got.reshape(want.shape), want)


def test_single_rank_tests_keep_the_suites_path(suite, tmp_path):
    args, _ = _kernel_args([np.zeros((4, 8), np.float32)], 1, False)
    assert suite.Orchestrator(str(tmp_path))._run_simulator_inference(args) == \
        "single-rank path"


def test_a_failing_rank_is_the_suites_inference_exception(suite, tmp_path):
    args, _ = _kernel_args([np.zeros((4, 8), np.float32)] * 2, 1, True)
    args.validation_args.golden_output = PerRankLazyGoldenGenerator(
        lambda rank_id: {"out": np.zeros(1), "extra": np.zeros(1)})
    with pytest.raises(InferenceException, match="returned 1 outputs but expected 2"):
        suite.Orchestrator(str(tmp_path))._run_simulator_inference(args)
