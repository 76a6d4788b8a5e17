"""Every line of every command fits a terminal 80 or 120 columns wide and breaks only between words: tables,
progress and summary lines, notes, errors and the resume line after Ctrl-C, each command run as a user runs it.

The commands run with Rich taking their output for a terminal (TTY_COMPATIBLE=1): what is wrapped is wrapped
as on a terminal, live views are drawn, and the text is read with the terminal's control codes taken out, each
carriage return or newline ending a line. A word cut at a line's end is found against the same command's
output on a terminal wide enough for every line (WIDE): the last word of a line and the first of the next, put
together, make a word of that output that either alone is not.

Each runs in this process (the `cli` fixture) on that terminal: its environment, and the consoles interactive
as a terminal makes them; but for Ctrl-C, sent to a command in a process of its own."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from rich.cells import cell_len

from cli import render
from cli.main import main
from helpers import ROBUST_TUNE, study_file, wait_for_running_trial

TERMINAL = {"TTY_COMPATIBLE": "1", "TERM": "xterm", "NO_COLOR": "1", "OMP_NUM_THREADS": "1"}
CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")  # cursor moves, styles, links
WIDE = 1000
WIDTHS = (80, 120)

CAMPAIGN = """
name = "fm-campaign-with-a-longer-name"
objective = "val_balanced_accuracy"
methods = ["ls"]
replicates = 1

[data]
name = "digits"
imbalance_class = "3"
imbalance_keep = 0.1
imbalance_in = "train"

[params]
epochs = {epochs}
lr_head = {{ low = 0.01, high = 0.2, log = true }}

[budget]
trials = 2
initial = 2

[evaluate]
seeds = 2
max_seeds = 2
"""

STUDY = "epochs = 1\nalpha = { low = 0.0, high = 0.5 }"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A database with a finished campaign (its studies, re-training runs and verdict) and a study evaluated
    against two baselines, built once in this process; the study and campaign files beside it."""
    folder = tmp_path_factory.mktemp("width")
    (folder / "campaign.toml").write_text(CAMPAIGN.format(epochs=1))
    study = study_file(folder, "smoothing-on-the-digits-with-a-rare-three", "ls", STUDY, trials=2)
    common = ["--db", str(folder / "stored.db"), "--device", "cpu", "--log-file", str(folder / "ax.log")]
    for args in (["compare", str(folder / "campaign.toml")], ["run", str(study)],
                 ["evaluate", study.stem, "--seeds", "2", "--against", "erm,ls"]):
        with pytest.raises(SystemExit) as done:
            main([*args, *common])
        assert done.value.code == 0, args
    return folder


def shown(cli, monkeypatch, folder: Path, args: list[str], width: int,
          fresh: bool = False) -> subprocess.CompletedProcess:
    """The command on a terminal `width` wide, run in this process (the `cli` fixture) as in its own: Rich reads the
    terminal from the environment, and a console made on a terminal is interactive (draws live views), which this
    process's consoles, made before, are told. `fresh`: on a copy of the stored database made for this call, so that
    a command that trains finds the same state at every width."""
    args = _on_database(folder, args, width, fresh)
    with monkeypatch.context() as patch:
        for name, value in {**TERMINAL, "COLUMNS": str(width)}.items():
            patch.setenv(name, value)
        for console in (render.stdout, render.stderr):
            patch.setattr(console, "is_interactive", True)
            assert console.is_terminal and console.width == width  # else a console was made with a fixed width
        code, out, err = cli(*args)
    return subprocess.CompletedProcess(args, code, out, err)


def _on_database(folder: Path, args: list[str], width: int, fresh: bool) -> list[str]:
    """`args` with DB naming the stored database, or (`fresh`) a copy of it made for this call."""
    db = folder / "stored.db"
    if fresh:
        db = shutil.copy(db, folder / f"copy-{width}.db")
    return [str(db) if arg == "DB" else arg for arg in args]


