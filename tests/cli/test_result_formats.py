"""Every command that prints results takes --format, its help naming the values it takes, and a value it does not
take is one line (exit 2) before any work; studies prints its table as JSON or Markdown as report does."""
import json
import re

import pytest

from helpers import add_study, one_line
from pipeline.store import Store

# The commands that print results, and the --format values each takes.
FORMATS = {
    ("train",): ("table", "json"), ("methods",): ("table", "json"), ("predict",): ("table", "json"),
    ("best",): ("toml", "json"),
    ("run",): ("table", "markdown", "json"), ("evaluate",): ("table", "markdown", "json"),
    ("compare",): ("table", "markdown", "json"), ("studies",): ("table", "markdown", "json"),
    ("report",): ("table", "markdown", "csv", "latex", "json", "html"), ("bench", "steps"): ("table", "markdown"),
    ("bench", "verdict"): ("table", "markdown", "json"),
}


@pytest.mark.parametrize("command", FORMATS)
def test_each_result_command_says_which_formats_its_format_takes(command):
    from typer.main import get_command

    from cli.app import app

    found = get_command(app)
    for word in command:
        found = found.commands[word]  # type: ignore[attr-defined]
    (option,) = [p for p in found.params if "--format" in p.opts]
    named = re.findall(r"\b(table|markdown|csv|latex|json|html|toml)\b", option.help)
    assert set(named) == set(FORMATS[command]), option.help


@pytest.mark.parametrize("args", [["studies"], ["evaluate", "s"], ["compare", "c.toml"], ["run", "s.toml"]])
def test_an_unknown_format_is_one_line_before_any_work(cli, tmp_path, args):
    code, out, err = cli(*args, "--db", str(tmp_path / "none.db"), "--format", "yaml")
    assert (code, out) == (2, "") and "unknown format 'yaml'" in one_line(err)
    assert list(tmp_path.iterdir()) == []


def test_studies_prints_json_and_markdown_for_scripts_and_documents(cli, tmp_path):
    db = tmp_path / "s.db"
    add_study(Store(str(db)), "a", runs=[({"alpha": 0.1, "T": 3, "eta": 2.0}, (0.8, 0.7))])
    code, out, err = cli("studies", "--db", str(db), "--format", "json")
    assert code == 0, err
    (table,) = json.loads(out)
    assert [row["study"] for row in table["rows"]] == ["a"]
    code, out, err = cli("studies", "--db", str(db), "--format", "markdown")
    assert code == 0 and "| a |" in out and "|---|" in out


def test_methods_lists_every_part_and_its_parameters_as_json(cli):
    from pipeline.methods.declarations import FAMILIES

    code, out, err = cli("methods", "--format", "json")
    listed = json.loads(out)
    assert code == 0 and err == ""
    assert {(p["family"], p["name"]) for p in listed[1:]} == {(f, n) for f, r in FAMILIES.items() for n in r}
    gils = next(p for p in listed if p["name"] == "gils")
    assert {"parameter", "default", "valid", "study_range", "widens", "meaning"} <= set(gils["parameters"][0])
    code, out, err = cli("methods", "--format", "markdown")
    assert (code, out) == (2, "") and "unknown format 'markdown'; known: table, json" in one_line(err)
