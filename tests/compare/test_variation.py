"""What a verdict says varies between its pairs (verdict.variation), and the word a campaign says when it starts on
data whose splits resplit cannot vary."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.compare.campaign import CampaignStarted, run_campaign
from pipeline.compare.verdict import variation
from pipeline.spec.campaign_config import CampaignConfig, parse_campaign
from pipeline.store import CampaignRecord
from helpers import stored_before_rare_kept

IDX = {"name": "idx", "root": "data/mnist"}
MANIFEST = {"name": "images", "manifest": "data/splits/mt"}
MEDMNIST = {"name": "medmnist", "path": "data/dermamnist.npz"}
RARE = {"imbalance_class": "3", "imbalance_keep": 0.1}
PAIRS = "pair k trains on seed k and split seed base + k"
DRAWN = "the rare-class examples kept in training, drawn again per pair"


def campaign(data: dict, resplit: bool = True) -> CampaignConfig:
    """A two-method campaign on `data`, as its file would give it."""
    return parse_campaign({"name": "c", "methods": ["ls"], "data": data, "evaluate": {"resplit": resplit},
                           "params": {"epochs": 1, "lr_head": {"low": 0.01, "high": 0.2}}}, "c.toml")


def varies(config: CampaignConfig) -> str:
    """What the verdict of `config`, as stored, says varies between its pairs (before the search's luck)."""
    record = CampaignRecord(1, config.name, config.methods, config.evaluation, config.replicates, config.budget,
                            config.to_dict())
    return variation(record).split("; not the search's luck")[0]


@pytest.mark.parametrize("data, said", [
    (IDX | RARE, f"the training seed, the validation carve (the test set is the data set's own) and {DRAWN}: {PAIRS}"),
    (MANIFEST | RARE, f"the training seed, the validation carve (the test set is the data set's own) and {DRAWN}: "
                      f"{PAIRS}"),
    (IDX | RARE | {"rare_kept": "first"},
     f"the training seed and the validation carve (the test set is the data set's own; training keeps the first "
     f"rare-class examples the carve leaves): {PAIRS}"),
    (IDX, f"the training seed and the validation carve (the test set is the data set's own): {PAIRS}"),
    (RARE, f"the training seed and the whole split: {PAIRS}"),
    (MEDMNIST | RARE, f"the training seed and {DRAWN} (MedMNIST's splits are its own and fixed): {PAIRS}"),
    (MEDMNIST | RARE | {"rare_kept": "first"},
     "the training seed only (MedMNIST's splits are its own and fixed, and so are the rare-class examples kept in "
     "training)"),
    (MEDMNIST, "the training seed only (MedMNIST's splits are its own and fixed)"),
])
def test_the_verdict_says_what_resplit_varies_on_each_kind_of_data(data, said):
    assert varies(campaign(data)) == said


def test_a_campaign_stored_before_rare_kept_is_said_to_keep_the_first_rare_examples_and_one_split_varies_nothing():
    assert "training keeps the first rare-class examples" in varies(stored_before_rare_kept(campaign(IDX | RARE)))
    assert varies(stored_before_rare_kept(campaign(MEDMNIST | RARE))).startswith("the training seed only")
    for data in (IDX | RARE, MEDMNIST | RARE):
        assert varies(campaign(data, resplit=False)).startswith("the training seed only")


def write_archive(path: Path) -> Path:
    """A MedMNIST archive of three classes, 8x8 gray images: 30 to train, 6 to validate and 6 to test on."""
    rng = np.random.default_rng(0)
    arrays = {}
    for part, n in (("train", 30), ("val", 6), ("test", 6)):
        arrays[f"{part}_images"] = rng.integers(0, 256, size=(n, 8, 8), dtype=np.uint8)
        arrays[f"{part}_labels"] = (np.arange(n) % 3)[:, None]
    np.savez(path, **arrays)
    return path


class Started(Exception):
    """Stops a campaign at the event that says it started."""


def started(data: dict, db: Path) -> CampaignStarted:
    """The event a resplitting campaign on `data` starts with (nothing is trained)."""
    def stop(event: object) -> None:
        if isinstance(event, CampaignStarted):
            raise Started(event)

    with pytest.raises(Started) as stopped:
        run_campaign(campaign(data), str(db), "cpu", on_event=stop, log_file=db.with_suffix(".log"))
    event = stopped.value.args[0]
    assert isinstance(event, CampaignStarted)
    return event


def test_a_campaign_resplitting_medmnist_says_once_when_it_starts_that_its_pairs_differ_in_the_seed_only(tmp_path):
    archive = {"name": "medmnist", "path": str(write_archive(tmp_path / "blood.npz"))}
    lines = (started(archive, tmp_path / "a.db").warning or "").splitlines()
    assert len(lines) == 2 and "fewer than 5 validation or test examples" in lines[0]
    assert lines[1] == ("warning: resplit varies nothing here: medmnist has its own fixed train, validation and test "
                        "splits, so the pairs differ in the training seed only")
    first = started(archive | RARE | {"imbalance_class": "2", "rare_kept": "first"}, tmp_path / "b.db").warning or ""
    assert "keeps the first rare-class examples (rare_kept = \"first\")" in first
    drawn = started(archive | RARE | {"imbalance_class": "2"}, tmp_path / "c.db").warning or ""
    assert "resplit" not in drawn  # the rare examples kept are drawn with each pair's split seed