def screen_lines(text: str) -> list[str]:
    """The lines a terminal shows of `text`: control codes out, a carriage return or a newline ending each."""
    return re.split(r"\r\n|\r|\n", CONTROL.sub("", text))


def check_fits(text: str, width: int, wide: str) -> None:
    """No line of `text` is wider than `width` and no word is cut at a line's end (see the module's docstring), but
    for a word wider than a line (a long path): alone on its line, or folded."""
    lines = screen_lines(text)
    assert [line for line in lines if cell_len(line) > width and len(line.removesuffix(" \\").split()) > 1] == [], \
        f"wider than {width}"
    words = set(CONTROL.sub("", wide).split())
    for line, following in zip(lines, lines[1:]):
        if line.split() and following.split():
            end, start = line.split()[-1], following.split()[0]
            cut = end + start in words and (end not in words or start not in words)
            assert not cut or cell_len(end + start) > width, f"{end + start!r} cut: {line!r} / {following!r}"


READING = {  # commands that only read: the same output at every width but for the layout
    "report": ["report", "--db", "DB"],
    "report --all-trials": ["report", "--db", "DB", "--all-trials"],
    "report --compare": ["report", "--db", "DB", "--compare"],
    "report --compare one study": ["report", "--db", "DB", "--compare",
                                   "smoothing-on-the-digits-with-a-rare-three"],
    "report --verdict": ["report", "--db", "DB", "--verdict", "fm-campaign-with-a-longer-name"],
    "studies": ["studies", "--db", "DB"],
    "methods": ["methods"],
    "best": ["best", "smoothing-on-the-digits-with-a-rare-three", "--db", "DB"],
    "compare, all stored": ["compare", "CAMPAIGN", "--db", "DB", "--device", "cpu"],
    "evaluate, all stored": ["evaluate", "smoothing-on-the-digits-with-a-rare-three", "--db", "DB", "--seeds",
                             "2", "--against", "erm,ls", "--device", "cpu"],
    "bench startup": ["bench", "startup", "--rounds", "1", "--db", "DB"],
}

ERRORS = {  # bad input: one line in a log, wrapped between words on a terminal
    "unknown study": ["report", "--db", "DB", "a-study-name-that-is-nowhere-in-this-database-at-all-not-even-close"],
    "unknown column": ["report", "--db", "DB", "--columns", "method,nope"],
    "unknown option": ["report", "--db", "DB", "--no-such-option-of-report-whatsoever"],
    "missing file": ["run", "a/study/file/in/a/folder/that/does/not/exist/anywhere/on/this/machine/study.toml"],
    "bad override": ["run", "STUDY", "--set", "budget.trails=6"],
    "bad value": ["run", "STUDY", "--set", "params.epochs=three"],
}


def _command(folder: Path, args: list[str]) -> list[str]:
    """`args` with CAMPAIGN and STUDY naming the stored campaign's and study's files."""
    files = {"CAMPAIGN": folder / "campaign.toml", "STUDY": folder / "smoothing-on-the-digits-with-a-rare-three.toml"}
    return [str(files[arg]) if arg in files else arg for arg in args]


_WIDE_OUTPUT: dict[tuple[Path, str], subprocess.CompletedProcess] = {}


def _wide(cli, monkeypatch, folder: Path, name: str, args: list[str]) -> subprocess.CompletedProcess:
    """The reading command `name` on a terminal WIDE columns wide, run once for both widths it is checked at."""
    if (folder, name) not in _WIDE_OUTPUT:
        _WIDE_OUTPUT[folder, name] = shown(cli, monkeypatch, folder, args, WIDE)
    return _WIDE_OUTPUT[folder, name]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", [*READING, *ERRORS])
