"""What installing the tool brings, read from pyproject.toml and the installed packages' metadata: no package with a
top-level `tests` package that would shadow a user's own (and this suite's), and nothing that holds `requests` below
the release that fixed its last published advisory. The resolver's own answer (`pip install --dry-run .`) needs the
package index; docs/guide/commands.md gives what it picked when last measured."""
import tomllib
from importlib import metadata
import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from helpers import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SAFE_REQUESTS = "2.32.4"  # .netrc credentials leaked (CVE-2024-47081); 2.32.0 and 2.31 fixed the two before


def closure(requirements: list[str]) -> dict[str, list[Requirement]]:
    """Every distribution these requirements reach, by name, with the requirements that reached it (extras followed
    where named; a distribution not installed here ends its branch)."""
    reached: dict[str, list[Requirement]] = {}
    followed: set[tuple[str, str]] = set()  # (distribution, extra) whose requirements are queued
    todo = [(Requirement(text), "") for text in requirements]
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        reached.setdefault(name, []).append(requirement)
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for extra_name in {"", *requirement.extras} - {e for n, e in followed if n == name}:
            followed.add((name, extra_name))
            todo += [(Requirement(text), extra_name) for text in distribution.requires or []]
    return reached


def our_requirements(*extras: str) -> list[str]:
    return PYPROJECT["dependencies"] + [r for e in extras for r in PYPROJECT["optional-dependencies"][e]]


@pytest.mark.parametrize("extras", [(), ("mlflow",), ("test",)])
def test_no_dependency_installs_a_top_level_tests_package(extras):
    """autorank and baycomp did: `import tests` then found theirs, not the project's."""
    shadowing = []
    for name in closure(our_requirements(*extras)):
        try:
            files = metadata.distribution(name).files or []
        except metadata.PackageNotFoundError:
            continue
        if any(f.parts[0] in ("tests", "test") and len(f.parts) > 1 for f in files):
            shadowing.append(name)
    assert shadowing == []


@pytest.mark.parametrize("extras", [(), ("mlflow",), ("test",)])
def test_nothing_the_install_reaches_holds_requests_below_its_last_advisory_fix(extras):
    """torchattacks pinned requests~=2.25.1, and with it mlflow-skinny to 2.14: its four attacks are now the
    tool's own (pipeline/methods/attacks.py)."""
    reached = closure(our_requirements(*extras))
    assert "torchattacks" not in reached and "autorank" not in reached
    for requirement in reached.get("requests", []):
        assert SAFE_REQUESTS in SpecifierSet(str(requirement.specifier)), requirement


def test_the_mlflow_extra_asks_for_a_current_client():
    (client,) = [r for r in map(Requirement, PYPROJECT["optional-dependencies"]["mlflow"]) if r.name == "mlflow-skinny"]
    assert "2.14.3" not in client.specifier  # the release the requests pin held every install to
