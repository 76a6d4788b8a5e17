"""The README and docs/ pages link to each other: every relative link and anchor must lead somewhere."""
from __future__ import annotations

import re
from pathlib import Path
from helpers import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped but for - and _, spaces to -."""
    headings = re.findall(r"^#{1,6} (.+)$", page.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_readme_is_a_front_page():
    """The README stays a front page; the details live in docs/, each page linked from it."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    for page in PAGES[1:]:
        name = page.relative_to(ROOT).as_posix()
        assert f"({name})" in readme, f"{name} is not linked from the README"


def test_commands_md_lists_every_command_and_option_as_the_app_declares_them():
    from cli.main import app
    from cli.reference import MARKER, commands_reference

    (page,) = [page for page in PAGES if page.name == "commands.md"]
    text = page.read_text()
    assert MARKER in text, "docs/guide/commands.md lost its generated part: python tools/commands_doc.py"
    assert text.split(MARKER)[1] == commands_reference(app).split(MARKER)[1], \
        "docs/guide/commands.md differs from the app's options: python tools/commands_doc.py"


def test_code_md_maps_every_module_under_its_folder():
    """docs/design/code.md is the map of the code: each module of pipeline/ and cli/ is named in its folder's
    entry of the tree there, so a module added, moved or renamed without it fails here."""
    text = (ROOT / "docs" / "design" / "code.md").read_text()
    tree = text[text.index("\npipeline/ "):].split("```")[0].splitlines()
    entries: dict[str, str] = {}
    top = folder = ""
    for line in tree:
        token = line.split()[0] if line.strip() else ""
        indent = len(line) - len(line.lstrip())
        if indent == 0 and token:
            top, folder = token, token
        elif indent == 2 and token:
            folder = top + token if token.endswith("/") else top
        entries[folder] = entries.get(folder, "") + line + "\n"
    modules = [p for p in [*(ROOT / "pipeline").rglob("*.py"), *(ROOT / "cli").glob("*.py")]
               if p.name != "__init__.py" and "migrations" not in p.parts]
    unmapped = [p.relative_to(ROOT).as_posix() for p in modules
                if not re.search(rf"\b{re.escape(p.name)}\b",
                                 entries.get(p.parent.relative_to(ROOT).as_posix() + "/", ""))]
    assert not unmapped, f"modules missing from docs/design/code.md: {unmapped}"
