"""Epoch prefixes told to Ax and early stopping (pipeline/spec/epochs.py) through real studies: real Ax, real SQLite,
real processes for the kill, digits and the small CNN for 1-4 epochs."""
import json
import signal
from pathlib import Path

import numpy as np
import pytest

from pipeline.spec.epochs import MIN_CURVES, StopRule, objective_curve, prefix_epochs, stop_percentile
from pipeline.params import Range
from pipeline.store import Store
from pipeline.search.study import run_study
from pipeline.spec.study_config import load_configuration, load_study
from helpers import ax_trials, rows, start_run, prefixes_study_file as study_file


def stored(db: Path, name: str = "pf"):
    store = Store(str(db))
    return store.trials(store.require_study(name).id)


def check_prefixes(trials, study) -> int:
    """Every trained trial has exactly one prefix row per epoch count below its own (or up to where it stopped),
    each holding that epoch's stored metrics; returns how many prefixes there are."""
    by_index = {t.trial_index: t for t in trials}
    prefixes = [t for t in trials if t.prefix_of is not None]
    for trained in (t for t in trials if t.prefix_of is None and t.status in ("completed", "early_stopped")):
        mine = sorted((t for t in prefixes if t.prefix_of == trained.trial_index), key=lambda t: t.parameters["epochs"])
        expected = list(prefix_epochs(study.search, len(trained.epochs), trained.status == "completed"))
        assert [t.parameters["epochs"] for t in mine] == expected
        for prefix in mine:
            epoch = trained.epochs[prefix.parameters["epochs"] - 1]
            assert prefix.metrics["val_balanced_accuracy"] == epoch.splits.val.balanced_accuracy
            assert prefix.metrics["test_accuracy"] == epoch.splits.test.accuracy
            assert {k: v for k, v in prefix.parameters.items() if k != "epochs"} == {
                k: v for k, v in trained.parameters.items() if k != "epochs"}
            assert prefix.settings.params["epochs"] == prefix.parameters["epochs"]
    assert all(by_index[p.prefix_of].prefix_of is None for p in prefixes)
    return len(prefixes)


def test_a_study_searching_epochs_tells_ax_every_prefix_and_each_is_exact(tmp_path):
    """4 trials trained, each to E epochs, tell Ax 4 + sum(E - 1) observations; a prefix reproduces exactly when
    trained on its own (its parameters at the smaller epoch count, through the study trial's code path)."""
    from pipeline.search.trial import run_trial

    db = tmp_path / "runs.db"
    study = load_study(study_file(tmp_path))
    summary = run_study(study, str(db), "cpu", log_file=tmp_path / "ax.log")
    trials = stored(db)
    trained = [t for t in trials if t.prefix_of is None]
    assert len(trained) == 4 and summary.completed == 4
    prefixes = check_prefixes(trials, study)
    assert prefixes == sum(t.parameters["epochs"] - 1 for t in trained) == summary.prefixes > 0
    ax = ax_trials(study, db)
    assert len(ax) == len(trials) and {status for status, _ in ax.values()} == {"completed"}
    assert {i: p for i, (_, p) in ax.items()} == {t.trial_index: t.parameters for t in trials}
    prefix = next(t for t in trials if t.prefix_of is not None)
    alone = run_trial(study, prefix.parameters, study.seed, "cpu")
    assert {k: alone.metrics[k] for k in prefix.metrics} == prefix.metrics


def test_a_study_killed_before_its_prefixes_resumes_without_duplicating_them(tmp_path):
    """Killed after a trial was stored and told to Ax, before its prefixes were: the resume tells them once, and
    the budget ends exactly; killed again after the next record, nothing is told twice either."""
    path, db = study_file(tmp_path, trials=3), tmp_path / "runs.db"
    process = start_run(path, db, env={"ROBUST_TUNE_KILL_AT": "after-tell"})
    process.communicate()
    assert process.returncode == -signal.SIGKILL
    assert rows(db, "select count(*) from rt_trials where prefix_of is not null") == [(0,)]
    process = start_run(path, db, env={"ROBUST_TUNE_KILL_AT": "after-record"})
    process.communicate()
    assert process.returncode == -signal.SIGKILL
    study = load_study(path)
    summary = run_study(study, str(db), "cpu", log_file=tmp_path / "ax.log")
    trials = stored(db)
    assert sum(t.ran for t in trials) == 3
    check_prefixes(trials, study)
    assert summary.completed < 3  # the trials stored before the kills were not trained again
    keys = [json.dumps(t.parameters, sort_keys=True) for t in trials]
    assert len(keys) == len(set(keys))  # no observation twice
    ax = ax_trials(study, db)
    completed = {i for i, (status, _) in ax.items() if status == "completed"}
    assert completed == {t.trial_index for t in trials}


