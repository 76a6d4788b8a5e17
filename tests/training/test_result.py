"""The typed run result: several seeds as one trial, what the store keeps and how it reads back, old databases
included."""
import json
import pickle
import shutil
import sqlite3

import pytest

from pipeline.config import RunSettings
from pipeline.spec.study_config import parse_study
from pipeline.store import Store
from pipeline.store.records import EpochRecord
from pipeline.training.result import EpochMetrics, RunResult, SplitMetrics, ValTest, over_seeds
from helpers import DATA


def _run(seed: int, val: float, per_class: dict[str, float], seconds: float = 2.0) -> RunResult:
    split = SplitMetrics(val, val + 0.01, min(per_class.values()), per_class, 30)
    return RunResult(split, split, (EpochMetrics(1, 1.0, split, split),), seconds, seed,
                     RunSettings.from_dict({"seed": seed}), distinct_per_batch=31.5)


def test_several_seeds_average_every_metric_and_each_class_and_keep_each_seed_apart():
    first, second = _run(0, 0.6, {"a": 0.4, "b": 0.8}, 2.0), _run(1, 0.8, {"a": 0.6, "b": 1.0}, 3.0)
    trial = over_seeds([first, second])
    assert trial.metrics == pytest.approx({"val_accuracy": 0.7, "val_balanced_accuracy": 0.71,
                                           "val_worst_class_accuracy": 0.5, "test_accuracy": 0.7,
                                           "test_balanced_accuracy": 0.71, "test_worst_class_accuracy": 0.5})
    assert trial.val.per_class_accuracy == pytest.approx({"a": 0.5, "b": 0.9})
    assert trial.train_seconds == 5.0 and trial.seed == 0 and trial.epochs == first.epochs
    assert [(r.seed, r.train_seconds, r.metrics) for r in trial.seed_runs] == [
        (0, 2.0, first.metrics), (1, 3.0, second.metrics)]
    assert over_seeds([first]) is first and pickle.loads(pickle.dumps(trial)) == trial


def test_the_store_keeps_metrics_apart_from_the_runs_facts(tmp_path):
    store = Store(str(tmp_path / "r.db"))
    study = store.create_study(parse_study({"name": "s", "method": {"name": "ls"}}, "s.toml"))
    result = over_seeds([_run(0, 0.6, {"a": 0.4}), _run(1, 0.8, {"a": 0.6})])
    store.complete_trial(store.start_trial(study.id, 0, {"alpha": 0.1}, 0, 0.1), result)
    (trial,) = store.trials(study.id)
    assert trial.metrics == result.metrics and trial.examples == {"val": 30, "test": 30}
    assert trial.distinct_per_batch == 31.5 and trial.train_seconds == 4.0
    assert trial.seed_runs == result.seed_runs and trial.per_class == result.per_class
    with sqlite3.connect(tmp_path / "r.db") as connection:  # the column as every version has stored it
        (stored,) = connection.execute("select metrics from rt_trials").fetchone()
    assert json.loads(stored) == {**result.metrics, "val_examples": 30, "test_examples": 30, "train_seconds": 4.0,
                                  "distinct_per_batch": 31.5}


def test_a_database_of_0_6_reads_its_metrics_without_the_facts_stored_beside_them(tmp_path):
    db = tmp_path / "old.db"
    shutil.copy(DATA / "v0.6.0-campaign.db", db)
    store = Store(str(db), create=False)
    with sqlite3.connect(db) as connection:
        stored = [json.loads(m) for (m,) in connection.execute("select metrics from rt_evaluations order by id")]
    runs = [run for study in store.all_studies() for run in store.evaluations(study.id)]
    assert runs and stored
    for run in runs:
        assert not {"train_seconds", "val_examples", "distinct_per_batch"} & set(run.metrics)
        assert run.examples == {"val": 359, "test": 359} and run.distinct_per_batch is not None
    assert sorted(json.dumps(run.stored_metrics(), sort_keys=True) for run in runs) == sorted(
        json.dumps(m, sort_keys=True) for m in stored)  # copied to another variant, a run is stored as it was


def test_each_epoch_is_stored_as_every_version_since_0_5_wrote_it_and_reads_back_typed(tmp_path):
    """An epoch's row, an evaluation's epochs (copied to another variant too) and an epoch prefix's metrics, as
    0.5.0 and later store them (an epoch without a validation split included); read back as typed records."""
    store = Store(str(tmp_path / "r.db"))
    study = store.create_study(parse_study({"name": "s", "method": {"name": "ls"}}, "s.toml"))
    empty, split = SplitMetrics(None, None, None, {}, 0), SplitMetrics(0.5, 0.52, 0.25, {"a": 0.25}, 30)
    epochs = (EpochMetrics(1, 2.5, empty, split), EpochMetrics(2, 1.25, split, split))
    result = RunResult(split, split, epochs, 3.0, 0, RunSettings.from_dict({"seed": 0}))
    store.complete_trial(store.start_trial(study.id, 0, {"alpha": 0.1}, 0, 0.1), result)
    (trial,) = store.trials(study.id)
    with store.engine.begin() as connection:
        store.add_prefix(connection, study.id, 1, trial, trial.epochs[1])
    store.add_evaluation(study.id, "tuned", 0, 0, {}, result, {"a": 1})
    (run,) = store.evaluations(study.id)
    store.copy_evaluation(study.id, "again", 0, run)
    none = '{"accuracy": null, "balanced_accuracy": null, "worst_class_accuracy": null, "per_class_accuracy": {}, ' \
           '"examples": 0}'
    some = '{"accuracy": 0.5, "balanced_accuracy": 0.52, "worst_class_accuracy": 0.25, "per_class_accuracy": ' \
           '{"a": 0.25}, "examples": 30}'
    with sqlite3.connect(tmp_path / "r.db") as connection:
        rows = connection.execute("select epoch, train_loss, val_accuracy, val, test from rt_trial_epochs").fetchall()
        (prefix,) = connection.execute("select metrics, per_class from rt_trials where prefix_of = 0").fetchall()
        stored = [epochs for (epochs,) in connection.execute("select epochs from rt_evaluations order by id")]
    assert rows == [(1, 2.5, None, none, some), (2, 1.25, 0.5, some, some)]
    assert prefix == ('{"val_accuracy": 0.5, "val_balanced_accuracy": 0.52, "val_worst_class_accuracy": 0.25, '
                      '"val_examples": 30.0, "test_accuracy": 0.5, "test_balanced_accuracy": 0.52, '
                      '"test_worst_class_accuracy": 0.25, "test_examples": 30.0}',
                      '{"val": {"a": 0.25}, "test": {"a": 0.25}}')
    assert stored == [f'[{{"epoch": 1, "train_loss": 2.5, "val": {none}, "test": {some}}}, '
                      f'{{"epoch": 2, "train_loss": 1.25, "val": {some}, "test": {some}}}]'] * 2
    typed = (EpochRecord(1, 2.5, None, ValTest(empty, split)), EpochRecord(2, 1.25, 0.5, ValTest(split, split)))
    assert trial.epochs == run.epochs == store.evaluations(study.id)[1].epochs == typed
    assert [e.metrics for e in trial.epochs] == [e.metrics for e in epochs]
