"""Adding a part takes one class and one declaration: a weights part declared in this test, registered with
`PARTS.add` (a part of the project is declared in pipeline/methods/declarations.py instead), listed and
trained from the CLI, and checked against its formula."""
import json

import pytest
import torch

from pipeline.methods.declarations import PARTS
from pipeline.methods.parts import Part
from pipeline.params import HParam


class ScaledWeights:
    """Every example weighs `weight_scale`: the step minimises weight_scale x the mean loss."""

    def __init__(self, params, context, train, model, optimizer) -> None:
        self.train, self.scale = train, params["weight_scale"]

    def weigh(self, images: torch.Tensor, targets: torch.Tensor, losses: torch.Tensor) -> torch.Tensor:
        return torch.full_like(losses, self.scale)


SCALED = Part("scaled", "weights", (
    HParam("weight_scale", "float", 2.0, "(0, inf)", "the loss weight of every example"),
), "every example weighs weight_scale", f"{__name__}:ScaledWeights")


@pytest.fixture
def scaled():
    PARTS.add(SCALED)
    yield SCALED
    PARTS.remove(SCALED.name)


def train_json(cli, method: str, *params: str) -> dict:
    args = ["train", "--dataset", "digits", "--method", method, "--param", "epochs=2", "--param", "batch_size=64",
            "--seed", "4", "--device", "cpu", "--format", "json"]
    code, out, err = cli(*args, *(arg for param in params for arg in ("--param", param)))
    assert code == 0, err
    return json.loads(out)


def test_a_weights_part_declared_here_is_listed_and_trains_from_the_cli_as_its_formula_says(cli, scaled):
    """SGD (with momentum, no weight decay) on w x the mean loss at learning rate lr takes the steps of SGD on
    the mean loss at w x lr; w = 2 scales every float exactly, so the two runs agree bit for bit."""
    code, out, _ = cli("methods")
    assert code == 0 and "weights scaled" in out and "weight_scale" in out
    weighted = train_json(cli, "hws+scaled", "weight_scale=2")
    assert weighted["settings"]["method"] == "scaled+hws" and weighted["settings"]["params"]["weight_scale"] == 2.0
    plain = train_json(cli, "hws")
    rates = plain["settings"]["params"]  # the defaults, doubled
    faster = train_json(cli, "hws", f"lr_head={2 * rates['lr_head']!r}", f"lr_backbone={2 * rates['lr_backbone']!r}")
    for key in ("epoch_train_loss", "epoch_val_accuracy", "val_accuracy", "test_accuracy", "distinct_per_batch"):
        assert weighted[key] == faster[key], key
    assert weighted["epoch_train_loss"] != plain["epoch_train_loss"]  # the weights did change the steps
