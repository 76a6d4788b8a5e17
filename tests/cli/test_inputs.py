"""Bad input and files: nothing the user has is replaced, nothing is created by reading, one line and exit 2."""
import sqlite3
from pathlib import Path

import pytest
import torch
import torchvision

from pipeline.data.manifest import Manifest, write_manifest
from pipeline.errors import UserError
from pipeline.methods import parse_method
from pipeline.params import HParam
from pipeline.store import Store
from pipeline.spec.study_config import load_study
from helpers import add_study, study_file, one_line, snapshot


@pytest.fixture
def db(tmp_path) -> Path:
    """A real SQLite database holding one study with one completed trial."""
    path = tmp_path / "x.db"
    add_study(Store(str(path)), "s", runs=[({"alpha": 0.1, "T": 3, "eta": 2.0}, (0.8, 0.75))])
    return path


def test_report_out_never_replaces_the_database_or_an_existing_file(cli, db, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = db.read_bytes()
    for out in ("x.db", str(db), "./sub/../x.db"):  # the command, and the same file spelled otherwise
        code, out_text, err = cli("report", "--db", f"sqlite:///{db}", "--format", "csv", "--out", out, "--force")
        assert code == 2 and "is the database itself" in one_line(err) and out_text == ""
    assert db.read_bytes() == before
    other_db = tmp_path / "other.db"
    sqlite3.connect(other_db).execute("create table t (x)").connection.close()
    code, _, err = cli("report", "--db", str(db), "--format", "csv", "--out", str(other_db), "--force")
    assert code == 2 and "is a SQLite database" in one_line(err)

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    code, _, err = cli("report", "--db", str(db), "--format", "csv", "--out", str(notes))
    assert code == 2 and "already exists; pass --force" in one_line(err)
    assert notes.read_text() == "my notes\n"
    code, _, err = cli("report", "--db", str(db), "--format", "csv", "--out", str(notes), "--force")
    assert code == 0 and notes.read_text().startswith("data set,network,method")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "other.db", "x.db"]  # no temporary left
    assert db.read_bytes() == before


def test_report_out_into_a_missing_folder_is_one_line(cli, db, tmp_path):
    code, _, err = cli("report", "--db", str(db), "--out", str(tmp_path / "missing" / "table.md"))
    assert code == 2 and "does not exist" in one_line(err)
    assert not (tmp_path / "missing").exists()
    code, _, err = cli("report", "--db", str(db), "--out", str(tmp_path))
    assert code == 2 and "is a folder" in one_line(err)


