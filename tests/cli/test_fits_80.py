"""What a new user reads first fits 80 and 120 columns: the command list of --help, `methods`, the counts per
class that train and run print, and progress lines (wrapped between words on a terminal, one line each in a log)."""
import io
import re
from types import SimpleNamespace

import pytest
from rich.console import Console

from cli.render import print_line
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
    return SimpleNamespace(split_counts=lambda: counts, class_names=names, thin_classes=lambda: None)


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


def test_progress_lines_wrap_between_words_on_a_terminal_and_stay_one_line_in_a_log():
    line = ("trial 3 (4 of 8) completed: objective 92.1%, 6.4 s, lr_head=0.0159  lr_backbone=0.1477  "
            "alpha=0.2001; best 92.1% (trial 3)")
    terminal, log = io.StringIO(), io.StringIO()
    print_line(Console(file=terminal, width=80, force_terminal=True, color_system=None), line, markup=False)
    print_line(Console(file=log, width=80, force_terminal=False), line, markup=False)
    wrapped = terminal.getvalue().splitlines()
    assert len(wrapped) == 2 and all(len(part) <= 80 for part in wrapped)
    assert [word for part in wrapped for word in part.split()] == line.split()  # broken only between words
    assert log.getvalue() == line + "\n"
