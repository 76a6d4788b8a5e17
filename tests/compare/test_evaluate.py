"""evaluate, report --compare, best and train --from-study: a real tiny study (real Ax, real PyTorch, a real
SQLite file), re-trained over seeds in real processes."""
import functools
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pipeline.training.metrics import evaluate as accuracy_of
from pipeline.training.models import build_model
from pipeline.report.study_tables import compare_table
from pipeline.compare.stats import mean_interval
from pipeline.store import Store
from pipeline.spec.study_config import parse_study
import helpers
from helpers import rare_class_run, study_file, evaluations



robust_tune = functools.partial(helpers.robust_tune, columns=160)


@pytest.fixture
def db(tuned, tmp_path) -> Path:
    """A copy of the session's tuned study (conftest's `tuned`: ls on TUNED_LS, two trials)."""
    copy = tmp_path / "study.db"
    shutil.copy(tuned, copy)
    return copy


def test_mean_and_interval_match_a_hand_computation():
    # mean 0.83333; sample sd sqrt(0.0018667 / 2) = 0.030551; t(0.975, 2 df) = 4.302653 (any t table);
    # half-width 4.302653 * 0.030551 / sqrt(3) = 0.075893.
    mean, half = mean_interval([0.80, 0.84, 0.86])
    assert mean == pytest.approx(0.833333, abs=1e-6)
    assert half == pytest.approx(0.075893, abs=1e-5)
    assert mean_interval([0.7]) == (0.7, None)


def test_the_paired_difference_uses_matched_seeds_only(tmp_path):
    store = Store(str(tmp_path / "paired.db"))
    study = store.create_study(parse_study({"name": "s", "method": {"name": "ls"}}, "s.toml"))
    counts = {str(c): 100 for c in range(10)} | {"3": 5}
    tuned = {0: (0.90, 0.5), 1: (0.80, 0.6), 2: (0.99, 0.9)}
    erm = {0: (0.85, 0.2), 1: (0.78, 0.1)}  # seed 2 was not run for erm: it must not enter the difference
    for variant, runs in (("tuned", tuned), ("erm", erm)):
        for seed, (accuracy, rare) in runs.items():
            assert store.add_evaluation(study.id, variant, seed, 0, {}, rare_class_run(accuracy, rare), counts)
    assert not store.add_evaluation(study.id, "erm", 0, 0, {}, rare_class_run(0.1, 0.1), counts)  # never replaced

    row = compare_table(store).records[0]
    assert row["variant"] == "tuned" and row["seeds"] == [0, 1, 2]
    difference = row["difference"]["test_accuracy"]
    assert difference["seeds"] == [0, 1]
    assert difference["mean"] == pytest.approx(((0.90 - 0.85) + (0.80 - 0.78)) / 2)
    # differences 0.05 and 0.02: sd 0.021213, t(0.975, 1 df) = 12.7062, half-width 0.19059: contains 0
    assert difference["half_width"] == pytest.approx(12.7062 * 0.0212132 / math.sqrt(2), rel=1e-4)
    assert difference["contains_zero"]
    rare = row["metrics"]["smallest_class_accuracy"]  # class 3, the fewest training examples
    assert rare["values"] == [0.5, 0.6, 0.9]
    assert row["difference"]["smallest_class_accuracy"]["mean"] == pytest.approx(0.4)


