"""The import rule of ARCHITECTURE.md: ir ← lang ← jit → sim → ir, torch only in nki/torch."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "nki"

# package -> nki packages it must never import (jit reaches nki.torch only lazily, when a
# torch tensor is passed in, so the core never pays for importing torch)
FORBIDDEN = {
    "ir": {"lang", "jit", "sim", "legacy", "torch"},
    "lang": {"jit", "sim", "legacy", "torch"},
    "jit": {"legacy"},
    "sim": {"lang", "jit", "legacy", "torch"},
    "legacy": {"sim", "torch"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_one_way_imports():
    bad = []
    for pkg, forbidden in FORBIDDEN.items():
        for path in (ROOT / pkg).rglob("*.py"):
            for mod in _imports(path):
                parts = mod.split(".")
                if parts[0] == "nki" and len(parts) > 1 and parts[1] in forbidden:
                    bad.append(f"{path.relative_to(ROOT.parent)} imports {mod}")
    assert not bad, "wrong-way imports:\n" + "\n".join(bad)


# modules outside nki/torch that may import torch, with why: nothing in the core imports them
TORCH_ALLOWED = {
    "demo.py": "the showcase (python -m nki.demo) times torch's CPU kernels when installed",
}


def test_torch_only_in_bridge():
    bad = [str(p.relative_to(ROOT.parent)) for p in ROOT.rglob("*.py")
           if "torch" not in p.relative_to(ROOT).parts[:1]
           and str(p.relative_to(ROOT)) not in TORCH_ALLOWED
           and any(m == "torch" or m.startswith("torch.") for m in _imports(p))]
    assert not bad, f"torch imported outside nki/torch: {bad}"


def test_core_never_imports_the_torch_exceptions():
    for name in TORCH_ALLOWED:
        module = "nki." + name.removesuffix(".py").replace("/", ".")
        users = [str(p.relative_to(ROOT.parent)) for p in ROOT.rglob("*.py")
                 if module in _imports(p)]
        assert not users, f"{module} imports torch and must stay out of the core: {users}"


FOREIGN = ROOT / "foreign-names"   # AWS's import names (nki/compat.py)


def test_only_the_neuronxcc_alias_imports_the_legacy_dialect():
    """nki.legacy sits on top of nki.lang/nki.jit; nothing else in nki reaches into it but
    the ``neuronxcc`` alias of AWS's import name."""
    users = [str(p.relative_to(ROOT.parent)) for p in ROOT.rglob("*.py")
             if p.relative_to(ROOT).parts[0] not in ("legacy", "foreign-names")
             and any(m == "nki.legacy" or m.startswith("nki.legacy.") for m in _imports(p))]
    assert not users, f"nki.legacy imported from inside nki: {users}"


def test_foreign_names_only_alias():
    """Each package under AWS's import names is an alias of ours: no function or class of its
    own, and no torch unless it is the torch bridge's name (torch_neuronx)."""
    packages = sorted(p.name for p in FOREIGN.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert {"neuronxcc", "nki_cpu_simulator", "neuron_dtypes", "torch_neuronx"} <= set(packages)
    for path in FOREIGN.rglob("*.py"):
        tree = ast.parse(path.read_text())
        logic = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        assert not logic, f"{path.relative_to(ROOT.parent)} defines {logic[0].name}"
        if path.relative_to(FOREIGN).parts[0] != "torch_neuronx":
            torch = [m for m in _imports(path) if m == "torch" or m.startswith("torch.")]
            assert not torch, f"{path.relative_to(ROOT.parent)} imports {torch}"
