"""The everyday command line: start-up without torch, progress a person can follow, tables that fit,
and the housekeeping commands (version, ROBUST_TUNE_DB, studies delete, completion, plain help)."""
import io
import sqlite3
import subprocess
import sys

import pytest
from rich.console import Console

from cli.render import print_table
from cli.study import StudyView
from pipeline.report.study_tables import best_table, studies_table, trials_table
from pipeline.store import Store
from pipeline.search.study import StudyStarted, TrialEnded, TrialStarted, run_study
from pipeline.spec.study_config import load_study
from pipeline.training.trainer import EpochEnd
from helpers import add_study, robust_tune, study_file, unwrapped




@pytest.fixture
def stored(tmp_path) -> str:
    """A database with two finished studies (rows written through the store, no training)."""
    db = str(tmp_path / "stored.db")
    store = Store(db)
    add_study(store, "a-study-with-a-long-name-users-type", runs=[({"alpha": 0.1, "T": 3, "eta": 2.0}, (0.8, 0.7))])
    add_study(store, "b", method="ls", runs=[({"alpha": 0.2}, (0.9, 0.8)), ({"alpha": 0.3}, None)])
    return db


@pytest.mark.parametrize("args", [["--help"], ["methods"], ["studies"], ["report"], ["report", "--all-trials"],
                                  ["data", "prepare", "--help"], ["studies", "--help"], ["export", "--help"],
                                  ["bench", "--help"], ["bench", "search", "--help"], ["bench", "study", "--help"]])
def test_reading_commands_never_import_torch_ax_or_mlflow_nor_sqlalchemy_without_a_database_to_read(stored, args):
    reads = args[0] in ("studies", "report") and "--help" not in args
    probe = ("import sys\nfrom cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
             "    code = e.code\nprint(code, sorted(m for m in ('torch', 'torchvision', 'ax', 'mlflow', 'sqlalchemy') "
             "if m in sys.modules), file=sys.stderr)")
    db = ["--db", stored] if reads else []
    done = subprocess.run([sys.executable, "-c", probe, *args, *db], capture_output=True, text=True, timeout=120)
    assert done.stderr.splitlines()[-1] == ("0 ['sqlalchemy']" if reads else "0 []"), done.stderr


def test_reading_a_missing_database_creates_nothing(tmp_path):
    for command in ("studies", "report"):
        done = robust_tune(command, "--db", str(tmp_path / "none" / "x.db"))
        assert done.returncode == 2 and "no database" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_run_into_a_log_prints_one_event_per_trial_numbered_as_the_tables(tmp_path):
    db = str(tmp_path / "log.db")
    done = robust_tune("run", str(study_file(tmp_path, trials=2)), "--db", db, "--device", "cpu",
                       "--log-file", str(tmp_path / "ax.log"))
    assert done.returncode == 0, done.stderr
    assert all(len(line) <= 80 for line in done.stderr.splitlines())  # wrapped to 80 columns on a pipe
    lines = unwrapped(done.stderr).splitlines()
    assert lines[0] == "examples per split and class:" and lines[1].startswith("train ")  # once, before the trials
    lines = lines[lines.index("study tiny: budget 2 trials"):]
    assert lines[1].startswith("trial 0 (1 of 2) completed: objective ") and "T=" in lines[1] and " s, " in lines[1]
    assert lines[2].startswith("trial 1 (2 of 2) completed: ") and "best " in lines[2] and "(trial " in lines[2]
    listed = robust_tune("report", "--db", db, "--all-trials", "--format", "csv").stdout
    assert [row.split(",")[0] for row in listed.splitlines() if row[:1].isdigit()] == ["0", "1"]


def test_the_live_view_shows_clocks_the_epoch_count_and_keeps_one_numbering():
    view = StudyView(fixed_epochs=2)
    console = Console(file=io.StringIO(), width=80, force_terminal=False)
    view.on_event(StudyStarted("tiny", 0, 3, False, []))
    view.on_event(TrialStarted(4, 1, 3, {"alpha": 0.25, "T": 2}))
    console.print(view)
    first = console.file.getvalue()
    assert "study tiny: elapsed 0:00, left ?" in first and "trial 4 (1 of 3), running 0:00: alpha=0.25" in first
    assert "0/2" in first  # the first trial already shows its epochs
    view.on_event(EpochEnd(1, 2, 0.5, 0.75, 0.1))
    line = view.on_event(TrialEnded(4, "completed", 0.75, None, (0.75, 4, {"alpha": 0.25, "T": 2})))
    assert line.startswith("trial 4 (1 of 3) completed: objective 75.0%")
    console.print(view)
    after = console.file.getvalue()[len(first):]
    assert "left ~" in after and "best so far: 75.0% (trial 4" in after


