"""Every epoch's validation and test metrics are kept, of each trial and each evaluation run; and a run to E epochs
passes exactly through the state a run to E' < E ends in, for every method part (what epoch-prefix observations
rest on)."""
from __future__ import annotations

import shutil

import pytest

from pipeline.config import TrainConfig
from pipeline.data import Dataset
from pipeline.store import Store
from pipeline.training.trainer import train
from helpers import EVERY_METHOD, FEWER_STEPS


def small(digits: Dataset, n: int = 192) -> Dataset:
    """The digits cut to `n` training examples (validation and test whole), so that every part trains fast."""
    return Dataset(digits.name, digits.class_names, digits.train.subset(slice(0, n)), digits.val, digits.test,
                   digits.pixel_mean, digits.pixel_std)


@pytest.mark.parametrize("method", EVERY_METHOD)
def test_a_run_to_e_epochs_holds_the_run_to_fewer_exactly(digits, method):
    data = small(digits)
    extra = dict(p.split("=") for p in FEWER_STEPS.get(method.split("+")[0], "").split() if p)
    params = {"batch_size": 32, **{k: int(v) for k, v in extra.items()}}
    shorter = train(TrainConfig(method=method, params={**params, "epochs": 2}, device="cpu", threads=1), data)
    longer = train(TrainConfig(method=method, params={**params, "epochs": 3}, device="cpu", threads=1), data)
    assert [e.epoch for e in longer.epochs] == [1, 2, 3]
    assert longer.epochs[1].val == shorter.val and longer.epochs[1].test == shorter.test, method
    assert longer.epochs[1].train_loss == shorter.epochs[-1].train_loss
    assert longer.epochs[-1].test == longer.test  # the last epoch is the run's result


def test_trials_and_evaluation_runs_keep_every_epochs_metrics(tuned, cli, tmp_path):
    db = tmp_path / "copy.db"
    shutil.copy(tuned, db)
    store = Store(str(db), create=False)
    study = store.study("tiny")
    for trial in store.trials(study.id):
        assert [e.epoch for e in trial.epochs] == [1]  # TUNED_LS trains 1 epoch
        last = trial.epochs[-1].splits
        assert last.test.accuracy == trial.metrics["test_accuracy"]
        assert last.val.per_class_accuracy == trial.per_class["val"]
    code, _, err = cli("evaluate", "tiny", "--seeds", "1", "--db", str(db), "--device", "cpu",
                       "--log-file", str(tmp_path / "log.txt"))
    assert code == 0, err
    (run,) = Store(str(db), create=False).evaluations(study.id)
    assert [e.epoch for e in run.epochs] == [1]
    assert run.epochs[0].splits.test.accuracy == run.metrics["test_accuracy"]
    assert run.epochs[0].to_dict()["val"]["examples"] == run.epochs[0].splits.val.examples > 0
    code, _, err = cli("report", "tiny", "--db", str(db), "--plots", str(tmp_path / "pictures"),
                       "--log-file", str(tmp_path / "log.txt"))
    assert code == 0, err
    assert (tmp_path / "pictures" / "tiny-epoch-curves.png").stat().st_size > 0  # the paper's Figure 1, per variant


def test_every_part_said_to_be_independent_of_the_total_epochs_is_proved_so_above():
    """Epoch prefixes are allowed for every part whose declaration says it does not depend on the run's total epoch
    count (Part.uses_total_epochs); each such part is in a method the exactness test above trains."""
    from pipeline.methods import parse_method
    from pipeline.methods.declarations import PARTS

    covered = {part for method in EVERY_METHOD for part in parse_method(method).parts}
    independent = {name for name in PARTS if not PARTS[name].uses_total_epochs}
    assert independent and independent <= covered, independent - covered
