"""evaluate beyond one study: named variants with their own values, --drop, runs shared between studies,
report --compare across studies, and runs trained by a runner (Dask workers). Real Ax (the module's study),
real PyTorch on the digits, real SQLite files, the CLI in real processes or in this one."""
import functools
import io
import json
import shutil
import sqlite3
import sys

import pytest

from pipeline.params import Choice
from pipeline.compare.evaluate import evaluation_job, plan_evaluation, run_evaluation
from pipeline.compare.stats import paired_difference, simultaneous_confidence
from pipeline.store import Store
from pipeline.spec.study_config import load_study
from pipeline.search.trial import run_trial
import helpers
from helpers import evaluations, study_file, unwrapped
robust_tune = functools.partial(helpers.robust_tune, columns=160)


@pytest.fixture
def db(tuned, tmp_path):  # conftest's session study, copied
    copy = tmp_path / "study.db"
    shutil.copy(tuned, copy)
    return copy


def runs(db, study: str) -> dict[tuple[str, int], dict]:
    """A study's stored runs: (variant, seed) -> the row's metrics and settings."""
    rows = sqlite3.connect(db).execute(
        "select variant, seed, metrics, settings, train_seconds from rt_evaluations join rt_studies "
        "on rt_studies.id = study_id where rt_studies.name = ?", (study,)).fetchall()
    return {(v, s): {"metrics": json.loads(m), "settings": json.loads(st), "train_seconds": t}
            for v, s, m, st, t in rows}


@pytest.fixture
def evaluate(cli):
    """`robust-tune evaluate tiny --db DB --device cpu ARGS...` in this process: (exit code, stdout, stderr)."""
    return lambda db, *args: cli("evaluate", "tiny", "--db", str(db), "--device", "cpu", *args)


def report(cli, db, *args: str) -> list[dict]:
    """`report --compare ARGS... --format json`'s rows, read in this process."""
    code, out, err = cli("report", "--compare", *args, "--db", str(db), "--format", "json")
    assert code == 0, err
    return json.loads(out)[0]["rows"]


def test_a_named_variant_runs_with_its_own_values_beside_the_plain_one(db, evaluate, cli):
    code, _, err = evaluate(db, "--seeds", "1", "--against", "cb:cb_power=0.56,erm")
    assert code == 0, err
    stored = runs(db, "tiny")
    assert sorted(stored) == [("cb:cb_power=0.56", 0), ("erm", 0), ("tuned", 0)]
    cb = stored[("cb:cb_power=0.56", 0)]["settings"]
    assert cb["method"] == "cb" and cb["params"]["cb_power"] == 0.56
    assert cb["params"]["epochs"] == 1 and cb["params"]["lr_head"] == 0.05  # shared settings from the best trial

    assert evaluate(db, "--seeds", "1", "--against", "cb")[0] == 0  # the plain cb: another variant
    assert runs(db, "tiny")[("cb", 0)]["settings"]["params"]["cb_power"] == 1.0

    before = evaluations(db)
    code, _, err = evaluate(db, "--seeds", "1", "--against", "cb", "--baseline-param", "cb_power=0.3")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "--against cb:cb_power=0.3" in err and "--drop cb" in err
    assert evaluations(db) == before
    assert evaluate(db, "--seeds", "1", "--against", "cb:cb_power=0.3")[0] == 0  # the advice works

    for against, words in (("cb:nope=1", "cb takes no parameter nope"), ("cb:cb_power=7", "must be in [0, 1]"),
                           ("nope:cb_power=1", "unknown method"), ("cb:cb_power", "malformed --against")):
        file = db.read_bytes()
        code, _, err = evaluate(db, "--against", against)
        assert code == 2 and words in err and err.count("\n") == 1, against
        assert db.read_bytes() == file

    by_variant = {r["variant"]: r for r in report(cli, db)}
    assert by_variant["cb:cb_power=0.56"]["params_shown"] == {"cb_power": 0.56}
    assert by_variant["cb:cb_power=0.56"]["params"]["lr_head"] == 0.05  # the full set in the records
    assert by_variant["cb"]["params_shown"] == {} and by_variant["erm"]["params_shown"] == {}
    csv = robust_tune("report", "--compare", "--db", str(db), "--format", "csv").stdout.splitlines()
    assert "parameters" in csv[0].split(",")
    assert any(line.startswith("tiny,cb:cb_power=0.56,cb,") and ",cb_power=0.56," in line for line in csv)


