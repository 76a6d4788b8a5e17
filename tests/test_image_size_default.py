"""`train --image-size` defaults per backbone: small images for the small CNN, 224 px for the ResNets."""
from __future__ import annotations

import json

import numpy as np
from PIL import Image

from pipeline.config import default_image_size


def write_folder(root, classes=("a", "b"), per_class=6, side=24):
    rng = np.random.default_rng(0)
    for name in classes:
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(root / name / f"{i}.png")


def test_train_resizes_for_the_small_cnn_by_default(cli, tmp_path):
    write_folder(tmp_path / "images")
    code, out, err = cli("train", "--dataset", "images", "--root", str(tmp_path / "images"), "--backbone", "small_cnn",
                         "--cache-dir", "", "-p", "epochs=1", "--val-fraction", "0.34", "--test-fraction", "0.34",
                         "--json")
    assert code == 0, err
    assert json.loads(out)["settings"]["data"]["image_size"] == default_image_size("small_cnn") == 32


def test_the_resnets_keep_imagenets_size_and_help_says_so(cli):
    assert default_image_size("resnet18") == default_image_size("resnet50") == 224
    code, out, _ = cli("train", "--help")
    assert code == 0 and "32 for small_cnn and wrn16_1" in " ".join(out.split())
