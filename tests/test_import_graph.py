"""Data flows one way: no module of the project imports another that imports it back, counting the
imports inside functions (they run later, but they still tie the two modules together)."""
from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest
from helpers import ROOT

PACKAGES = ("pipeline", "cli")


def module_names() -> dict[str, Path]:
    """Every module of the project by its dotted name (a package by its own name)."""
    names = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The project's modules that `path` imports anywhere in it: `from a.b import c` is a.b.c when that
    is a module, else a.b."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in known:
            for alias in node.names:
                found.add(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imports_of(path, set(modules)) - {name} for name, path in modules.items()}


def test_the_project_has_no_import_cycle() -> None:
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as error:
        pytest.fail(f"import cycle: {' -> '.join(error.args[1])}")


def test_the_check_finds_a_cycle_through_an_import_inside_a_function(tmp_path: Path) -> None:
    """The check itself: two modules where one imports the other only inside a function."""
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def later():\n    from a import x\n")
    graph = {name: imports_of(tmp_path / f"{name}.py", {"a", "b"}) for name in ("a", "b")}
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(graph).prepare()


def test_no_test_module_imports_another() -> None:
    """Shared test code lives in tests/helpers.py (and fixtures in conftest.py), so a test module can move."""
    tests = ROOT / "tests"
    modules = {path.stem for path in tests.rglob("test_*.py")}
    found = [f"{path.relative_to(ROOT)} imports {name}" for path in sorted(tests.rglob("*.py"))
             for name in imports_of(path, modules)]
    assert found == []