def test_early_stopping_stops_trials_behind_the_median_and_stores_each_once_with_its_curve(tmp_path, cli):
    """With early_stopping = "median", a trial whose best objective so far falls below the median of the earlier
    trials' at the same epoch stops there: stored once as early_stopped with the epochs it ran, counted toward the
    budget, early-stopped in Ax; no trial that ran on was below the rule's threshold. Its prefixes are exact."""
    db = tmp_path / "runs.db"
    study = load_study(study_file(tmp_path, stopping="median", trials=7))
    summary = run_study(study, str(db), "cpu", log_file=tmp_path / "ax.log")
    trials = stored(db)
    trained = [t for t in trials if t.prefix_of is None]
    assert len(trained) == 7 and sum(t.ran for t in trials) == 7
    stopped = [t for t in trained if t.status == "early_stopped"]
    assert stopped and summary.early_stopped == len(stopped)
    for k, trial in enumerate(trained):
        curves = [objective_curve([e.metrics for e in t.epochs], "val_balanced_accuracy") for t in trained[:k]]
        values = [e.splits.val.balanced_accuracy for e in trial.epochs]
        for epoch in range(1, len(values) + 1):
            reached = [max(c[:epoch]) for c in curves if len(c) >= epoch]
            below = len(reached) >= MIN_CURVES and max(values[:epoch]) < np.median(reached)
            planned_end = epoch == trial.parameters["epochs"]
            assert below == (trial.status == "early_stopped" and epoch == len(values)) or planned_end
        if trial.status == "early_stopped":
            assert len(trial.epochs) < trial.parameters["epochs"]
            assert trial.metrics["val_balanced_accuracy"] == values[-1]
    ax = ax_trials(study, db)
    assert {t.trial_index for t in stopped} == {i for i, (status, _) in ax.items() if status == "early_stopped"}
    check_prefixes(trials, study)

    code, out, err = cli("best", "pf", "--db", str(db))  # `best` writes the one configuration: nothing to search
    assert code == 0, err
    (tmp_path / "best.toml").write_text(out)
    tuned = load_configuration(tmp_path / "best.toml")  # every parameter fixed at the best trial's value
    assert not tuned.search and "[search]" not in out and "[budget]" not in out


@pytest.mark.parametrize("edit, problem", [
    (("epochs = { low = 1, high = 4 }", "epochs = 2"), "search.epoch_prefixes: needs epochs searched over a range"),
    (("initial = 3", "initial = 3\nseeds_per_trial = 2"), "search.epoch_prefixes: a trial trained on 2 seeds"),
    (("epoch_prefixes = true", "epoch_prefixes = false\n[budget]\nseeds_per_trial = 2"), None),
    (('early_stopping = "off"', 'early_stopping = "sometimes"'), "budget.early_stopping: must be one of off, median, "),
    (('early_stopping = "off"', 'early_stopping = "percentile"\nearly_stopping_percentile = 100'),
     "budget.early_stopping_percentile: must be between 0 and 100"),
])
def test_prefixes_and_early_stopping_refused_in_one_line(cli, tmp_path, edit, problem):
    """Refused with one line naming the field, exit 2, nothing stored; a study that trains several seeds per trial
    reports no per-epoch objective, so early stopping is refused for it."""
    path = study_file(tmp_path)
    text = path.read_text().replace(*edit)
    if problem is None:  # early stopping with 2 seeds per trial (budget table written once)
        text = text.replace("[budget]\nseeds_per_trial = 2\n[budget]", "[budget]\nseeds_per_trial = 2") \
            .replace('early_stopping = "off"', 'early_stopping = "median"')
        problem = "budget.early_stopping: a trial trained on 2 seeds (budget.seeds_per_trial) reports no per-epoch"
    path.write_text(text)
    code, out, err = cli("run", str(path), "--db", str(tmp_path / "runs.db"), "--device", "cpu")
    assert code == 2, (out, err)
    assert problem in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs.db").exists()


