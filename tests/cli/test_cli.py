"""`robust-tune train` and `robust-tune methods` through the real command line."""
import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import markdown_rows

METHOD_ARGS = {
    "erm": [],
    "ls": ["--param", "alpha=0.2"],
    "gils": ["--param", "alpha=0.3", "--param", "T=2", "--param", "eta=2.0"],
    "hws": ["--param", "beta=10"],
    "gils+hws": ["--param", "T=1", "--param", "perturb=feature", "--param", "beta=1"],
}


@pytest.mark.parametrize("method", METHOD_ARGS)
def test_two_epoch_train_of_each_method_prints_metrics_as_json(cli, method):
    code, out, err = cli("train", "--dataset", "digits", "--method", method, "--param", "epochs=2",
                         "--device", "cpu", *METHOD_ARGS[method], "--format", "json")
    assert code == 0, err
    metrics = json.loads(out)
    for key in ("test_accuracy", "val_accuracy", "test_worst_class_accuracy", "test_balanced_accuracy"):
        assert 0 <= metrics[key] <= 1
    assert len(metrics["epoch_train_loss"]) == 2
    assert metrics["settings"]["method"] == method


def test_train_prints_a_table_with_per_class_rows(cli):
    code, out, _ = cli("train", "--method", "ls", "--param", "epochs=1", "--imbalance-class", "3",
                       "--imbalance-keep", "0.05")
    assert code == 0
    assert "worst class" in out and "class 3" in out and "alpha=0.1" in out.replace("\n", "")


def test_methods_lists_every_parameter(cli):
    code, out, _ = cli("methods")
    assert code == 0
    for word in ("alpha", "eta", "gamma", "perturb", "beta", "importance_sampling", "[1.5, 3]", "[0.1, 1000] log"):
        assert word in out


def test_train_prints_json_for_format_json_and_refuses_another_format(cli):
    code, out, err = cli("train", "-p", "epochs=1", "--device", "cpu", "--format", "json")
    assert code == 0, err
    assert 0 <= json.loads(out)["test_accuracy"] <= 1
    code, _, err = cli("train", "--format", "yaml")
    assert code == 2 and "unknown format 'yaml'; known: table, json" in err


def test_train_set_takes_any_data_field_as_a_study_file_does(cli):
    by_option = cli("train", "-p", "epochs=1", "--device", "cpu", "--split-seed", "3", "--format", "json")
    by_set = cli("train", "-p", "epochs=1", "--device", "cpu", "--set", "data.split_seed=3", "--format", "json")
    assert by_option[0] == by_set[0] == 0
    assert json.loads(by_option[1])["test_accuracy"] == json.loads(by_set[1])["test_accuracy"]
    assert json.loads(by_set[1])["settings"]["data"]["split_seed"] == 3
    for bad, says in [("data.chanels=1", "data.chanels: unknown field"), ("channels=1", "takes data.FIELD=VALUE"),
                      ("data.channels=2", "--set data.channels: must be 1 or 3")]:
        code, _, err = cli("train", "--set", bad)
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err


def test_methods_gives_the_title_of_every_paper_a_part_cites(cli):
    from pipeline.methods.declarations import FAMILIES, PAPERS

    code, out, _ = cli("methods")
    flat = " ".join(out.split())
    described = " ".join(part.source + " ".join(p.help for p in part.params)
                         for registry in FAMILIES.values() for part in registry.values())
    cited = re.findall(r"[A-Z][A-Za-z]+(?: and [A-Z][A-Za-z]+| et al\.) \d{4}"
                       r"|(?:GI-LS|hardness-weighted sampling) paper", described)
    assert set(re.findall(r"([\w-]+) paper\b", described)) <= {"GI-LS", "sampling", "the"}  # "the paper": its part's
    assert cited and all(name in PAPERS for name in cited), sorted(set(cited) - set(PAPERS))
    assert all(name in described for name in PAPERS)  # no title for a paper nothing cites
    for title in PAPERS.values():
        assert " ".join(title.split()) in flat


