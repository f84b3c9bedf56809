"""The packaging rule for AWS's import names (nki/compat.py): a real AWS package always wins,
``import nki`` still works beside it, and installing or uninstalling ours never touches its
files. Built for real: our wheel, installed into a fresh virtual environment that already holds
fake ``neuronxcc`` and ``torch_neuronx`` packages (ours answer to both names where they are
absent).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKES = {"neuronxcc": "AWS neuronx-cc", "torch_neuronx": "AWS torch-neuronx"}


def _run(*cmd, cwd="/") -> subprocess.CompletedProcess:
    """Run a command outside the checkout and without PYTHONPATH, which would show pip the
    checkout's own egg-info as an installed nki."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(REPO))
    (built,) = out.glob("nki-*.whl")
    return built


@pytest.fixture
def venv(tmp_path) -> tuple[Path, Path]:
    """A venv whose site-packages holds the fakes first and sees this venv's dependencies
    (numpy, numba, ...) through a plain path line to a folder of links to them: every entry of
    this venv's site-packages but its own nki, which pip would otherwise see as installed."""
    root = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", str(root))
    python = root / "bin" / "python"
    site = Path(_run(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                     "['purelib'])").stdout.strip())
    for name, owner in FAKES.items():
        (site / name).mkdir()
        (site / name / "__init__.py").write_text(f"OWNER = {owner!r}\n")
    deps = tmp_path / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(("nki", "__editable__", "_nki")):
            (deps / entry.name).symlink_to(entry)
    (site / "zz-deps.pth").write_text(f"{deps}\n")
    return python, site


def _probe(python: Path) -> str:
    code = textwrap.dedent("""
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import nki
        import neuronxcc, torch_neuronx, nki_cpu_simulator, nki.legacy
        print(neuronxcc.OWNER, "|", torch_neuronx.OWNER, "|", nki_cpu_simulator.nki is nki,
              "|", nki.legacy.jit.__module__, "|", [str(w.message) for w in caught])
    """)
    return _run(str(python), "-c", code).stdout.strip()


def test_aws_packages_win_and_survive_our_uninstall(wheel, venv):
    python, site = venv
    pip = (sys.executable, "-m", "pip", "--python", str(python))
    _run(*pip, "install", "--no-deps", "-q", str(wheel))
    assert (site / "nki-foreign-names.pth").exists()
    assert not (site / "neuron_dtypes").exists()      # no foreign top-level name of ours
    owners = _probe(python).split(" | ")
    # AWS's torch_neuronx (a fake here) wins over ours, which the wheel also carries
    assert owners[:4] == ["AWS neuronx-cc", "AWS torch-neuronx", "True", "nki.legacy.jit"]
    assert (site / "nki" / "foreign-names" / "torch_neuronx" / "__init__.py").exists()
    assert "AWS's neuronx-cc, torch-neuronx is installed" in owners[4]

    _run(*pip, "uninstall", "-y", "-q", "nki")
    for name, owner in FAKES.items():
        assert (site / name / "__init__.py").read_text() == f"OWNER = {owner!r}\n"
    # ours are gone (only run-time caches of ours may stay behind, never a source file)
    assert not list(site.glob("nki/**/*.py")) and not (site / "nki-foreign-names.pth").exists()


def test_our_names_answer_when_aws_is_absent(wheel, venv):
    python, site = venv
    for name in FAKES:
        (site / name / "__init__.py").unlink()
        (site / name).rmdir()
    _run(sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
         str(wheel))
    # the x4 dtypes' C source ships too: the installed copy builds (or finds) its extension
    code = ("import neuronxcc.nki as n, nki.legacy, neuron_dtypes, nki.host_dtypes, nki.ir; "
            "print(n is nki.legacy, neuron_dtypes is nki.host_dtypes, nki.ir.packed.NATIVE)")
    assert _run(str(python), "-c", code).stdout.split() == ["True"] * 3
    # torch_neuronx is ours: the torch bridge's names, and its import enables the device
    code = ("import torch, torch_neuronx, nki.torch.neuronx as ours; "
            "print(torch_neuronx is ours, torch_neuronx.nki_op is ours.nki_op, "
            "torch.ones(1, device='neuron').device.type)")
    assert _run(str(python), "-c", code).stdout.split() == ["True", "True", "neuron"]