def test_a_malformed_database_url_is_refused_and_creates_nothing(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for command in (["studies"], ["report"], ["run", str(study_file(tmp_path))]):
        code, _, err = cli(*command, "--db", "sqlite:/x//")
        assert code == 2 and "malformed database URL 'sqlite:/x//'" in one_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.toml"]


@pytest.mark.parametrize("form", ["path", "url"])
def test_reading_commands_create_nothing_for_a_path_or_a_url(cli, tmp_path, form):
    missing = tmp_path / "none" / "runs.db"
    db = str(missing) if form == "path" else f"sqlite:///{missing}"
    for command in ("report", "studies"):
        code, _, err = cli(command, "--db", db)
        assert code == 2 and f"no database at {missing}" in one_line(err)
    assert list(tmp_path.iterdir()) == []


def test_reading_a_database_without_the_tools_tables_changes_nothing(cli, tmp_path):
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("create table notes (x)").connection.close()
    before = other.read_bytes()
    for db in (str(other), f"sqlite:///{other}"):
        for command in ("report", "studies"):
            code, _, err = cli(command, "--db", db)
            assert code == 2 and "holds no robust-tune studies" in one_line(err)
    assert other.read_bytes() == before
    tables = sqlite3.connect(other).execute("select name from sqlite_master").fetchall()
    assert tables == [("notes",)]


@pytest.mark.parametrize("bad_path", ["../../etc/passwd", "/etc/passwd", "a/../../outside.png"])
def test_a_manifest_image_path_outside_the_root_is_refused_naming_the_line(cli, tmp_path, bad_path):
    root = tmp_path / "images"
    (root / "a").mkdir(parents=True)
    manifest = Manifest(("a", "b"), ("a/1.png", "a/2.png", bad_path, "a/3.png"), (0, 0, 1, 1),
                        (True, True, True, False), root)
    write_manifest(tmp_path / "split", manifest)
    secret = tmp_path / "outside.png"
    secret.write_text("not yours")
    code, out, err = cli("train", "--dataset", "images", "--manifest", str(tmp_path / "split"), "--image-size", "8")
    line = one_line(err)
    assert code == 2 and out == ""
    assert "images.txt, line 3" in line and f"image path {bad_path!r} is outside the image root" in line
    assert not (tmp_path / "runs").exists()  # nothing decoded or cached


def test_data_prepare_never_writes_into_the_raw_data_folder(cli, tmp_path):
    from conftest import MVTEC_POOLS, make_mvtec_tree

    root = make_mvtec_tree(tmp_path / "mvtec", "wood", MVTEC_POOLS["wood"])
    before = snapshot(root)
    for out in (root, root / "splits", root / "wood" / ".." / "x"):
        code, _, err = cli("data", "prepare", "mvtec", "--root", str(root), "--category", "wood", "--out", str(out),
                           "--force")
        assert code == 2 and "is inside the raw data folder" in one_line(err)
    assert snapshot(root) == before and not (root / "splits").exists()
    code, _, err = cli("data", "prepare", "mvtec", "--root", str(root), "--category", "wood",
                       "--out", str(tmp_path / "splits"))
    assert code == 0, err
    assert (tmp_path / "splits" / "wood" / "images.txt").is_file()


def test_every_integer_parameter_has_an_upper_bound_and_a_huge_value_is_refused(cli, tmp_path):
    every = {p.name: p for name in ("gils+hws",) for p in parse_method(name).params}
    integers = [p for p in every.values() if p.kind == "int"]
    assert {p.name for p in integers} == {"epochs", "batch_size", "lr_step", "T"}
    for p in integers:
        with pytest.raises(UserError, match=f"{p.name} must be in"):
            p.coerce(10**9)
    with pytest.raises(ValueError, match="needs a finite upper bound"):
        HParam("steps", "int", 1, "[1, inf)", "a declaration without a bound")
    code, out, err = cli("train", "--param", "epochs=1000000000")
    assert code == 2 and out == "" and "epochs must be in [1, 1000]" in one_line(err)
    huge = study_file(tmp_path, params="epochs = 1_000_000_000")
    code, _, err = cli("run", str(huge), "--db", str(tmp_path / "r.db"))
    assert code == 2 and "params.epochs: value: parameter epochs must be in [1, 1000]" in one_line(err)
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("content, message", [
    (b"a,b\n1,2\n", "is not a file written by torch.save"),  # a CSV file: torch.load raised IndexError
    (b"", "is empty"),
    ("list", "holds a list, not a state_dict"),
    ("text values", "its entry 'conv1.weight' is not a tensor but str"),
    ("resnet34", "do not fit the backbone"),
    ("pickled model", "a whole pickled model?"),
])
def test_a_bad_weights_file_is_named_before_a_study_takes_its_name(cli, tmp_path, content, message):
    weights = tmp_path / "weights.pt"
    if content == "list":
        torch.save([1, 2, 3], weights)
    elif content == "text values":
        torch.save({"conv1.weight": "not a tensor"}, weights)
    elif content == "pickled model":
        torch.save(torchvision.models.resnet18(), weights)
    elif content == "resnet34":
        torch.save(torchvision.models.resnet34().state_dict(), weights)
    else:
        weights.write_bytes(content)
    path = study_file(tmp_path, params="epochs = 1")
    path.write_text(path.read_text().replace("[method]", f'[model]\nbackbone = "resnet18"\nweights = "{weights}"\n'
                                                        "[method]"))
    db = tmp_path / "runs.db"
    code, out, err = cli("run", str(path), "--db", str(db), "--log-file", str(tmp_path / "ax.log"))
    assert code == 2 and str(weights) in one_line(err) and message in one_line(err)
    assert not db.exists()  # checked before the database is touched: the study's name is still free
    code, _, err = cli("train", "--backbone", "resnet18", "--weights", str(weights), "--param", "epochs=1")
    assert code == 2 and message in one_line(err)


GILS_QUICKSTART = """
name = "quickstart"
[data]
name = "digits"
imbalance_class = "3"
imbalance_keep = 0.05
[method]
name = "gils"
[params]
alpha = { low = 0.0, high = 0.5 }
eta = { low = 1.5, high = 3.0 }
T = { low = 1, high = 5 }
epochs = { low = 4, high = 12 }
gamma = 1e-3
lr_step = 5
[budget]
trials = 8
initial = 4
"""


def test_switching_the_quickstart_to_a_baseline_drops_what_the_baseline_does_not_take(cli, tmp_path):
    quickstart = tmp_path / "gils-quick.toml"  # a GI-LS study like the first quickstart
    quickstart.write_text(GILS_QUICKSTART)
    notes: list[str] = []
    erm = load_study(quickstart, ["method.name=erm"], on_note=notes.append)
    assert notes == ["erm does not take alpha, eta, T, gamma; dropped"]
    assert erm.method == "erm" and set(erm.search) == {"epochs"} and erm.fixed["lr_step"] == 5
    ls = load_study(quickstart, ["method.name=ls"], on_note=notes.append)
    assert notes[-1] == "ls does not take eta, T, gamma; dropped" and set(ls.search) == {"alpha", "epochs"}
    for overrides, message in [
        (["method.name=erm", "params.beta=3"], "params.beta: unknown parameter for method erm"),  # asked for: a typo
        (["method.name=erm", "params.epochs=3"], "nothing to search"),  # really nothing left to search
        (["params.betta=3"], "params.betta: unknown parameter for method gils"),  # no switch, no dropping
    ]:
        with pytest.raises(UserError, match=message):
            load_study(quickstart, overrides)
    own = tmp_path / "own.toml"
    own.write_text('name = "own"\n[method]\nname = "erm"\n[params]\nalpha = 0.1\n')
    with pytest.raises(UserError, match="params.alpha: unknown parameter for method erm"):
        load_study(own)  # a study file naming a parameter its own method lacks is a typo

    code, out, err = cli("run", str(quickstart), "--set", "method.name=erm", "--set", "name=erm-quick",
                         "--set", "budget.trials=1", "--set", "budget.initial=1",
                         "--set", "params.epochs={low=1,high=2}",
                         "--db", str(tmp_path / "runs.db"), "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    assert "note: erm does not take alpha, eta, T, gamma; dropped" in err and "1 trial(s) completed" in out
    (trial,) = Store(str(tmp_path / "runs.db")).trials(Store(str(tmp_path / "runs.db")).study("erm-quick").id)
    assert set(trial.parameters) == {"epochs"} and trial.status == "completed"


def test_a_choice_of_one_value_repeated_is_nothing_to_search(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('name = "s"\n[method]\nname = "hws"\n[params]\nimportance_sampling = { values = [true, true] }\n')
    with pytest.raises(UserError, match="at least two different choices"):
        load_study(path)


def refused(cli, folder: Path, *args: str) -> str:
    """Run a command that must be refused: exit 2, one line, nothing in `folder` created or changed."""
    before = snapshot(folder), sorted(p.relative_to(folder) for p in folder.rglob("*"))
    code, out, err = cli(*args)
    assert code == 2 and out == "", (code, out, err)
    assert (snapshot(folder), sorted(p.relative_to(folder) for p in folder.rglob("*"))) == before
    return one_line(err)


def test_counts_a_typo_makes_ruinous_are_bounded_with_the_reason(cli, db, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    huge = str(10**20)
    tiny = str(study_file(tmp_path))
    line = refused(cli, tmp_path, "run", str(study_file(tmp_path, name="huge", trials=huge)), "--db", str(db))
    assert f"budget.trials: must be between 1 and 10000, got {huge} (each trial trains" in line
    assert "budget.max_failures: must be between 1 and 10000" in refused(
        cli, tmp_path, "run", tiny, "--db", str(db), "--set", f"budget.max_failures={huge}")
    assert f"--trials must be between 1 and 10000, got {huge}" in refused(cli, tmp_path, "run", tiny, "--db",
                                                                          str(db), "--trials", huge)
    monkeypatch.setattr("pipeline.search.parallel.usable_cores", lambda: 2)
    for workers in ("3", huge):
        line = refused(cli, tmp_path, "run", tiny, "--db", str(db), "--device", "cpu", "--workers", workers)
        assert f"--workers must be at most 2, not {workers} (one trial per CPU core" in line
    line = refused(cli, tmp_path, "run", tiny, "--db", str(db), "--workers", "2", "--trials-per-gpu", huge)
    assert "--trials-per-gpu must be between 1 and 32" in line
    for seeds in (huge, "30000000"):
        line = refused(cli, tmp_path, "evaluate", "s", "--db", str(db), "--seeds", seeds)
        assert f"--seeds must be between 1 and 1000, got {seeds}" in line
    line = refused(cli, tmp_path, "evaluate", "s", "--db", str(db), "--vary", "alpha=0.1,0.2,0.10")
    assert "--vary alpha: the value 0.1 is listed twice" in line


def test_a_database_url_that_keeps_nothing_or_names_no_dialect_is_one_line(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    tiny = str(study_file(tmp_path))
    for db, message in [("sqlite://", "names an in-memory SQLite database"),
                        ("sqlite:///:memory:", "names an in-memory SQLite database"),
                        ("://", "malformed database URL '://'"),
                        ("afile/x.db", "--db afile/x.db: afile is a file, not a folder"),
                        ("sqlite:///afile/sub/x.db", "afile is a file, not a folder")]:
        assert message in refused(cli, tmp_path, "run", tiny, "--db", db, "--device", "cpu")
    assert "no database at afile/x.db" in refused(cli, tmp_path, "studies", "--db", "afile/x.db")


def test_every_output_path_under_a_file_is_refused_before_work_starts(cli, db, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    tiny = str(study_file(tmp_path))
    for args in (["run", tiny, "--db", str(db), "--log-file", "afile/x.log"],
                 ["evaluate", "s", "--db", str(db), "--log-file", "afile/x.log"],
                 ["compare", "studies/none.toml", "--log-file", "afile/sub/x.log"],
                 ["studies", "delete", "s", "--db", str(db), "--yes", "--log-file", "afile/x.log"]):
        line = refused(cli, tmp_path, *args)
        assert "--log-file afile/" in line and "afile is a file, not a folder" in line
    line = refused(cli, tmp_path, "run", tiny, "--db", str(db), "--log-file", ".")
    assert "--log-file . is a folder" in line
    line = refused(cli, tmp_path, "report", "--db", str(db), "--plots", "afile/pictures")
    assert "--plots afile/pictures: afile is a file, not a folder" in line
    line = refused(cli, tmp_path, "train", "--save", "afile/weights.pt")
    assert "--save afile/weights.pt: afile is a file, not a folder" in line
    line = refused(cli, tmp_path, "train", "--save", "missing/weights.pt")
    assert "--save missing/weights.pt: folder missing does not exist" in line


def test_a_changed_study_under_a_stored_name_is_refused_without_a_log_file(cli, db, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    changed = str(study_file(tmp_path, name="s"))
    assert "a different study named 's' is already stored" in refused(cli, tmp_path, "run", changed, "--db", str(db),
                                                                      "--device", "cpu")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("fmt", [None, "csv"])
def test_report_out_with_an_extension_naming_no_format_it_writes_is_refused(cli, db, tmp_path, fmt):
    args = ["report", "--db", str(db), "--out", str(tmp_path / "table.docx")] + (["--format", fmt] if fmt else [])
    assert "never as a .docx file; name it with one of" in refused(cli, tmp_path, *args)


def test_an_unreachable_scheduler_is_refused_before_a_study_is_created_or_locked(cli, db, tmp_path, monkeypatch):
    from conftest import free_port

    monkeypatch.chdir(tmp_path)
    scheduler = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    for args in (["run", str(study_file(tmp_path)), "--db", str(db), "--device", "cpu"],
                 ["evaluate", "s", "--db", str(db), "--device", "cpu"]):
        line = refused(cli, tmp_path, *args, "--scheduler", scheduler)
        assert f"cannot reach the Dask scheduler at {scheduler}" in line and "nothing was stored" in line


def test_an_interrupted_evaluate_names_the_stopped_runs_and_the_resume_command(cli, db, monkeypatch):
    from pipeline.compare.evaluate import RunEnded, RunStarted

    def stopped_in_the_second_run(store, plan, device, on_event, precision, runner):
        on_event(RunStarted("tuned", 0, 1, 4, 1))
        on_event(RunEnded("tuned", 0, 1, 4, 0.9, 1.0))
        on_event(RunStarted("erm", 0, 2, 4, 1))
        raise KeyboardInterrupt

    monkeypatch.setattr("pipeline.compare.evaluate.run_evaluation", stopped_in_the_second_run)
    code, _, err = cli("evaluate", "s", "--db", str(db), "--seeds", "2", "--pick", "observed", "--against", "erm",
                       "--device", "cpu", "--threads", "1")
    assert code == 130 and "Traceback" not in err and err.splitlines()[-1] == (
        "interrupted: evaluate of study s stopped run 2 (erm, seed 0), which will run again; the 1 run(s) stored "
        f"by this call are kept; resume with robust-tune evaluate s --db {db} --seeds 2 --pick observed --against "
        "erm --device cpu --threads 1")  # every option as given, --pick and --threads too


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without a GPU")
def test_evaluate_on_cuda_without_a_gpu_is_one_line_before_the_plan_or_a_lock(cli, db, tmp_path):
    line = refused(cli, tmp_path, "evaluate", "s", "--db", str(db), "--device", "cuda", "--seeds", "2")
    assert "no CUDA GPU is available" in line


def test_a_new_database_in_a_folder_that_takes_no_file_is_told_nothing_was_stored(tmp_path, cli):
    """Not "what was stored is kept; run the same command again to resume": nothing was, and the folder is why."""
    import os
    import shutil
    import subprocess

    folder = tmp_path / "locked"
    folder.mkdir()
    if os.geteuid() == 0:  # permissions do not stop root: an immutable folder does
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)]).returncode != 0:
            pytest.skip("as root only an immutable folder takes no file, and chattr +i is not available here")
    else:
        folder.chmod(0o555)
    try:
        code, _, err = cli("run", str(study_file(tmp_path)), "--db", str(folder / "new.db"), "--device", "cpu",
                           "--log-file", str(tmp_path / "ax.log"))
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)
    line = one_line(err)
    assert code == 1 and f"cannot create the new database {folder / 'new.db'}: its folder {folder} takes no new " \
        "file" in line and "nothing was stored" in line and "resume" not in line, err
    assert list(folder.iterdir()) == []