@pytest.mark.parametrize("args, message", [
    (["--method", "sgd"], "unknown method 'sgd'"),
    (["--dataset", "mnist"], "--dataset: must be one of digits, images, idx, medmnist, got 'mnist' (did you mean "
                             "medmnist?)"),
    (["--method", "gils", "--param", "alpha=1.0"], "alpha must be in [0, 1)"),
    (["--method", "gils", "--param", "T=-1"], "T must be in [0, 100]"),
    (["--method", "gils", "--param", "eta=0"], "eta must be in (0, inf)"),
    (["--method", "ls", "--param", "beta=3"], "unknown parameter 'beta'"),
    (["--param", "alpha"], "malformed --param 'alpha'"),
    (["--backbone", "vgg"], "unknown backbone 'vgg'"),
    (["--imbalance-class", "12"], "--imbalance-class: unknown class '12' (did you mean 2?)"),
    (["--device", "tpu"], "unknown device 'tpu'"),
    (["--imbalance-class", "3", "--imbalance-in", "val"], "--imbalance-in: must be one of train, train+val"),
    (["--precision", "fp23"], "unknown precision 'fp23' (did you mean fp32?)"),
    (["--format", "jsn"], "unknown format 'jsn' (did you mean json?)"),
    (["--epochs", "3"], "No such option"),
])
def test_bad_input_is_one_line_and_exit_code_2(cli, args, message):
    code, out, err = cli("train", *args)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in err
    assert out == ""


def test_console_script_runs_as_installed(tmp_path):
    """The real entry point, in a fresh process, as a user or a script would call it."""
    script = Path(sys.executable).with_name("robust-tune")
    done = subprocess.run([str(script), "train", "--method", "hws", "--param", "beta=10", "--param", "epochs=1",
                           "--format", "json"], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "COLUMNS": "120"}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert 0 <= json.loads(done.stdout)["test_accuracy"] <= 1
    bad = subprocess.run([str(script), "train", "--method", "gils", "--param", "T=-1"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "T must be" in bad.stderr


def test_bench_measures_every_method_against_erm(cli):
    """The benchmark runs end to end (its figures are for the README, not asserted here)."""
    code, out, err = cli("bench", "steps", "--setting", "digits", "--rounds", "1", "--steps", "2", "--format",
                         "markdown")
    assert code == 0, err
    rows = markdown_rows(out)
    from pipeline.bench.steps import CASES

    assert rows[0][0].startswith("small_cnn") and all(row[0] == "" for row in rows[1:])  # named once
    assert len(rows) == len(CASES) + 2 and rows[0][1] == "erm" and rows[0][5] == "1.00x"
    assert any(row[1] == "gils input T=15" and "ideal" in row[-1] for row in rows)
    for part in ("mixup", "cutmix", "cutout", "fgsm", "pgd", "pgdl2", "cw", "gils+pgd"):  # a row per new part
        assert any(row[1].startswith(part) for row in rows), part
    assert rows[-1][1] == "plain DataLoader loop (ERM)"
    assert cli("bench", "steps", "--setting", "vgg")[0] == 2


def test_bench_paper_setting_times_erm_and_gils_at_two_precisions(cli):
    """One step of ResNet18 at 16 px and batch 2 on the CPU (the default adds ResNet34 and 50): the rows
    exist, each precision against ERM at its own."""
    code, out, err = cli("bench", "steps", "--setting", "paper", "--backbone", "resnet18", "--rounds", "1",
                         "--steps", "1", "--batch-size", "2", "--image-size", "16", "--device", "cpu",
                         "--precision", "fp32", "--precision", "bf16", "--format", "markdown")
    assert code == 0, err
    rows = markdown_rows(out)
    assert [(row[1], row[2]) for row in rows] == [
        (case, precision) for precision in ("fp32", "bf16")
        for case in ("erm", "gils input T=1", "gils input T=5", "gils input T=15")]
    assert rows[0][0] == "resnet18, MT-Defect-sized uint8 16px (3, 16, 16), batch 2"
    assert all(row[0] == "" for row in rows[1:])
    assert all(row[5] == "1.00x" for row in rows if row[1] == "erm") and all(float(row[4]) > 0 for row in rows)
    assert cli("bench", "steps", "--precision", "fp8")[0] == 2
    assert cli("bench", "steps", "--backbone", "vgg")[0] == 2


def test_a_diverging_run_is_one_line_and_exit_code_1(cli):
    code, out, err = cli("train", "--param", "lr_head=1e38", "--param", "lr_backbone=1e38", "--param", "epochs=1")
    assert code == 1 and out == "" and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]  # after the counts per class, printed before training
    assert lines[0] == "examples per split and class:" and lines[-1] == (
        "training failed: training loss is nan at epoch 1; lower the learning rates")
    assert not any(line.startswith("training failed") for line in lines[:-1])