def test_tables_fit_120_columns_and_names_are_never_cut(tmp_path):
    store = Store(str(tmp_path / "wide.db"))
    for i, method in enumerate(("gils", "ls", "erm")):
        add_study(store, f"digits-{method}-resnet18-seed-{i}-long-study-name", method=method,
                  runs=[({"alpha": 0.1, "T": 3, "eta": 2.0}, (0.8 + i / 100, 0.7)), ({"alpha": 0.2}, None)])
    wide = Console(file=io.StringIO(), width=120)
    print_table(best_table(store), wide)
    grid = wide.file.getvalue()
    assert max(map(len, grid.splitlines())) <= 120
    assert any("val acc" in line and "study" in line for line in grid.splitlines())  # one header row: a grid
    assert "network resnet18" in next(line for line in grid.splitlines() if line.startswith("all rows: "))
    for i, method in enumerate(("gils", "ls", "erm")):
        assert f"digits-{method}-resnet18-seed-{i}-long-study-name" in grid

    # One failed trial's long error is cut; the trial list stays a grid.
    with store.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE rt_trials SET error = ? WHERE status = 'failed'", ("x" * 300,))
    wide = Console(file=io.StringIO(), width=120)
    print_table(trials_table(store, "digits-gils-resnet18-seed-0-long-study-name"), wide)
    listed = wide.file.getvalue().splitlines()
    assert max(map(len, listed)) <= 120 and any("status" in line and "error" in line for line in listed)

    narrow = Console(file=io.StringIO(), width=80)
    print_table(studies_table(store), narrow)
    for i, method in enumerate(("gils", "ls", "erm")):
        assert f"digits-{method}-resnet18-seed-{i}-long-study-name" in narrow.file.getvalue()


def test_version_flags_and_bare_groups_print_help_without_an_error_line():
    assert robust_tune("--version").stdout.startswith("robust-tune ")
    help_text = robust_tune("train", "--help").stdout
    assert "--flip " in help_text and "<bool>" not in help_text
    for args in ([], ["data"]):
        done = robust_tune(*args)
        assert done.returncode in (0, 2) and "Usage: robust-tune" in done.stdout + done.stderr
        assert "error" not in done.stderr
    # what `--install-completion` writes for bash (the shell is named, not detected from the parent process)
    script = robust_tune(env={"_ROBUST_TUNE_COMPLETE": "source_bash"})
    assert script.returncode == 0 and "complete_bash" in script.stdout
    completed = robust_tune(env={"_ROBUST_TUNE_COMPLETE": "complete_bash", "COMP_WORDS": "robust-tune stu",
                                 "COMP_CWORD": "1"})
    assert completed.stdout.split() == ["studies"]


def test_delete_removes_one_study_and_ax_records_and_the_name_runs_again_from_scratch(tmp_path):
    db = str(tmp_path / "two.db")
    env = {"ROBUST_TUNE_DB": db}  # every --db defaults to it
    for name in ("a", "b"):  # trained in this process: the deletion is what runs as a command here
        run_study(load_study(study_file(tmp_path, name=name, trials=2)), db, "cpu", log_file=tmp_path / "ax.log")
    assert "a " in robust_tune("studies", env=env).stdout

    kept = robust_tune("studies", "delete", "a", env=env, stdin="n\n")
    assert kept.returncode == 1 and len(Store(db).all_studies()) == 2
    done = robust_tune("studies", "delete", "a", "--yes", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr

    store = Store(db)
    assert [s.name for s in store.all_studies()] == ["b"]
    assert [t.status for t in store.trials(store.study("b").id)] == ["completed", "completed"]
    with sqlite3.connect(db) as connection:
        assert [r[0] for r in connection.execute("SELECT name FROM experiment_v2")] == ["b"]
        assert connection.execute("SELECT COUNT(*) FROM rt_trial_epochs").fetchone()[0] == 2
    again = run_study(load_study(study_file(tmp_path, name="a", trials=2)), db, "cpu", log_file=tmp_path / "ax.log")
    assert again.new_trials == [0, 1] and again.completed == 2  # from scratch, not resumed
    assert [t.trial_index for t in Store(db).trials(Store(db).study("a").id)] == [0, 1]
    assert robust_tune("studies", "delete", "nope", "--yes", env=env).returncode == 2


def test_startup_measurement_times_each_reading_command_against_the_baseline(stored):
    """The figures are for the README; here only that every command was timed in its own process."""
    from pipeline.bench.startup import BASELINE, measure_startup

    seconds = measure_startup(stored, rounds=1)
    assert set(seconds) == {"python -c pass", BASELINE, "robust-tune --help", "robust-tune methods",
                            "robust-tune report", "robust-tune studies"}
    assert all(value > 0 for value in seconds.values())
