"""The simulator's program compiler, helper registry and register emitter import one
another in one direction only (issue 15 §7): read from the sources, every ``import``
(function-level ones included), so a lazy import cannot hide a circle."""

from __future__ import annotations

import ast
import pathlib

import nki

ROOT = pathlib.Path(nki.__file__).parent


def _module_names() -> dict[str, pathlib.Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = ("nki",) + path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(path: pathlib.Path, known: set[str]) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found & known


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), list(graph[start])
    while todo:
        m = todo.pop()
        if m == goal:
            return True
        if m not in seen:
            seen.add(m)
            todo.extend(graph.get(m, ()))
    return False


def test_compile_registry_and_control_form_no_import_circle():
    """compile -> codegen -> emitters (control) -> registry -> modules, never back."""
    mods = _module_names()
    sim = {m for m in mods if m.startswith("nki.sim.")}
    graph = {m: _imports(mods[m], sim) for m in sim}
    order = ["nki.sim.compile", "nki.sim.emit.control", "nki.sim.helpers.registry",
             "nki.sim.modules"]
    for i, later in enumerate(order):
        for earlier in order[:i]:
            assert not _reaches(graph, later, earlier), f"{later} imports {earlier}"
    assert _reaches(graph, "nki.sim.compile", "nki.sim.helpers.registry")