def test_evaluate_inherits_the_shared_settings_varies_one_and_a_second_call_runs_nothing(db, cli):
    done = robust_tune("evaluate", "tiny", "--db", str(db), "--seeds", "2", "--against", "erm,hws",
                       "--baseline-param", "beta=2", "--vary", "alpha=0.3", "--device", "cpu")
    assert done.returncode == 0, done.stderr
    assert "Evaluation over seeds" in done.stdout and "run 8 of 8" in done.stderr

    store = Store(str(db))
    study = store.study("tiny")
    best = next(t for t in store.trials(study.id) if t.metrics["val_accuracy"] == max(
        u.metrics["val_accuracy"] for u in store.trials(study.id)))
    runs = {(e.variant, e.seed): e.settings for e in store.evaluations(study.id)}
    assert sorted(runs) == sorted((v, s) for v in ("tuned", "erm", "hws", "alpha=0.3") for s in (0, 1))
    tuned, erm, hws = runs[("tuned", 0)].params, runs[("erm", 1)].params, runs[("hws", 0)].params
    assert tuned["alpha"] == pytest.approx(best.parameters["alpha"])
    for baseline in (erm, hws):  # the shared settings come from the best trial, not the defaults
        assert baseline["epochs"] == 1 and baseline["lr_head"] == 0.05 and "alpha" not in baseline
    assert hws["beta"] == 2.0 and runs[("hws", 0)].method == "hws"
    assert runs[("alpha=0.3", 1)].params["alpha"] == 0.3 and runs[("alpha=0.3", 1)].params["lr_head"] == 0.05
    assert runs[("tuned", 1)].seed == 1

    before = evaluations(db)
    again = robust_tune("evaluate", "tiny", "--db", str(db), "--seeds", "2", "--against", "erm,hws",
                        "--baseline-param", "beta=2", "--vary", "alpha=0.3", "--device", "cpu")
    assert again.returncode == 0 and "nothing was changed" in again.stdout
    assert evaluations(db) == before

    other = robust_tune("evaluate", "tiny", "--db", str(db), "--seeds", "2", "--against", "hws",
                        "--baseline-param", "beta=3")
    assert other.returncode == 2 and len(other.stderr.strip().splitlines()) == 1
    assert "stored from trial" in other.stderr and "params" in other.stderr
    assert evaluations(db) == before
    assert {settings.threads for settings in runs.values()} == {best.settings.threads}  # the best trial's
    code, _, err = cli("evaluate", "tiny", "--db", str(db), "--seeds", "3", "--threads", "2", "--device", "cpu")
    assert code == 2 and err.count("\n") == 1 and "variant tuned seed 0 is stored trained with 1 torch thread(s)" in err
    assert evaluations(db) == before  # runs summed in another order are not mixed into the comparison

    for fmt in ("markdown", "csv", "latex", "json"):
        shown = robust_tune("report", "--compare", "--db", str(db), "--format", fmt, "--baseline", "erm")
        assert shown.returncode == 0, shown.stderr
        assert "alpha=0.3" in shown.stdout
    records = json.loads(robust_tune("report", "--compare", "--db", str(db), "--format", "json").stdout)[0]["rows"]
    assert [r["variant"] for r in records][0] == "tuned" and records[0]["baseline"] == "erm"
    assert records[0]["difference"]["test_accuracy"]["seeds"] == [0, 1]
    assert r"$\pm$" in robust_tune("report", "--compare", "--db", str(db), "--format", "latex").stdout


def test_a_killed_evaluate_resumes_with_no_duplicate_and_no_lost_run(db):
    killed = robust_tune("evaluate", "tiny", "--db", str(db), "--seeds", "3", "--against", "erm", "--device", "cpu",
                         env={"ROBUST_TUNE_KILL_AT": "after-evaluation-2"})
    assert killed.returncode == -9  # SIGKILL right after the second run was stored
    kept = evaluations(db)
    assert len(kept) == 2
    done = robust_tune("evaluate", "tiny", "--db", str(db), "--seeds", "3", "--against", "erm", "--device", "cpu")
    assert done.returncode == 0, done.stderr
    assert "2 already stored, 4 to run" in done.stderr
    after = evaluations(db)
    assert after[:2] == kept and len(after) == 6  # the stored runs untouched, the missing ones added once
    assert len({(variant, seed) for _, variant, seed, _ in after}) == 6


def test_bad_evaluate_options_are_one_line_and_exit_2(db):
    for args, words in ((["--against", "nope"], "unknown method"), (["--vary", "alpha"], "malformed --vary"),
                        (["--vary", "beta=1"], "takes no parameter beta"), (["--seeds", "0"], "between 1 and 1000"),
                        (["--baseline-param", "beta=2"], "no --against method takes it")):
        done = robust_tune("evaluate", "tiny", "--db", str(db), *args)
        assert done.returncode == 2 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1, args
    assert robust_tune("evaluate", "other", "--db", str(db)).returncode == 2
    assert evaluations(db) == []


def test_val_fraction_zero_is_refused_with_a_val_objective_and_ranks_on_test_otherwise(tmp_path):
    path = study_file(tmp_path, "paper", "erm", "epochs = { low = 1, high = 2 }", trials=1)
    text = path.read_text().replace('name = "digits"', 'name = "digits"\nval_fraction = 0')
    path.write_text(text.replace('seed = 0', 'seed = 0\nobjective = "val_accuracy"', 1))
    refused = robust_tune("run", str(path), "--db", str(tmp_path / "x.db"))
    assert refused.returncode == 2 and "val_fraction = 0" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.db").exists()

    path.write_text(text.replace('seed = 0', 'seed = 0\nobjective = "test_accuracy"', 1))
    db = tmp_path / "paper.db"
    done = robust_tune("run", str(path), "--db", str(db), "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    assert done.returncode == 0, done.stderr
    trial = Store(str(db)).trials(Store(str(db)).study("paper").id)[0]
    assert "val_accuracy" not in trial.metrics and trial.metrics["test_accuracy"] > 0.3
    assert trial.epochs and all(e.val_accuracy is None for e in trial.epochs)
    assert "(no val split) *" in robust_tune("studies", "--db", str(db)).stdout
    assert "no val split *" in robust_tune("report", "--db", str(db), "--format", "csv").stdout


def test_best_toml_fixes_every_parameter_writes_only_what_the_study_used_and_trains_as_the_best_trial(db, tmp_path):
    shown = robust_tune("best", "tiny", "--db", str(db))
    assert shown.returncode == 0, shown.stderr
    assert "\nlr_head = 0.05\n" in shown.stdout  # fixed in the study
    assert re.search(r"^alpha = [\d.e-]+$", shown.stdout, re.M)  # searched: fixed at the best trial's value, alone
    assert "(the study tuned alpha)" in shown.stdout
    for unused in ("searched", "low =", "imbalance_keep", "rare_kept", "image_size", "cache_dir", "[search]",
                   "[budget]", "search_seed"):  # no rare class, digits are arrays, nothing left to search
        assert unused not in shown.stdout, unused
    path = tmp_path / "best.toml"
    path.write_text(shown.stdout)
    trained = robust_tune("train", "--study-file", str(path), "--device", "cpu", "--format", "json")
    assert trained.returncode == 0, trained.stderr
    again = robust_tune("train", "--from-study", "tiny", "--db", str(db), "--device", "cpu", "--format", "json")
    for key in ("val_accuracy", "test_accuracy", "test_worst_class_accuracy"):
        assert json.loads(trained.stdout)[key] == json.loads(again.stdout)[key]  # the same configuration

    refused = robust_tune("run", str(path), "--db", str(tmp_path / "again.db"))
    assert refused.returncode == 2 and "robust-tune train --study-file" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "again.db").exists()
    settings = json.loads(robust_tune("best", "tiny", "--db", str(db), "--format", "json").stdout)
    assert settings["train"]["params"]["lr_head"] == 0.05 and settings["train"]["method"] == "ls"


