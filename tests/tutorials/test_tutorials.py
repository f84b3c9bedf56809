"""Every numbered tutorial runs to the end and passes its own check.

Each tutorial is loaded from its file and its ``main()`` called in this process (numba and
nki's compiled helpers are loaded once for all of them); ``main()`` returns 0 and prints
``tutorial NN OK`` only after its result matched numpy/torch.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

TUTORIALS = Path(__file__).resolve().parents[2] / "tutorials"
NUMBERED = sorted(p for p in TUTORIALS.glob("*.py") if re.match(r"\d\d_", p.name))
NEEDS_TORCH = {"10_torch_gpt", "12_torchneuron", "13_torchneuron_distributed"}


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"tutorial_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_tutorial_is_listed_in_the_readme():
    readme = (TUTORIALS / "README.md").read_text()
    missing = [p.name for p in NUMBERED if p.name not in readme]
    assert not missing, f"tutorials missing from tutorials/README.md: {missing}"


@pytest.mark.parametrize("path", NUMBERED, ids=[p.stem for p in NUMBERED])
def test_tutorial_runs_and_checks(path: Path, capsys):
    if path.stem in NEEDS_TORCH:
        pytest.importorskip("torch")
    module = _load(path)
    assert module.main() == 0
    out = capsys.readouterr().out
    assert f"tutorial {path.name[:2]} OK" in out, out[-2000:]
