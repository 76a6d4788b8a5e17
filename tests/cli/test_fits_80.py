"""What a new user reads first fits 80 and 120 columns: the command list of --help, `methods`, the counts per
class that train and run print, and progress lines (wrapped between words: on a terminal at its width, in a log at
80)."""
import io
import shutil
import subprocess
import re
from types import SimpleNamespace

import pytest
from rich.console import Console

from cli.render import print_line, print_progress
from pipeline.data.dataset import Dataset
from helpers import robust_tune


def _commands(help_text: str) -> list[str]:
    """The lines of the command list of a --help text."""
    return help_text.split("Commands:", 1)[1].strip().splitlines()


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("group", [[], ["data"], ["data", "prepare"], ["studies"], ["bench"]])
def test_every_command_summary_in_help_is_a_whole_sentence(group, width):
    done = robust_tune(*group, "--help", env={"COLUMNS": str(width)})
    assert done.returncode == 0, done.stderr
    for line in _commands(done.stdout):
        assert len(line) <= width and line.endswith("."), line
        assert not line.endswith("...") and "…" not in line, line


def test_a_commands_own_help_keeps_its_full_text():
    done = robust_tune("compare", "--help", env={"COLUMNS": "80"})
    text = " ".join(done.stdout.split())
    assert "Tune and compare every method of a campaign." in text
    assert "only what is missing runs, so a second call trains nothing" in text


@pytest.mark.parametrize("width", [80, 120])
def test_methods_fits_the_width_and_cuts_no_word(width):
    done = robust_tune("methods", env={"COLUMNS": str(width)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= width
    assert not any("…" in line for line in lines)
    text = " ".join(re.sub(r"[│┃]", " ", done.stdout).split())
    assert "robustness: batches are drawn from softmax(beta" in text  # the meaning is there, not cut
    if width == 80:  # one block per part: a parameter's name, default and range on a line
        assert "  beta = 10.0  (valid (0, inf); study [0.1, 1000] log; widens both)" in lines


def _dataset(counts: dict[str, list[int]], names: list[str]) -> SimpleNamespace:
    """What split_summary reads of a Dataset."""
    return SimpleNamespace(split_counts=lambda: counts, class_names=names, thin_classes=lambda: None, sample=None)


def test_split_summary_never_breaks_a_class_count_at_80():
    names = [str(c) for c in range(10)]
    data = _dataset({"train": [4800 + c for c in range(10)], "val": [1200] * 10, "test": [980] * 10}, names)
    lines = Dataset.split_summary(data, width=80)
    assert all(len(line) <= 80 for line in lines)
    tokens = [token for line in lines for token in line.split()[2 if line[0] != " " else 0:]]
    assert tokens == [f"{c}:{4800 + c}" for c in range(10)] + [f"{c}:1200" for c in range(10)] + \
        [f"{c}:980" for c in range(10)]
    assert lines[1] == " " * len("train  48045  ") + "9:4809"  # continued under the first count
    assert len(Dataset.split_summary(data)) == 3  # no width (a log, a pipe): a line per split


def test_progress_lines_wrap_between_words_on_a_terminal_and_at_80_in_a_log_and_an_error_stays_one_line_there():
    line = ("trial 3 (4 of 8) completed: objective 92.1%, 6.4 s, lr_head=0.0159  lr_backbone=0.1477  "
            "alpha=0.2001; best 92.1% (trial 3) with a log at /a/rather/long/folder/name/runs/robust-tune.log")
    terminal, log, errors = io.StringIO(), io.StringIO(), io.StringIO()
    print_progress(Console(file=terminal, width=80, force_terminal=True, color_system=None), line, markup=False)
    print_progress(Console(file=log, width=200, force_terminal=False), line, markup=False)  # COLUMNS=200: still 80
    print_line(Console(file=errors, width=80, force_terminal=False), line, markup=False)
    wrapped, logged = terminal.getvalue().splitlines(), log.getvalue().splitlines()
    assert len(wrapped) == 3 and all(len(part) <= 80 for part in wrapped + logged)
    for lines in (wrapped, logged):
        assert [word for part in lines for word in part.split()] == line.split()  # broken only between words
    assert logged[0].startswith("trial 3") and all(part.startswith("  ") for part in logged[1:])  # an event a line
    assert errors.getvalue() == line + "\n"  # an error, warning or note greps whole


@pytest.mark.parametrize("command", [[], ["train"], ["run"], ["compare"]])
def test_help_at_80_columns_breaks_no_option_path_or_command_at_a_hyphen(cli, monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli(*command, "--help")
    assert code == 0
    lines = out.splitlines()
    assert not [line for line in lines if re.search(r"[\w.'/]-$", line)], out  # nothing cut after a hyphen
    assert all(len(line) <= 80 for line in lines), out
    words = out.split()
    for whole in {"run": ["--trials-per-gpu", "'robust-tune[postgres]')", "studies/quickstart.toml."],
                  "compare": ["--trials-per-gpu", "studies/digits-campaign.toml."],
                  "train": ["--study-file", "--from-study"]}.get(command[0] if command else "", []):
        assert whole in words, whole


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_every_line_make_demo_and_make_test_print_fits_80_columns():
    from helpers import ROOT

    done = subprocess.run(["make", "-n", "-B", ".venv/.installed", "demo", "test"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    printed = [line[len('echo "'):-1] if line.startswith('echo "') else line for line in done.stdout.splitlines()]
    assert printed and all(len(line) <= 80 for line in printed), [line for line in printed if len(line) > 80]
