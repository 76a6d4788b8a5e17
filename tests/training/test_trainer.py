"""The shared trainer: every method through one loop, deterministic, with honest metrics."""
import pytest

from pipeline.config import RunSettings, TrainConfig
from pipeline.methods.mixers import CutoutMixer, NoMixer
from pipeline.methods.samplers import HardnessWeightedSampler, UniformSampler
from pipeline.methods.updates import OneDescentUpdate, TwoDescentUpdate
from pipeline.methods.weights import ClassBalanced, GroupDro, NoWeights
from pipeline.training.trainer import BatchEnd, EpochEnd, TrainingDiverged, prepare, train


def run(digits, method, seed=0, **params):
    return train(TrainConfig(method=method, params={"epochs": 2, **params}, seed=seed, device="cpu"), digits)


def test_result_carries_metrics_curves_and_resolved_settings(digits):
    events = []
    result = train(TrainConfig(method="gils", params={"epochs": 2, "T": 1}, device="cpu"), digits, events.append)
    assert 0 <= result.test.accuracy <= 1 and 0 <= result.val.accuracy <= 1
    assert result.test.worst_class_accuracy <= result.test.balanced_accuracy
    assert set(result.test.per_class_accuracy) == set(digits.class_names)
    assert result.test.examples == len(digits.test)
    assert [e.epoch for e in result.epochs] == [1, 2] and result.epochs[-1].val == result.val
    assert result.settings.params["gamma"] == 1e-3 and result.settings.params["T"] == 1
    assert result.settings.device == "cpu" and result.train_seconds > 0
    epochs = [e for e in events if isinstance(e, EpochEnd)]
    assert [e.epoch for e in epochs] == [1, 2] and epochs[-1].val_accuracy == result.val.accuracy
    assert any(isinstance(e, BatchEnd) for e in events)
    flat = result.to_dict()
    assert flat["test_accuracy"] == result.test.accuracy and "test_worst_class_accuracy" in flat


def test_progress_knows_the_epochs_from_the_first_batch_and_shows_each_evaluation_chunk(digits):
    """A large split's evaluation takes a while: the bars say so (not `0/?`) in `train` and in a study's view."""
    import io

    from rich.console import Console

    from cli.render import BATCH_STAGES
    from cli.study import BATCH_LABELS, StudyView

    events = []
    train(TrainConfig(method="erm", params={"epochs": 2}, device="cpu"), digits, events.append)
    batches = [e for e in events if isinstance(e, BatchEnd)]
    assert batches[0].epochs == 2 and batches[0].stage == "train"
    chunks = -(-len(digits.test) // 256)
    for epoch in (1, 2):
        test = [(e.batch, e.batches) for e in batches if e.epoch == epoch and e.stage == "test"]
        assert test == [(k, chunks) for k in range(1, chunks + 1)] and chunks > 1
        assert [e.stage for e in batches if e.epoch == epoch][-1] == "test"
        assert any(e.stage == "val" for e in batches if e.epoch == epoch)

    def shown(view_bars) -> str:
        console = Console(file=io.StringIO(), width=100, color_system=None)
        console.print(view_bars)
        return console.file.getvalue()

    view = StudyView()
    view.on_event(batches[0])
    assert "0/2" in shown(view.bars) and "?" not in shown(view.bars)
    view.on_event(next(e for e in batches if e.stage == "test"))
    assert BATCH_LABELS["test"] in shown(view.bars) and f"1/{chunks}" in shown(view.bars)
    assert set(BATCH_STAGES) == set(BATCH_LABELS) == {"train", "val", "test"}


@pytest.mark.parametrize("method, params", [
    ("erm", {}), ("ls", {"alpha": 0.2}), ("gils", {"T": 2, "perturb": "input"}),
    ("gils", {"T": 2, "perturb": "feature"}), ("hws", {"beta": 1.0, "importance_sampling": True}),
    ("gils+hws", {"T": 1, "beta": 1.0}),
])
def test_same_seed_gives_identical_metrics_on_cpu(digits, method, params):
    first, second = run(digits, method, **params), run(digits, method, **params)
    assert first.to_dict() | {"train_seconds": 0} == second.to_dict() | {"train_seconds": 0}


def test_another_seed_gives_another_run(digits):
    first, second = run(digits, "erm", seed=0), run(digits, "erm", seed=1)
    assert [e.train_loss for e in first.epochs] != [e.train_loss for e in second.epochs]


def test_training_learns_the_digits(digits):
    result = train(TrainConfig(method="erm", params={"epochs": 6}, device="cpu"), digits)
    assert result.val.accuracy > 0.8  # chance is 0.1


def test_a_diverging_run_raises(digits):
    with pytest.raises(TrainingDiverged, match="training loss is"):
        run(digits, "erm", lr_head=1e38, lr_backbone=1e38)


def test_the_settings_a_run_records_retrain_it_exactly(digits):
    first = run(digits, "hws+ls", seed=2, beta=1.0)
    settings = RunSettings.from_dict(first.to_dict()["settings"])  # as stored, and read back
    assert settings == first.settings
    assert settings.method == "ls+hws" and settings.params["alpha"] == 0.1  # canonical name, defaults filled
    again = train(settings.train_config(), digits)
    assert again.to_dict() | {"train_seconds": 0} == first.to_dict() | {"train_seconds": 0}


@pytest.mark.parametrize("method, parts", [
    ("erm", (OneDescentUpdate, UniformSampler, NoMixer, NoWeights)),
    ("gils+cb", (TwoDescentUpdate, UniformSampler, NoMixer, ClassBalanced)),
    ("cutout+hws+groupdro", (OneDescentUpdate, HardnessWeightedSampler, CutoutMixer, GroupDro)),
])
def test_a_run_holds_the_parts_its_method_names_and_each_familys_default_otherwise(digits, method, parts):
    prepared = prepare(TrainConfig(method=method, device="cpu"), digits)
    assert tuple(type(part) for part in (prepared.update, prepared.sampler, prepared.mixer, prepared.weights)) == parts
