"""`robust-tune predict`: a model saved by `train --save` applied to image files gives the trained network's own
outputs, on a labelled folder the metrics `train` reported, and bad input is one line and exit 2."""
from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image
from sklearn.datasets import load_digits

from pipeline.config import DataConfig
from pipeline.data import load_dataset
from pipeline.data.images import folder_listing
from pipeline.training.models import build_model

CLASSES = ("0", "1", "3", "8", "9")  # digits a small network confuses, so accuracy is neither 0 nor 100%
TRAIN = ("--dataset", "images", "--image-size", "8", "--cache-dir", "", "--device", "cpu", "-p", "epochs=2",
         "-p", "lr_head=0.05", "-p", "lr_backbone=0.01", "-p", "batch_size=16")


def write_digit_folder(root, per_class: int = 20):
    """scikit-learn's 8x8 digits as grayscale PNGs, root/<digit>/<index>.png: a real, tiny image folder."""
    digits = load_digits()
    for name in CLASSES:
        (root / name).mkdir(parents=True)
        for i in np.nonzero(digits.target == int(name))[0][:per_class]:
            pixels = (digits.images[i] * 255 / 16).round().astype(np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A digit folder, a model trained on it and saved, and what `train --format json` reported."""
    from cli.main import main

    folder = tmp_path_factory.mktemp("predict")
    root = write_digit_folder(folder / "digits")
    saved = folder / "model.pt"
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main(["train", *TRAIN, "--root", str(root), "--save", str(saved), "--format", "json"])
    assert done.value.code == 0
    return root, saved, json.loads(out.getvalue())


def data_config(root) -> DataConfig:
    return DataConfig(name="images", root=str(root), image_size=8, cache_dir="", normalize="dataset")


def test_predictions_are_the_trained_networks_own_outputs(cli, trained, tmp_path):
    root, saved, result = trained
    data = load_dataset(data_config(root), torch.device("cpu"))  # the training code path: its split, its statistics
    listing = folder_listing(data_config(root))
    model = build_model("small_cnn", "none", data.in_channels, data.num_classes)
    model.load_state_dict(torch.load(saved, weights_only=True)["state_dict"])
    with torch.no_grad():
        expected = model.eval()(data.test.inputs()).softmax(dim=1)
    test_files = [listing.files[i] for i in listing.test.tolist()]
    out = tmp_path / "predictions.csv"
    code, _, err = cli("predict", "--weights", str(saved), *map(str, test_files), "--out", str(out), "--device", "cpu")
    assert code == 0, err
    rows = list(csv.reader(out.open()))
    assert rows[0] == ["path", "predicted", *(f"p_{c}" for c in CLASSES)]
    assert [row[0] for row in rows[1:]] == [str(f) for f in test_files]  # one row per image, in order
    probabilities = torch.tensor([[float(v) for v in row[2:]] for row in rows[1:]])
    assert torch.allclose(probabilities, expected, atol=1e-5)
    assert [row[1] for row in rows[1:]] == [CLASSES[i] for i in expected.argmax(dim=1).tolist()]
    assert torch.allclose(probabilities.sum(dim=1), torch.ones(len(test_files)), atol=1e-4)
    accuracy = (expected.argmax(dim=1) == data.test.labels).float().mean().item()
    assert accuracy == pytest.approx(result["test_accuracy"])  # the network train measured, not another
    assert 0.2 < accuracy < 1  # a model whose classes can be told apart, and wrong on some images


def test_labelled_folder_of_the_test_split_gives_trains_test_metrics(cli, trained, tmp_path):
    root, saved, result = trained
    listing = folder_listing(data_config(root))
    labelled = tmp_path / "test-split"
    for i in listing.test.tolist():
        source = listing.files[i]
        (labelled / source.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(source, labelled / source.parent.name / source.name)
    code, out, err = cli("predict", "--weights", str(saved), "--labelled", str(labelled), "--device", "cpu",
                         "--format", "json")
    assert code == 0, err
    metrics = json.loads(out)
    for key in ("accuracy", "balanced_accuracy", "worst_class_accuracy", "per_class_accuracy", "examples"):
        assert metrics[key] == result[f"test_{key}"], key
    code, out, err = cli("predict", "--weights", str(saved), "--labelled", str(labelled), "--device", "cpu")
    assert code == 0, err
    assert f"{100 * result['test_accuracy']:.1f}" in out and "worst class" in out and "class 8" in out


def test_terminal_table_fits_80_columns_and_counts_the_rest(trained):
    from helpers import robust_tune

    root, saved, _ = trained
    done = robust_tune("predict", "--weights", str(saved), root.name, "--device", "cpu", env={"COLUMNS": "80"},
                       cwd=root.parent)  # paths as a user in that folder types them
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "p_9" in lines[0] and sum(".png" in line for line in lines) == 20
    assert f"and {len(CLASSES) * 20 - 20} more images" in done.stdout


def test_save_writes_what_applying_the_model_needs(trained):
    root, saved, _ = trained
    card = torch.load(saved, weights_only=True)["model_card"]
    data = load_dataset(data_config(root), torch.device("cpu"))
    assert card["class_names"] == list(CLASSES) and card["num_classes"] == 5
    assert card["pixel_mean"] == list(data.pixel_mean) and card["pixel_std"] == list(data.pixel_std)
    assert (card["image_size"], card["channels"], card["backbone"], card["data_set"]) == (8, 3, "small_cnn", "images")


def test_bad_input_is_one_line_and_exit_2(cli, trained, tmp_path):
    root, saved, _ = trained
    old = tmp_path / "old.pt"
    state = torch.load(saved, weights_only=True)
    torch.save({"state_dict": state["state_dict"], "settings": state["settings"]}, old)  # saved before the card
    (tmp_path / "empty").mkdir()
    (tmp_path / "corrupt.png").write_bytes(b"not a png")
    (tmp_path / "notes.txt").write_text("hello")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    unknown = tmp_path / "unknown"
    shutil.copytree(root / "0", unknown / "0")
    shutil.copytree(root / "1", unknown / "7")
    image = str(next((root / "0").iterdir()))
    cases = [
        (["--weights", str(saved), str(tmp_path / "missing.png")], "not found"),
        (["--weights", str(saved), str(tmp_path / "corrupt.png")], "cannot read image"),
        (["--weights", str(saved), str(tmp_path / "notes.txt")], "not an image file"),
        (["--weights", str(saved), str(tmp_path / "empty")], "holds no images"),
        (["--weights", str(tmp_path / "notes.txt"), image], "not a file written by torch.save"),
        (["--weights", str(tmp_path / "other.pt"), image], "is not a model saved by robust-tune train --save"),
        (["--weights", str(old), image], "train it again with train --save"),
        (["--weights", str(saved), "--labelled", str(unknown)], "class folder '7'"),
    ]
    for args, words in cases:
        code, out, err = cli("predict", *args, "--device", "cpu")
        assert code == 2, (args, out, err)
        assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (args, err)
