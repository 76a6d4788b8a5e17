"""A run that blows up with a finite loss fails with its reason; a poor but sane run does not."""
import pytest
import torch

from pipeline.config import DataConfig, TrainConfig
from pipeline.data import load_dataset
from pipeline.store import Store
from pipeline.search.study import run_study
from pipeline.spec.study_config import load_study
from pipeline.training.trainer import TrainingDiverged, check_collapsed, train
from helpers import study_file


def test_a_finite_but_huge_loss_fails_the_run(digits):
    with pytest.raises(TrainingDiverged, match=r"training loss is .* above 230 \(100 x log 10"):
        train(TrainConfig(method="erm", params={"epochs": 1, "lr_head": 1e6}, device="cpu"), digits)


def test_a_badly_trained_one_epoch_model_on_imbalanced_digits_is_kept():
    imbalanced = load_dataset(DataConfig(imbalance_class="3", imbalance_keep=0.05), torch.device("cpu"))
    for params in ({"epochs": 1}, {"epochs": 1, "lr_head": 1e-4, "lr_backbone": 0.0}, {"epochs": 1, "lr_head": 1.0}):
        result = train(TrainConfig(method="erm", params=params, device="cpu"), imbalanced)
        assert result.val.accuracy < 0.9  # poor, and still stored as a result


def test_one_predicted_class_fails_only_with_a_loss_twice_a_uniform_guess(digits):
    labels = digits.val.labels
    one_class = torch.full_like(labels, 4)
    with pytest.raises(TrainingDiverged, match="predicts class 4 for every validation example"):
        check_collapsed(one_class, labels, 5.0, digits.class_names)
    check_collapsed(one_class, labels, 3.0, digits.class_names)  # oscillating or slow, not collapsed
    check_collapsed(labels, labels, 50.0, digits.class_names)  # several classes predicted
    check_collapsed(one_class, torch.full_like(labels, 4), 5.0, digits.class_names)  # one class present


def test_train_of_a_diverging_run_is_one_line_and_exit_code_1(cli):
    code, out, err = cli("train", "--method", "erm", "-p", "epochs=1", "-p", "lr_head=1e6", "--device", "cpu")
    lines = err.strip().splitlines()  # the counts per class come before training, then the failure in one line
    assert code == 1 and out == "" and lines[0] == "examples per split and class:" and "Traceback" not in err
    assert lines[-1].startswith("training failed: training loss is") and "lower the learning rates" in lines[-1]


def test_a_diverging_trial_is_stored_as_failed_with_its_reason(tmp_path):
    study = load_study(study_file(tmp_path, "blown", "erm",
                                  "epochs = 1\nlr_head = 1e6\nmomentum = { low = 0.5, high = 0.9 }",
                                  trials=1, max_failures=1))
    db = str(tmp_path / "runs.db")
    summary = run_study(study, db, "cpu", log_file=tmp_path / "ax.log")
    (trial,) = Store(db).trials(Store(db).study("blown").id)
    assert trial.status == "failed" and trial.metrics is None and summary.failed == 1
    assert trial.error.startswith("TrainingDiverged: training loss is") and "above 230" in trial.error
