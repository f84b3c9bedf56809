"""The GPT showcase: trained on NKI kernels, its loss curve matches the same model on CPU."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
torch = pytest.importorskip("torch")

from nki.torch import routing, showcase  # noqa: E402

torch.set_num_threads(1)
SMALL = showcase.GPTConfig(steps=10)
TUTORIAL = Path(__file__).resolve().parents[2] / "tutorials" / "10_torch_gpt.py"


def _check(result: showcase.Comparison, tol: float = 1e-3) -> None:
    assert len(result.nki) == len(result.reference) == SMALL.steps
    assert result.max_abs_diff() < tol, (result.reference, result.nki)
    assert result.nki[-1] < result.nki[0] - 0.5            # it learns


def test_model_shapes():
    model = showcase.GPT(SMALL)
    x, y = showcase.make_batches(SMALL)[0]
    assert x.shape == y.shape == (SMALL.batch, SMALL.seq)
    assert model(x).shape == (SMALL.batch, SMALL.seq, SMALL.vocab)


def test_compiled_on_cpu_matches_eager():
    result = showcase.compare(SMALL, "cpu", compile_backend="neuron")
    _check(result)
    counts = result.kernel_counts
    assert counts["matmul"] > 0
    assert counts["flash_attention"] == counts["flash_attention_bwd"] == SMALL.n_layer * SMALL.steps


@pytest.fixture
def routed(neuron):
    """The neuron device with aten ops routed to NKI kernels."""
    assert routing.enable()


def test_trains_on_neuron_like_cpu(routed):
    result = showcase.compare(SMALL, "neuron")
    _check(result)
    counts = result.kernel_counts
    # per step: 9 linear layers forward (9 matmuls) and backward (17: the LM head has no
    # bias and its input gradient is needed), 2 attention layers forward
    assert counts["matmul"] >= 26 * SMALL.steps
    steps = SMALL.n_layer * SMALL.steps
    assert counts["flash_attention"] == counts["flash_attention_bwd"] == steps


def test_trains_compiled_on_neuron(routed):
    _check(showcase.compare(SMALL, "neuron", compile_backend="neuron"))


def test_tutorial_runs():
    spec = importlib.util.spec_from_file_location("tutorial_10_torch_gpt", TUTORIAL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main() == 0
