"""A model saved by `train --save` starts a new run through `train --weights` (it read 18 missing keys, 20
unexpected before): the round trip a user makes after tuning."""
from __future__ import annotations

import torch

from pipeline.training.models import build_model


def test_save_then_weights_starts_from_the_saved_network(cli, tmp_path):
    saved = tmp_path / "model.pt"
    code, _, err = cli("train", "-p", "epochs=1", "--device", "cpu", "--save", str(saved))
    assert code == 0, err
    code, out, err = cli("train", "-p", "epochs=1", "--device", "cpu", "--weights", str(saved), "--format", "json")
    assert code == 0, err
    state = torch.load(saved, weights_only=True)["state_dict"]
    loaded = build_model("small_cnn", str(saved), 1, 10)
    trunk = {f"features.{key}": value for key, value in loaded.features.state_dict().items()}
    assert trunk and all(torch.equal(value, state[key]) for key, value in trunk.items())  # every trunk weight


def test_a_saved_resnet_on_grayscale_images_loads_into_the_same_network(tmp_path):
    model = build_model("resnet18", "none", 1, 3)  # behind RepeatChannels: its keys are features.1.*
    path = tmp_path / "resnet.pt"
    torch.save({"state_dict": model.state_dict(), "settings": {}}, path)
    again = build_model("resnet18", str(path), 1, 3)
    assert all(torch.equal(a, b) for a, b in zip(model.features.state_dict().values(),
                                                  again.features.state_dict().values()))