def test_best_toml_keeps_the_rare_class_and_the_image_settings_a_study_used():
    from pipeline.config import DataConfig

    rare = DataConfig(name="digits", imbalance_class="3", imbalance_keep=0.05).used()
    assert rare["imbalance_keep"] == 0.05 and rare["imbalance_in"] == "train" and "image_size" not in rare
    images = DataConfig(name="images", root="x", image_size=16).used()
    assert images["image_size"] == 16 and images["test_fraction"] == 0.2 and "imbalance_keep" not in images
    assert "test_fraction" not in DataConfig(name="images", manifest="m").used()
    assert "val_fraction" not in DataConfig(name="medmnist", path="a.npz").used()


def test_train_from_study_reproduces_the_best_trial_and_saves_weights_that_load(db, tmp_path, digits):
    store = Store(str(db))
    trials = store.trials(store.study("tiny").id)
    best = max(trials, key=lambda t: (t.metrics["val_accuracy"], -t.trial_index))
    weights = tmp_path / "model.pt"
    done = robust_tune("train", "--from-study", "tiny", "--db", str(db), "--device", "cpu", "--format", "json",
                       "--save", str(weights), env={"OMP_NUM_THREADS": "2"})  # whatever this process's threads
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    for key in ("val_accuracy", "test_accuracy", "test_worst_class_accuracy"):
        assert result[key] == best.metrics[key]  # the same code path, the same seed: the same numbers on CPU
    assert result["epoch_train_loss"] == [e.train_loss for e in best.epochs]
    assert result["settings"] == best.settings.to_dict()

    saved = torch.load(weights, weights_only=True)
    assert saved["settings"]["params"]["alpha"] == pytest.approx(best.parameters["alpha"])
    model = build_model("small_cnn", "none", 1, 10)
    model.load_state_dict(saved["state_dict"])  # strict: every tensor of the same network
    assert accuracy_of(model, digits.test, digits.class_names).accuracy == result["test_accuracy"]

    again = robust_tune("train", "--from-study", "tiny", "--db", str(db), "--save", str(weights))
    assert again.returncode == 2 and "never replaces" in again.stderr
    clash = robust_tune("train", "--from-study", "tiny", "--db", str(db), "--method", "gils")
    assert clash.returncode == 2 and "--method does not go with --from-study" in clash.stderr
    other = robust_tune("train", "--from-study", "tiny", "--db", str(db), "--trial", "7")
    assert other.returncode == 2 and "no completed trial 7" in other.stderr


@pytest.fixture(scope="module")
def evaluated(tuned, tmp_path_factory) -> Path:
    """The session's study with one seed of its best configuration evaluated (never changed: tests copy it)."""
    db = tmp_path_factory.mktemp("evaluated") / "study.db"
    shutil.copy(tuned, db)
    done = robust_tune("evaluate", "tiny", "--db", str(db), "--seeds", "1", "--device", "cpu")
    assert done.returncode == 0, done.stderr
    return db


@pytest.mark.parametrize("args", [["report", "--compare"], ["best", "tiny"], ["studies"]])
def test_reading_commands_import_neither_torch_nor_ax_and_change_nothing(evaluated, tmp_path, args):
    db = tmp_path / "study.db"
    shutil.copy(evaluated, db)
    before = db.read_bytes()
    probe = ("import sys\nfrom cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
             "    code = e.code\nprint(code, sorted(m for m in ('torch', 'torchvision', 'ax') if m in sys.modules),"
             " file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe, *args, "--db", str(db)], capture_output=True, text=True,
                          timeout=120)
    assert done.stderr.splitlines()[-1] == "0 []", done.stderr
    assert db.read_bytes() == before
