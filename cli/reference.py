"""Every command and option as the app declares them, as Markdown: the generated part of docs/guide/commands.md
(`python tools/commands_doc.py` writes it; a test fails when the file and the app differ). Each option reads as
its `--help` line does."""
from __future__ import annotations

from typing import Any, Iterator

import typer

MARKER = "<!-- Generated from the command-line app by tools/commands_doc.py; do not edit below this line. -->"


def _commands(group: Any, path: str) -> Iterator[tuple[str, Any]]:
    """`group` as (its full name, the command), then each of its commands, a sub-group followed by its own."""
    yield path, group
    for name, command in group.commands.items():
        if getattr(command, "hidden", False):
            continue
        if hasattr(command, "commands"):
            yield from _commands(command, f"{path} {name}")
        else:
            yield f"{path} {name}", command


def commands_reference(app: typer.Typer) -> str:
    """Every command of `app`, its groups (the app itself first) included, with its summary, then each argument and
    option as `--help` shows it."""
    from typer._click.core import Context  # the click typer bundles, whose commands these are

    root = typer.main.get_command(app)
    lines = [MARKER, "", "## Every option", "",
             "Each command's arguments and options as its `--help` gives them.", ""]
    for name, command in _commands(root, "robust-tune"):
        ctx = Context(command, info_name=name.split()[-1])
        summary = " ".join((command.help or "").split("\n\n")[0].split())
        lines += [f"### `{name}`", "", summary, ""]
        for param in command.params:
            record = None if getattr(param, "hidden", False) else param.get_help_record(ctx)
            if record is not None:
                names, help_text = record
                lines.append(f"- `{names}`: " + " ".join(help_text.replace("  [", " [").split()))
        lines.append("")
    return "\n".join(lines)