def test_drop_asks_first_and_removes_one_variant_under_the_study_lock(db, cli, monkeypatch):
    evaluate_in_process(db, ["erm"])
    kept = [row for row in evaluations(db) if row[1] == "tuned"]

    code, _, err = cli("evaluate", "tiny", "--db", str(db), "--drop", "ls")
    assert code == 2 and "no evaluated variant 'ls'; evaluated: tuned, erm" in err and err.count("\n") == 1
    code, _, err = cli("evaluate", "tiny", "--db", str(db), "--drop", "erm")  # no terminal to ask on
    assert code == 1 and "nothing was dropped" in err and "--yes" in err and len(evaluations(db)) == 2
    code, _, err = cli("evaluate", "tiny", "--db", str(db), "--drop", "erm", "--against", "ls")
    assert code == 2 and "--drop goes alone" in err

    monkeypatch.setattr("cli.evaluate._stdin_is_terminal", lambda: True)
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    code, out, err = cli("evaluate", "tiny", "--db", str(db), "--drop", "erm")
    assert code == 1 and "Drop variant erm of study tiny: 1 run(s)" in out and "nothing was dropped" in err
    assert len(evaluations(db)) == 2

    store = Store(str(db))
    lock = store.lock_study(store.require_study("tiny"))  # as if a run of the study were going on
    code, _, err = cli("evaluate", "tiny", "--db", str(db), "--drop", "erm", "--yes")
    lock.release()
    assert code == 2 and "is being run by process" in err and len(evaluations(db)) == 2

    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    code, out, _ = cli("evaluate", "tiny", "--db", str(db), "--drop", "erm")
    assert code == 0 and "dropped variant erm of study tiny: 1 run(s)" in out
    assert evaluations(db) == kept


def evaluate_in_process(db, against: list[str], seeds: int = 1, study: str = "tiny", **options) -> list:
    """Evaluate in this process (torch is loaded already); the events it reported."""
    store, events = Store(str(db)), []
    run_evaluation(store, plan_evaluation(store, study, seeds, against), "cpu", events.append, **options)
    return events


@pytest.fixture
def two_studies(db, tmp_path):
    """The module's `tiny` (ls) and a second study `wide` (hws) at the same shared settings, its one trial
    trained by the trial code path and stored as the study loop stores it."""
    wide = load_study(study_file(tmp_path, "wide", "hws", "epochs = 1\nlr_head = 0.05\nbeta = 2.0", trials=1))
    store = Store(str(db))
    stored = store.create_study(wide)
    proposed = {name: space.values[0] if isinstance(space, Choice) else space.low
                for name, space in wide.search.items()}
    row = store.start_trial(stored.id, 0, proposed, wide.seed, 0.0)
    store.complete_trial(row, run_trial(wide, proposed, wide.seed, "cpu"))
    return db


def test_erm_at_the_same_settings_trains_once_and_the_studies_compare_paired_on_seeds(two_studies, evaluate, cli):
    db = two_studies
    code, _, err = evaluate(db, "--seeds", "2", "--against", "erm")
    assert code == 0, err
    code, _, err = cli("evaluate", "wide", "--db", str(db), "--device", "cpu", "--seeds", "2", "--against", "erm")
    assert code == 0, err
    err = unwrapped(err)
    assert "2 stored for another study (copied, not trained again), 2 to run" in err
    assert err.count("shared with study tiny (not trained again)") == 2
    assert [line.split(":")[1].strip() for line in err.splitlines() if line.startswith("run ")] == \
        ["erm, seed 0", "erm, seed 1", "tuned, seed 0", "tuned, seed 1"]  # trained: the two tuned runs only
    tiny, wide = runs(db, "tiny"), runs(db, "wide")
    for seed in (0, 1):
        assert wide[("erm", seed)] == tiny[("erm", seed)]  # metrics, settings, training time as stored
    assert wide[("tuned", 0)]["settings"]["method"] == "hws"

    file = db.read_bytes()
    rows = report(cli, db, "tiny", "wide")
    assert [(r["studies"], r["variant"]) for r in rows] == [(["tiny"], "tuned"), (["wide"], "tuned"),
                                                             (["tiny", "wide"], "erm")]  # erm once
    erm = [tiny[("erm", s)]["metrics"]["test_accuracy"] for s in (0, 1)]
    for row, study in zip(rows[:2], (tiny, wide)):
        expected = paired_difference([study[("tuned", s)]["metrics"]["test_accuracy"] for s in (0, 1)], erm)
        found = row["difference"]["test_accuracy"]
        assert row["baseline"] == "erm" and found["seeds"] == [0, 1]
        assert found["mean"] == pytest.approx(expected.mean)
        assert found["half_width"] == pytest.approx(expected.half_width(simultaneous_confidence(2)))
        assert found["p_value"] == pytest.approx(expected.p_value)
    assert rows[2]["difference"] == {}

    against_tiny = report(cli, db, "tiny", "wide", "--baseline", "tiny")
    assert against_tiny[0]["difference"] == {} and against_tiny[1]["baseline"] == "tiny tuned"
    expected = paired_difference([wide[("tuned", s)]["metrics"]["test_accuracy"] for s in (0, 1)],
                                 [tiny[("tuned", s)]["metrics"]["test_accuracy"] for s in (0, 1)])
    assert against_tiny[1]["difference"]["test_accuracy"]["mean"] == pytest.approx(expected.mean)
    markdown = robust_tune("report", "--compare", "tiny", "wide", "--db", str(db), "--format", "markdown").stdout
    assert "| tiny, wide | erm |" in markdown and "vs erm: test acc" in markdown

    code, _, err = cli("report", "--compare", "tiny", "wide", "--db", str(db), "--baseline", "ls")
    assert code == 2 and "a compared study" in err and err.count("\n") == 1
    assert [(r["study"], r["variant"]) for r in report(cli, db, "wide")] == [("wide", "tuned"), ("wide", "erm")]
    assert db.read_bytes() == file  # reading changed nothing


