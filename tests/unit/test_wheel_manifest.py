"""The wheel's file list in pyproject.toml names every package and every C source under
nki/ and kernels/: a package left out installs from a checkout (editable) but not from the
wheel, and the packaging test only notices in a fresh venv."""

from __future__ import annotations

import fnmatch
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

if sys.version_info < (3, 11):
    pytest.skip("tomllib is Python 3.11+", allow_module_level=True)
import tomllib  # noqa: E402


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _package_of(folder: Path) -> str:
    rel = folder.relative_to(ROOT).parts
    return ".".join(("nki", "kernels", *rel[1:]) if rel[0] == "kernels" else rel)


def _source_folders():
    for top in ("nki", "kernels"):
        for init in (ROOT / top).rglob("__init__.py"):
            if "foreign-names" not in init.parts:
                yield init.parent


def test_every_package_is_listed():
    listed = set(_setuptools()["packages"])
    missing = sorted(_package_of(f) for f in _source_folders() if _package_of(f) not in listed)
    assert not missing, f"add to [tool.setuptools] packages: {missing}"


def test_every_native_source_is_package_data():
    data = _setuptools()["package-data"]
    missing = []
    for folder in _source_folders():
        patterns = data.get(_package_of(folder), [])
        for source in folder.iterdir():
            if source.suffix in (".c", ".cpp", ".h") and not any(
                    fnmatch.fnmatch(source.name, p) for p in patterns):
                missing.append(str(source.relative_to(ROOT)))
    assert not missing, f"add to [tool.setuptools.package-data]: {missing}"
