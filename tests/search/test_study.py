"""Bayesian-optimisation studies end to end: real Ax, real PyTorch, a real SQLite database."""
import json
import os
import pickle
from dataclasses import replace
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gpytorch.kernels import MaternKernel, ScaleKernel

from pipeline.store import Store, best_trial
from pipeline.search.study import INTERRUPTED, run_study
from pipeline.search.trial import run_trial
from pipeline.spec.study_config import load_study
from helpers import GILS, study_file


def completed(store: Store, name: str):
    return [t for t in store.trials(store.study(name).id) if t.status == "completed"]


def test_three_trial_study_through_the_cli_then_report_and_studies(tmp_path, cli):
    db = str(tmp_path / "runs.db")
    code, out, err = cli("run", str(study_file(tmp_path)), "--db", db, "--device", "cpu",
                         "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    assert "3 trial(s) completed" in out and "Best combination" in out
    assert "Traceback" not in err and "INFO" not in err and "Warning" not in err  # Ax kept to its log file
    assert "Generated new trial" in (tmp_path / "ax.log").read_text()

    trials = completed(Store(db), "tiny")
    assert [t.trial_index for t in trials] == [0, 1, 2]
    for t in trials:
        assert set(t.parameters) == {"alpha", "T", "eta"} and 1 <= t.parameters["T"] <= 3
        assert 0 <= t.metrics["val_accuracy"] <= 1 and 0 <= t.metrics["test_worst_class_accuracy"] <= 1
        assert set(t.per_class["test"]) == {str(i) for i in range(10)} and len(t.epochs) == 1
        assert t.train_seconds > 0 and t.proposal_seconds >= 0

    code, out, _ = cli("run", str(study_file(tmp_path)), "--db", db, "--log-file", str(tmp_path / "ax.log"))
    assert code == 0 and "already has its 3 trials" in out  # running it again changes nothing
    code, out, _ = cli("report", "--db", db, "--format", "json", "--all-trials")
    best, *_, listing = json.loads(out)
    assert best["rows"][0]["trial_index"] == max(trials, key=lambda t: t.metrics["val_accuracy"]).trial_index
    assert len(listing["rows"]) == 3
    code, out, _ = cli("studies", "--db", db)
    assert code == 0 and "tiny" in out and "3 of 3" in out


def test_the_end_of_run_and_the_report_say_a_best_value_on_a_bound_of_its_range(tmp_path, cli):
    """T searched over [1, 2], a range the file fixes: whichever value wins sits on a bound, which stays."""
    db = tmp_path / "runs.db"
    params = 'epochs = 1\nperturb = "feature"\nT = { low = 1, high = 2, widen = false }'
    code, out, err = cli("run", str(study_file(tmp_path, "edge", params=params, trials=2)), "--db", str(db),
                         "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    store = Store(str(db))
    T = best_trial(store.study("edge"), store.trials(store.study("edge").id)).parameters["T"]
    said = (f"edge: T = {T} sits on the {'lower' if T == 1 else 'upper'} bound of [1, 2]: its best may lie "
            "outside; widen the range")
    ending = " ".join(out.split("trial(s) completed")[1].split())
    assert said in ending  # after the study's summary
    before = db.read_bytes()
    code, out, _ = cli("report", "--db", str(db), "--format", "json")
    (row,) = json.loads(out)[0]["rows"]
    assert {"parameter": "T", "value": T, "bound": "lower" if T == 1 else "upper", "low": 1, "high": 2,
            "log": False} in row["bound_flags"]
    assert said in json.loads(out)[0]["notes"] and db.read_bytes() == before


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> tuple[Path, str]:
    """The default three-trial study (two Sobol trials, then the GP), run once: its file and database (the tests
    only read it)."""
    folder = tmp_path_factory.mktemp("seeded")
    path, db = study_file(folder), str(folder / "runs.db")
    run_study(load_study(path), db, "cpu", log_file=folder / "ax.log")
    return path, db


def test_after_initialisation_the_gp_has_an_ard_matern_5_2_kernel(seeded):
    path, db = seeded
    study = load_study(path)
    from pipeline.search import ax as search
    client = search.load_client(study, Store(db).url)
    generated_by = [client._experiment.trials[i].generator_runs[0]._generation_node_name for i in range(3)]
    assert "Sobol" in generated_by[0] and "Sobol" in generated_by[1] and "BoTorch" in generated_by[2]
    adapter = client._generation_strategy.fit(experiment=client._experiment)  # the model of the next proposal
    kernel = adapter.generator.surrogate.model.covar_module
    kernel = kernel.base_kernel if isinstance(kernel, ScaleKernel) else kernel
    assert isinstance(kernel, MaternKernel) and kernel.nu == 2.5
    assert kernel.lengthscale.shape[-1] == len(study.search) == 3  # one lengthscale per parameter (ARD)


def test_a_seeded_study_is_reproducible_on_cpu(seeded, tmp_path):
    path, first = seeded  # the same study, run once already (in a database of its own)
    study = load_study(path)
    run_study(study, str(tmp_path / "b.db"), "cpu", log_file=tmp_path / "ax.log")
    proposals = [[(t.parameters, t.metrics["val_accuracy"]) for t in completed(Store(db), "tiny")]
                 for db in (first, str(tmp_path / "b.db"))]
    assert len(proposals[0]) == 3 and proposals[0] == proposals[1]


def test_a_failing_trial_is_recorded_with_its_error_and_the_study_goes_on(tmp_path):
    # lr_head = 1e38 makes the loss overflow: a real NaN-loss failure, not a simulated one.
    params = 'epochs = 1\nlr_head = { values = [0.01, 1e38, 0.02, 0.05] }\nlr_backbone = 0.0'
    study = load_study(study_file(tmp_path, "flaky", "erm", params, trials=4, max_failures=3, seed=1))
    db = str(tmp_path / "runs.db")
    summary = run_study(study, db, "cpu", log_file=tmp_path / "ax.log")
    trials = Store(db).trials(Store(db).study("flaky").id)
    (failed,) = [t for t in trials if t.status == "failed"]
    assert "TrainingDiverged" in failed.error and failed.parameters["lr_head"] == 1e38
    assert (summary.completed, summary.failed) == (3, 1) and summary.stopped is None
    assert failed.trial_index < max(t.trial_index for t in trials)  # trials ran after the failure
    assert sorted(t.parameters["lr_head"] for t in trials) == [0.01, 0.02, 0.05, 1e38]  # never proposed twice


def test_consecutive_failures_stop_the_study(tmp_path, cli):
    params = 'epochs = 1\nlr_head = { values = [1e37, 1e38] }'
    path = study_file(tmp_path, "doomed", "erm", params, trials=5, max_failures=2)
    code, out, err = cli("run", str(path), "--db", str(tmp_path / "runs.db"), "--log-file", str(tmp_path / "l"))
    assert code == 1 and "2 trials failed in a row" in err and "TrainingDiverged" in err


def test_consecutive_failures_count_across_runs_and_a_stopped_study_stops_at_once_until_the_limit_is_raised(
        tmp_path, cli):
    params = 'epochs = 1\nlr_head = 1e4\nmomentum = { low = 0.0, high = 0.9 }'  # every trial diverges
    path, db = study_file(tmp_path, "diverging", "erm", params, trials=8, max_failures=3), str(tmp_path / "runs.db")
    run = ("run", str(path), "--db", db, "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))

    def failed() -> list[int]:
        store = Store(db)
        return [t.trial_index for t in store.trials(store.study("diverging").id) if t.status == "failed"]

    code, _, err = cli(*run)
    assert code == 1 and "3 trials failed in a row (budget.max_failures); last error: TrainingDiverged" in one_line(err)
    assert failed() == [0, 1, 2]
    for _ in range(2):  # run again as it is: stops at once, saying why and how to go on, and runs nothing
        code, out, err = cli(*run)
        assert code == 1 and "0 trial(s) completed now, 0 failed" in " ".join(out.split()), err
        assert "3 trials failed in a row (budget.max_failures); last error: TrainingDiverged:" in one_line(err)
        assert "raise budget.max_failures above 3 (in the study file, or with --set budget.max_failures=N)" in \
            one_line(err)
        assert "Traceback" not in err and failed() == [0, 1, 2]
    code, _, err = cli(*run, "--set", "budget.max_failures=4")  # the budget is not the study's identity
    assert code == 1 and "4 trials failed in a row" in one_line(err) and failed() == [0, 1, 2, 3]


def one_line(text: str) -> str:
    """Output as one line: the console wraps long lines at the terminal's width."""
    return " ".join(text.split())


def test_another_study_under_an_existing_name_is_refused_and_nothing_changes(tmp_path, cli):
    db = str(tmp_path / "runs.db")
    assert cli("run", str(study_file(tmp_path, trials=1)), "--db", db, "--log-file", str(tmp_path / "l"))[0] == 0
    before = sqlite3.connect(tmp_path / "runs.db").execute("select count(*) from rt_trials").fetchone()
    other = study_file(tmp_path, params=GILS.replace("epochs = 1", "epochs = 2"), trials=1)
    code, out, err = cli("run", str(other), "--db", db)
    assert code == 2 and "a different study named 'tiny' is already stored" in err and "fixed.epochs" in err
    assert sqlite3.connect(tmp_path / "runs.db").execute("select count(*) from rt_trials").fetchone() == before


def test_resume_after_a_crash_keeps_completed_trials_and_respects_the_budget(tmp_path):
    """Kill a running study mid-trial, resume it: nothing completed is lost or repeated."""
    path = study_file(tmp_path, "crash", "gils", 'epochs = 3\nperturb = "feature"\nT = { low = 1, high = 3 }',
                      trials=4)
    db = tmp_path / "runs.db"
    script = Path(sys.executable).with_name("robust-tune")
    process = subprocess.Popen([str(script), "run", str(path), "--db", str(db), "--device", "cpu",
                                "--log-file", str(tmp_path / "ax.log")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    try:
        while time.time() < deadline:  # wait until 2 trials are done and a third is running
            time.sleep(0.05)
            if not db.exists():
                continue
            try:
                statuses = [s for (s,) in sqlite3.connect(db).execute("select status from rt_trials order by id")]
            except sqlite3.OperationalError:
                continue
            if statuses[:3] == ["completed", "completed", "running"]:
                break
        else:
            pytest.fail("the study never reached its third trial")
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.wait()

    study = load_study(path)
    summary = run_study(study, str(db), "cpu", log_file=tmp_path / "ax.log")
    store = Store(str(db))
    trials = store.trials(store.study("crash").id)
    done = [t for t in trials if t.status == "completed"]
    interrupted = [t for t in trials if t.status == "interrupted"]
    assert len(done) == 4 and summary.completed == 2  # the budget counts what was already done
    assert len({t.trial_index for t in trials}) == len(trials)
    assert len(interrupted) == 1 and interrupted[0].error == INTERRUPTED
    assert [t.parameters for t in done].count(interrupted[0].parameters) == 1  # proposed again, once
    assert summary.new_trials[0] > interrupted[0].trial_index


def test_the_trial_function_is_pure_and_picklable(tmp_path, digits):
    study = load_study(study_file(tmp_path))
    restored_study, restored_function = pickle.loads(pickle.dumps((study, run_trial)))
    result = restored_function(restored_study, {"alpha": 0.1, "T": 1, "eta": 2.0}, 0, "cpu")
    again = run_trial(study, {"alpha": 0.1, "T": 1, "eta": 2.0}, 0, "cpu")
    assert result.model is None and result == replace(again, train_seconds=result.train_seconds)
    assert pickle.loads(pickle.dumps(result)) == result  # what a Dask worker sends back
