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


def click_commands() -> dict[str, object]:
    """Every command the app has, groups and the app itself included, by its full name, walked from click's tree."""
    import typer

    from cli.main import app

    found: dict[str, object] = {}
    waiting = [("robust-tune", typer.main.get_command(app))]
    while waiting:
        name, command = waiting.pop()
        if getattr(command, "hidden", False):
            continue
        found[name] = command
        waiting += [(f"{name} {sub}", child) for sub, child in getattr(command, "commands", {}).items()]
    return found


def test_commands_md_has_a_heading_for_every_command_and_every_option_under_it():
    """Checked against click's own tree, not the generator: each command (groups and their own options too)
    has its heading, and under it each of its visible options by every name."""
    text = (ROOT / "docs" / "guide" / "commands.md").read_text()
    sections = dict(re.findall(r"^### `([^`]+)`\n(.*?)(?=^### |\Z)", text, flags=re.MULTILINE | re.DOTALL))
    commands = click_commands()
    assert {"robust-tune studies", "robust-tune bench", "robust-tune data"} <= set(commands)
    missing = sorted(set(commands) - set(sections))
    assert not missing, f"commands missing from docs/guide/commands.md: {missing}"
    unlisted = [f"{name} {opt}" for name, command in commands.items() for param in command.params  # type: ignore[attr-defined]
                if param.param_type_name == "option" and not getattr(param, "hidden", False)
                for opt in param.opts if not re.search(rf"`[^`]*(?<![\w-]){re.escape(opt)}(?![\w-])", sections[name])]
    assert not unlisted, f"options missing from docs/guide/commands.md: {unlisted}"
    assert "`--wide`" in sections["robust-tune studies"]


def test_code_md_names_every_module_and_tool():
    """Each file of pipeline/, cli/ and tools/ is named in docs/design/code.md, so the map lists every tool too."""
    text = (ROOT / "docs" / "design" / "code.md").read_text()
    files = [p for folder in ("pipeline", "cli", "tools") for p in (ROOT / folder).rglob("*.py")
             if p.name != "__init__.py" and "migrations" not in p.parts]
    unnamed = [p.relative_to(ROOT).as_posix() for p in files if not re.search(rf"\b{re.escape(p.name)}\b", text)]
    assert not unnamed, f"files missing from docs/design/code.md: {unnamed}"