def test_every_line_fits_the_terminal_and_breaks_between_words(folder, name, width, cli, monkeypatch):
    args = _command(folder, {**READING, **ERRORS}[name])
    done, wide = shown(cli, monkeypatch, folder, args, width), _wide(cli, monkeypatch, folder, name, args)
    assert done.returncode == wide.returncode == (2 if name in ERRORS else 0), done.stderr
    assert "Traceback" not in done.stderr
    check_fits(done.stdout, width, wide.stdout)
    check_fits(done.stderr, width, wide.stderr)
    assert not re.search(r"\d…|…[+-]?\d+\.\d", CONTROL.sub("", done.stdout))  # a number is never cut
    if name.startswith("report --compare") and width == 120:
        assert "…" not in done.stdout  # the names are whole: columns were left out instead
    if name == "methods":
        assert [line for line in screen_lines(done.stdout) if line.endswith(" ")] == []
    if name in ERRORS:
        assert len(screen_lines(wide.stderr.strip())) == 1  # one line where it fits
        assert "".join(CONTROL.sub("", done.stderr).split()) == "".join(CONTROL.sub("", wide.stderr).split())


# Commands that train, each on its own copy of the database, at 80 columns: their lines (progress, counts, summaries)
# are the same at any width, and 80 is where they break. `bench` prints its tables as `bench startup` does.
TRAINING = {
    "run": ["run", "STUDY", "--db", "DB", "--device", "cpu"],
    "evaluate": ["evaluate", "smoothing-on-the-digits-with-a-rare-three", "--db", "DB", "--seeds", "3",
                 "--against", "erm,ls", "--device", "cpu"],
    "compare": ["compare", "CAMPAIGN", "--db", "DB", "--device", "cpu", "--set", "evaluate.max_seeds=3",
                "--set", "evaluate.seeds=3"],
    "train": ["train", "--method", "ls", "-p", "epochs=1", "--device", "cpu"],
}


@pytest.mark.parametrize("name", list(TRAINING))
def test_what_a_training_command_prints_fits_the_terminal(folder, name, tmp_path, cli, monkeypatch):
    outputs = {}
    for width in (80, WIDE):
        study = study_file(tmp_path, f"a-new-study-{width}", "ls", STUDY, trials=2)
        args = [str(study) if arg == "STUDY" else arg for arg in TRAINING[name]]
        args = _command(folder, args)
        outputs[width] = shown(cli, monkeypatch, folder, args, width, fresh=True)
        assert outputs[width].returncode == 0, outputs[width].stderr
    check_fits(outputs[80].stdout, 80, outputs[WIDE].stdout)
    check_fits(outputs[80].stderr, 80, outputs[WIDE].stderr)


def _interrupted(folder: Path, args: list[str], width: int) -> str:
    """What the command prints when Ctrl-C lands while its first trial trains."""
    db = folder / f"stopped-{width}.db"
    process = subprocess.Popen([ROBUST_TUNE, *args, "--db", str(db), "--device", "cpu", "--log-file",
                                str(folder / "stopped.log")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, **TERMINAL, "COLUMNS": str(width)})
    wait_for_running_trial(process, db)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 130 and "Traceback" not in err, err
    return CONTROL.sub("", err)


@pytest.mark.parametrize("command, width", [("run", 80), ("compare", 80), ("compare", 120)])
def test_the_resume_line_after_ctrl_c_fits_and_can_be_pasted(folder, command, width, tmp_path):
    if command == "run":
        path = study_file(tmp_path, "interrupted", "ls", STUDY.replace("epochs = 1", "epochs = 50"), trials=2)
    else:
        path = tmp_path / "campaign.toml"
        path.write_text(CAMPAIGN.format(epochs=50))
    err = _interrupted(tmp_path, [command, str(path)], width)
    typed = (f"robust-tune {command} {path} --db {tmp_path / f'stopped-{width}.db'} --device cpu --log-file "
             f"{tmp_path / 'stopped.log'}")
    check_fits(err, width, typed)
    text, command = err[err.index("resume with") + len("resume with"):].split("\n", 1)
    assert text == "" and command.startswith("  robust-tune")  # the command on lines of its own, to copy
    assert re.sub(r" \\\n *", " ", command).strip() == typed  # each line but the last ends in a backslash
