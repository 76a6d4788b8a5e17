"""`robust-tune train --dataset images` end to end on a prepared fake MT-Defect split."""
import json

import pytest

from pipeline.data.paper_splits import MT_DEFECT


@pytest.fixture(scope="module")
def splits(mt_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("splits")
    from cli.main import main

    with pytest.raises(SystemExit) as done:
        main(["data", "prepare", "mt", "--root", str(mt_root), "--out", str(out), "--seed", "5"])
    assert done.value.code == 0
    return out


def test_one_epoch_of_resnet18_on_a_prepared_mt_defect_split(cli, splits, tmp_path):
    code, out, err = cli("train", "--dataset", "images", "--manifest", str(splits / "mt-defect"),
                         "--image-size", "32", "--backbone", "resnet18", "--weights", "none",
                         "--param", "epochs=1", "--device", "cpu", "--flip", "--crop-padding", "2",
                         "--cache-dir", str(tmp_path / "cache"), "--format", "json")
    assert code == 0, err
    metrics = json.loads(out)
    assert metrics["test_examples"] == sum(n for _, n in MT_DEFECT.values())
    assert set(metrics["test_per_class_accuracy"]) == set(MT_DEFECT)
    data = metrics["settings"]["data"]
    assert data["normalize"] == "dataset" and data["image_size"] == 32 and data["augment_flip"] is True
    assert len(list((tmp_path / "cache").glob("mt-defect-32px-*.pt"))) == 1


def test_a_corrupt_image_in_a_split_stops_train_with_exit_2_naming_it(cli, mt_root, tmp_path):
    import shutil

    root = tmp_path / "raw"
    shutil.copytree(mt_root, root)
    code, _, err = cli("data", "prepare", "mt", "--root", str(root), "--out", str(tmp_path / "splits"))
    assert code == 0, err
    first = (tmp_path / "splits" / "mt-defect" / "images.txt").read_text().split("\n")[0].split(" ", 1)[1]
    (root / first).write_bytes(b"not a jpeg at all")
    code, out, err = cli("train", "--dataset", "images", "--manifest", str(tmp_path / "splits" / "mt-defect"),
                         "--image-size", "16", "--cache-dir", "", "--device", "cpu")
    assert code == 2 and out == ""
    assert f"cannot read image {root / first}" in "".join(err.splitlines())


def test_images_without_root_or_manifest_is_exit_2(cli):
    code, _, err = cli("train", "--dataset", "images")
    assert code == 2 and "needs root" in err


def test_a_two_trial_study_on_a_prepared_mt_defect_split(cli, splits, tmp_path):
    study = tmp_path / "mt.toml"
    study.write_text(f"""
name = "mt-defect-resnet18"
[data]
name = "images"
manifest = "{splits / 'mt-defect'}"
image_size = 32
cache_dir = "{tmp_path / 'cache'}"
[model]
backbone = "resnet18"
weights = "none"
[method]
name = "gils"
[params]
epochs = 1
perturb = "feature"
[budget]
trials = 2
initial = 2
""")
    db = tmp_path / "runs.db"
    code, out, err = cli("run", str(study), "--db", str(db), "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    code, out, _ = cli("report", "--db", str(db), "--format", "json", "--all-trials")
    best, *_, trials = json.loads(out)
    assert best["rows"][0]["dataset"] == "mt-defect" and best["rows"][0]["network"] == "resnet18"
    assert [t["status"] for t in trials["rows"]] == ["completed", "completed"]
    assert set(trials["rows"][0]["per_class"]["test"]) == set(MT_DEFECT)


def test_train_warns_in_one_line_about_a_class_too_thin_to_measure(cli):
    """Digit 3 kept at 5% in training and validation: 2 validation images, one line says what that means."""
    code, out, err = cli("train", "--method", "erm", "-p", "epochs=1", "--imbalance-class", "3",
                         "--imbalance-keep", "0.05", "--imbalance-in", "train+val", "--device", "cpu")
    assert code == 0, err
    warnings = [line for line in (out + err).splitlines() if line.startswith("warning: fewer than 5")]
    assert len(warnings) == 1 and "'3' (2 val)" in warnings[0], out