def test_a_run_as_a_trial_job_trains_exactly_its_planned_configuration(db):
    plan = plan_evaluation(Store(str(db)), "tiny", 2, ["erm", "cb:cb_power=0.5", "hws"], vary="alpha=0.3",
                           params={"beta": "3"}, resplit=True)
    assert [v.name for v in plan.variants] == ["tuned", "erm", "cb:cb_power=0.5", "hws", "alpha=0.3"]
    for number, (variant, seed) in enumerate(((v, s) for v in plan.variants for s in plan.seeds), start=1):
        job = evaluation_job(plan, variant, seed, number, "cpu", "fp32")
        assert job.trial_index == number and job.study.search == {}
        assert job.study.train_config(job.parameters, job.seed, job.device, job.precision) == \
            plan.config(variant, seed, "cpu", "fp32")


def test_a_failing_run_stops_the_evaluate_in_one_line_naming_it(db, evaluate):
    code, _, err = evaluate(db, "--seeds", "1", "--against", "erm:lr_head=1e9")
    assert code == 1 and "Traceback" not in err
    assert "variant erm:lr_head=1e+09 seed 0 failed: TrainingDiverged" in err.strip().splitlines()[-1]
    assert [row[1:3] for row in evaluations(db)] == [("tuned", 0)]  # the run before it is kept


def test_evaluate_on_two_dask_workers_stores_each_run_once(db, evaluate, tmp_path):
    here = tmp_path / "here.db"
    shutil.copy(db, here)
    code, _, err = evaluate(db, "--seeds", "2", "--workers", "2", "--log-file", str(tmp_path / "dask.log"))
    assert code == 0, err
    assert sorted(row[1:3] for row in evaluations(db)) == [("tuned", 0), ("tuned", 1)]  # each once
    evaluate_in_process(here, [], seeds=2)
    workers, local = runs(db, "tiny"), runs(here, "tiny")
    for key in workers:  # the same settings, thread count included, and the same numbers
        assert workers[key]["settings"] == local[key]["settings"]
        assert workers[key]["metrics"] | {"train_seconds": 0} == local[key]["metrics"] | {"train_seconds": 0}


def test_resplit_counts_each_seeds_split_from_the_studys_own_and_refuses_a_run_stored_counting_from_0(db, cli,
                                                                                                       tmp_path):
    """A study searched on split seed 300: `evaluate --resplit` trains seed k on split seed 300 + k, as a campaign
    pairs them. A run an earlier version stored on split seed k is refused in one line, never taken for seed k's."""
    path = study_file(tmp_path, "shifted", "hws", "epochs = 1\nlr_head = 0.05\nbeta = 2.0", trials=1)
    path.write_text(path.read_text().replace('name = "digits"', 'name = "digits"\nsplit_seed = 300'))
    shifted = load_study(path)
    store = Store(str(db))
    row = store.start_trial(store.create_study(shifted).id, 0, {}, shifted.seed, 0.0)
    store.complete_trial(row, run_trial(shifted, {}, shifted.seed, "cpu"))
    run_evaluation(store, plan_evaluation(store, "shifted", 1, resplit=True, split_base=0), "cpu")  # as stored before

    def evaluate(*args: str) -> tuple[int, str, str]:
        return cli("evaluate", "shifted", "--db", str(db), "--device", "cpu", *args)

    code, _, err = evaluate("--seeds", "2", "--resplit")
    assert code == 2 and err.count("\n") == 1, err
    assert "seed 0 is stored trained on split seed 0, and this evaluate trains it on split seed 300" in err
    assert "--drop tuned" in err
    assert evaluate("--drop", "tuned", "--yes")[0] == 0
    assert evaluate("--seeds", "2", "--resplit")[0] == 0
    stored = sqlite3.connect(db).execute("select seed, config from rt_evaluations order by seed").fetchall()
    assert [(seed, json.loads(config)["data"]["split_seed"]) for seed, config in stored] == [(0, 300), (1, 301)]