def test_the_stop_rule_is_the_percentile_of_earlier_best_values_at_the_same_epoch():
    """The rule against its formula: threshold(e) = percentile p of max(curve[:e]) over the curves reaching e, from
    min_epochs on and with at least MIN_CURVES of them; a trial stops when its best so far is below it."""
    curves = ((0.5, 0.6, 0.7), (0.4, 0.8, 0.6), (0.3, 0.2, 0.9), (0.9,))
    rule = StopRule(25.0, 2, curves)
    assert rule.threshold(1) is None  # before min_epochs
    assert rule.threshold(2) == pytest.approx(np.percentile([0.6, 0.8, 0.3], 25))
    assert rule.threshold(3) == pytest.approx(np.percentile([0.7, 0.8, 0.9], 25))
    assert rule.should_stop([0.1, 0.44]) and not rule.should_stop([0.46, 0.1])
    assert StopRule(50.0, 1, curves[:2]).threshold(1) is None  # fewer than MIN_CURVES earlier trials
    assert stop_percentile("median", 10.0) == 50.0 and stop_percentile("off", 10.0) is None
    assert list(prefix_epochs({"epochs": Range(21, 60)}, 24, True)) == [21, 22, 23]
    assert list(prefix_epochs({"epochs": Range(21, 60)}, 23, False)) == [21, 22, 23]  # stopped after epoch 23


def test_prefixes_and_early_stopping_on_two_dask_workers(tmp_path):
    """The stop rule travels to the workers with each trial, and the run process alone tells Ax and stores the
    prefixes: the budget exact, every prefix exact, a stopped trial shorter than planned."""
    from pipeline.search.parallel import trial_runner

    db, log = tmp_path / "runs.db", str(tmp_path / "ax.log")
    study = load_study(study_file(tmp_path, stopping="median", trials=6))
    run_study(study, str(db), "cpu", log_file=log, runner=trial_runner(workers=2, device="cpu", log_file=log))
    trials = stored(db)
    assert sum(t.ran for t in trials) == 6
    check_prefixes(trials, study)
    for trial in trials:
        if trial.status == "early_stopped":
            assert len(trial.epochs) < trial.parameters["epochs"]
        elif trial.prefix_of is None:
            assert len(trial.epochs) == trial.parameters["epochs"]


PREFIXES_CAMPAIGN = """
name = "pfc"
objective = "val_balanced_accuracy"
methods = ["cb"]
replicates = 1
[data]
name = "digits"
[params]
epochs = { low = 1, high = 3 }
lr_head = { low = 0.01, high = 0.2, log = true }
lr_backbone = 0.05
momentum = 0.0
[method_params.cb]
cb_power = 0.5
[search]
epoch_prefixes = true
strategy = "gp-centre"
[budget]
trials = 1
initial = 1
[evaluate]
seeds = 2
max_seeds = 2
"""


class Killed(BaseException):
    """The process dying at a kill point, in this process: nothing after it runs, nothing catches it."""


def test_a_campaign_killed_before_a_studys_prefixes_were_told_tells_them_when_it_resumes(tmp_path, cli, monkeypatch):
    """Killed after ERM's one search trial was stored and told to Ax, before its epoch prefixes were: its budget has
    run and Ax waits for nothing, yet the resumed `compare` does not pass the study by; it tells the prefixes, once."""
    import pipeline.search.study as study_module
    from pipeline.spec.campaign_config import load_campaign

    path, db = tmp_path / "pfc.toml", tmp_path / "c.db"
    path.write_text(PREFIXES_CAMPAIGN)
    args = ("compare", str(path), "--db", str(db), "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))

    def kill_point(name: str) -> None:
        if name == "after-tell":
            raise Killed

    monkeypatch.setattr(study_module, "kill_point", kill_point)
    with pytest.raises(Killed):
        cli(*args)
    monkeypatch.undo()
    erm = load_campaign(path).study("erm", 0)
    (trained,) = stored(db, "pfc.erm")
    assert trained.parameters["epochs"] == 2  # the centre of the range: a prefix to tell, its first epoch
    assert rows(db, "select count(*) from rt_trials where prefix_of is not null") == [(0,)]

    code, _, err = cli(*args)
    assert code == 0, err
    trials = stored(db, "pfc.erm")
    assert check_prefixes(trials, erm) == 1
    assert {status for status, _ in ax_trials(erm, db).values()} == {"completed"} and len(ax_trials(erm, db)) == 2
