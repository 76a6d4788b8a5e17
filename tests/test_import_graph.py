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


# The layers of pipeline/, lowest first: a module imports only from its own layer or the ones before it
# (methods come after data, using its splits; training and spec share a rank, neither importing the other; bench
# measures everything below it). The base is pipeline's own modules; cli/ sits above every layer.
LAYERS = (("base",), ("data",), ("methods",), ("training", "spec"), ("store",), ("search",), ("compare",),
          ("report",), ("bench",), ("cli",))
RANK = {layer: rank for rank, names in enumerate(LAYERS) for layer in names}


def layer_of(module: str) -> str:
    """The layer of a project module: its package under pipeline/ (the base for pipeline's own modules), or cli."""
    parts = module.split(".")
    if parts[0] == "cli":
        return "cli"
    package = ROOT / "pipeline" / parts[1] if len(parts) > 1 else None
    return parts[1] if package is not None and package.is_dir() else "base"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import from a lower layer into a higher one (or across the two layers that share a rank)."""
    found = []
    for module, imported in graph.items():
        for target in imported:
            here, there = layer_of(module), layer_of(target)
            if there != here and RANK[there] >= RANK[here]:
                found.append(f"{module} ({here}) imports {target} ({there})")
    return sorted(found)


def test_every_package_of_pipeline_is_a_layer() -> None:
    packages = {path.name for path in (ROOT / "pipeline").iterdir() if (path / "__init__.py").exists()}
    assert packages == set(RANK) - {"base", "cli"}


def test_imports_run_down_the_layers_only() -> None:
    assert upward_imports(import_graph()) == []


def test_the_layer_check_finds_an_import_from_a_lower_layer_into_a_higher_one() -> None:
    graph = {"pipeline.training.trainer": {"pipeline.report.tables"}, "pipeline.report.tables": {"pipeline.errors"},
             "pipeline.data.splits": {"pipeline.methods.parts"}}
    assert upward_imports(graph) == ["pipeline.data.splits (data) imports pipeline.methods.parts (methods)",
                                     "pipeline.training.trainer (training) imports pipeline.report.tables (report)"]


def test_no_test_module_finds_files_by_its_own_location() -> None:
    """The repository, its studies and tests/fixtures come from helpers (ROOT, STUDIES, DATA), so a test module can
    move between folders and still find them."""
    found = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "tests").rglob("test_*.py"))
             if "Path(__file" + "__)" in path.read_text()]
    assert found == []


def test_code_md_draws_the_layers_in_this_order():
    """docs/design/code.md's layer diagram is this module's LAYERS: the same layers, the same ranks, in order."""
    text = (ROOT / "docs" / "design" / "code.md").read_text()
    diagram = next(line for line in text.splitlines() if line.startswith("base (pipeline/*.py) ->"))
    drawn = tuple(tuple(name.strip().split()[0].rstrip("/") for name in rank.split(","))
                  for rank in diagram.split("->"))
    assert drawn == LAYERS
