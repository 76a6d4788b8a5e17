"""`bench runs`: the batched path over seeds gives each seed the run the trainer gives it, within float tolerance,
and the subcommand prints its table, at a tiny size (one epoch of a few batches)."""
from dataclasses import replace

import pytest
import torch

from pipeline.config import DataConfig, TrainConfig

SEEDS = [0, 1, 2]


@pytest.fixture(scope="module")
def data():
    from pipeline.data import load_dataset

    dataset = load_dataset(DataConfig(), torch.device("cpu"))
    dataset.train = dataset.train.subset(slice(0, 3 * 32 + 5))  # three batches of 32 and one of 5
    return dataset


@pytest.fixture(scope="module")
def both(data):
    from pipeline.bench.runs import train_batched
    from pipeline.training.trainer import train

    config = TrainConfig(device="cpu", precision="fp32", params={"epochs": 2, "lr_step": 1, "weight_decay": 1e-4})
    return [train(replace(config, seed=seed), data) for seed in SEEDS], train_batched(config, SEEDS, data)


def test_the_batched_runs_are_the_trainers_runs_within_float_tolerance(both):
    from pipeline.bench.runs import differences

    one, batched = both
    for a, b in zip(one, batched):
        assert b.seed == a.seed and b.settings == a.settings
        weights, losses, points = differences(a, b)
        assert weights < 1e-5 and losses < 1e-5 and points == 0
        assert [e.val.accuracy for e in b.epochs] == [e.val.accuracy for e in a.epochs] and b.test == a.test
        assert b.distinct_per_batch == a.distinct_per_batch
    # each seed its own initialisation and batch order: the runs differ from each other, by far more than the tolerance
    assert differences(one[0], batched[1])[0] > 1e-2


def test_a_method_the_batched_path_does_not_cover_is_refused(data):
    from pipeline.bench.runs import train_batched

    with pytest.raises(ValueError, match="not hws"):
        train_batched(TrainConfig(device="cpu", method="hws", params={"epochs": 1}), SEEDS, data)


def test_the_subcommand_prints_its_table(cli, monkeypatch):
    from pipeline.bench import runs

    real = runs.load_dataset

    def few_batches(config, device):  # the same digits, cut to a few batches so the round trip takes seconds
        dataset = real(config, device)
        dataset.train = dataset.train.subset(slice(0, 64))
        return dataset

    monkeypatch.setattr(runs, "load_dataset", few_batches)
    code, out, err = cli("bench", "runs", "--runs", "2", "--threads", "1", "--epochs", "1", "--rounds", "1",
                         "--device", "cpu", "--format", "markdown")
    assert code == 0, err
    assert "| runs | threads | one at a time | batched | batched / one |" in out
    row = next(line for line in out.splitlines() if line.startswith("| 2 | 1 |"))
    assert row.split("|")[8].strip() == "0.00"  # the same metrics in both arms
