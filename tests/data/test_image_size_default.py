"""One image-size rule: where no option or file gives one, image files are resized to the backbone's size (small
images for the small CNN, 224 px for the ResNets) by train, study and campaign files alike; a study stored with
another size keeps it. Real PyTorch, real SQLite, the CLI as a user runs it, tiny PNG folders."""
from __future__ import annotations

import json
import shutil
import tomllib

import pytest

from pipeline.config import default_image_size
from pipeline.errors import UserError
from pipeline.store import Store
from helpers import DATA, write_folder


def test_train_resizes_for_the_small_cnn_by_default(cli, tmp_path):
    write_folder(tmp_path / "images")
    code, out, err = cli("train", "--dataset", "images", "--root", str(tmp_path / "images"), "--backbone", "small_cnn",
                         "--cache-dir", "", "-p", "epochs=1", "--val-fraction", "0.34", "--test-fraction", "0.34",
                         "--format", "json")
    assert code == 0, err
    assert json.loads(out)["settings"]["data"]["image_size"] == default_image_size("small_cnn") == 32


def test_the_resnets_keep_imagenets_size_and_help_says_so(cli):
    assert default_image_size("resnet18") == default_image_size("resnet50") == 224
    code, out, _ = cli("train", "--help")
    assert code == 0 and "32 for small_cnn and wrn16_1" in " ".join(out.split())


# A study of image files on the small CNN, leaving data.image_size to the default; {root} and {extra} filled in.
STUDY = """name = "{name}"
[data]
name = "images"
root = "{root}"
val_fraction = 0.34
test_fraction = 0.34
cache_dir = ""
{extra}
[model]
backbone = "small_cnn"
[method]
name = "erm"
[params]
epochs = 1
lr_head = {{ low = 0.01, high = 0.2, log = true }}
[budget]
trials = 1
initial = 1
"""


def study_file(tmp_path, name="sized", extra="", backbone="small_cnn"):
    path = tmp_path / f"{name}.toml"
    path.write_text(STUDY.format(name=name, root=tmp_path / "images", extra=extra).replace("small_cnn", backbone))
    return path


def test_study_files_take_the_backbones_size_unless_they_give_one(tmp_path):
    from pipeline.spec.study_config import load_study

    assert load_study(study_file(tmp_path)).data.image_size == 32
    assert load_study(study_file(tmp_path, backbone="wrn16_1")).data.image_size == 32
    assert load_study(study_file(tmp_path, backbone="resnet18")).data.image_size == 224
    given = load_study(study_file(tmp_path, extra="image_size = 48"))
    assert given.data.image_size == 48 and given.image_size_given
    # the data sets that keep their own size record DataConfig's 224, as every study did: their identity stays
    assert load_study(study_file(tmp_path), ["data.name=idx"]).data.image_size == 224
    padded = study_file(tmp_path, extra="augment_crop_padding = 40")
    with pytest.raises(UserError, match=r"padded.toml|sized.toml: data: augment_crop_padding"):
        load_study(padded)


def test_train_and_a_one_trial_study_of_the_same_settings_give_the_same_metrics(cli, tmp_path, monkeypatch):
    """The same configuration through `train` and through a study file, neither giving an image size: the same
    size, the same settings, the same numbers; both say how images are read when they start."""
    monkeypatch.chdir(tmp_path)
    write_folder(tmp_path / "images", per_class=8)
    db = str(tmp_path / "runs.db")
    code, _, err = cli("run", str(study_file(tmp_path)), "--db", db, "--device", "cpu")
    assert code == 0, err
    assert "images: resized to 32 x 32 px, 3 channels, not cached" in err
    store = Store(db, create=False)
    (trial,) = store.trials(store.require_study("sized").id)
    code, out, err = cli("train", "--dataset", "images", "--root", str(tmp_path / "images"), "--val-fraction", "0.34",
                         "--test-fraction", "0.34", "--cache-dir", "", "--device", "cpu", "-p", "epochs=1",
                         "-p", f"lr_head={trial.parameters['lr_head']!r}", "--format", "json")
    assert code == 0, err
    assert "images: resized to 32 x 32 px, 3 channels, not cached" in err
    trained = json.loads(out)
    assert trained["settings"]["data"] == trial.settings.data.__dict__ and trial.settings.data.image_size == 32
    assert trained["settings"]["params"] == trial.settings.params
    assert {k: v for k, v in trained.items() if k in trial.metrics and k != "train_seconds"} == {
        k: v for k, v in trial.metrics.items() if k != "train_seconds"}
    assert trained["epoch_train_loss"] == [e.train_loss for e in trial.epochs]
    assert trained["test_per_class_accuracy"] == trial.per_class["test"]


def test_a_study_stored_at_224_keeps_it_and_its_fingerprint_when_its_file_does_not_say(cli, tmp_path, monkeypatch):
    """A study stored before the per-backbone default (at DataConfig's 224) and its file, which gives no size: run
    again, the stored study wins: its next trials train at 224, its identity and fingerprint stay. In a new database
    the same file is a new study at 32 px."""
    monkeypatch.chdir(tmp_path)
    write_folder(tmp_path / "images", per_class=8)
    db, path = str(tmp_path / "old.db"), study_file(tmp_path)
    code, _, err = cli("run", str(path), "--db", db, "--device", "cpu", "--set", "data.image_size=224")
    assert code == 0, err
    before = Store(db, create=False).require_study("sized")

    code, _, err = cli("run", str(path), "--db", db, "--device", "cpu", "--trials", "2")
    assert code == 0, err
    assert "images: resized to 224 x 224 px" in err
    store = Store(db, create=False)
    after = store.require_study("sized")
    assert after.fingerprint == before.fingerprint == after.study.fingerprint()
    assert after.study.identity() == before.study.identity() and after.study.data.image_size == 224
    trials = store.trials(after.id)
    assert [t.settings.data.image_size for t in trials] == [224, 224]
    # `train --from-study` and `evaluate` re-read it from the database at 224
    code, out, err = cli("train", "--from-study", "sized", "--db", db, "--device", "cpu", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["settings"]["data"]["image_size"] == 224 and "images: resized to 224 x 224 px" in err
    code, _, err = cli("evaluate", "sized", "--db", db, "--seeds", "2", "--device", "cpu")
    assert code == 0, err
    assert "images: resized to 224 x 224 px, 3 channels, not cached" in err
    assert {run.settings.data.image_size for run in Store(db, create=False).evaluations(after.id)} == {224}

    code, _, err = cli("run", str(path), "--db", str(tmp_path / "new.db"), "--device", "cpu")
    assert code == 0, err
    new = Store(str(tmp_path / "new.db"), create=False).require_study("sized")
    assert new.study.data.image_size == 32 and new.fingerprint != before.fingerprint


def test_a_study_stored_by_0_1_0_keeps_its_size_and_fingerprint_when_run_again(cli, tmp_path, monkeypatch):
    """tests/fixtures/v0.1.0.db, written by robust-tune 0.1.0, and the file that made it (no image_size or rare_kept in
    it): its third trial trains as the first two did, at 224 px, keeping the first examples of the rare digit."""
    monkeypatch.chdir(tmp_path)
    for name in ("v0.1.0.db", "old-quick.toml"):
        shutil.copy(DATA / name, tmp_path / name)
    db = str(tmp_path / "v0.1.0.db")
    fingerprint = Store(db, create=False).require_study("old-quick").fingerprint
    code, _, err = cli("run", "old-quick.toml", "--db", db, "--device", "cpu")  # its third trial
    assert code == 0, err
    stored = Store(db, create=False).require_study("old-quick")
    assert stored.fingerprint == fingerprint == stored.study.fingerprint() and stored.study.data.image_size == 224
    trials = Store(db, create=False).trials(stored.id)
    assert [(t.settings.data.image_size, t.settings.data.rare_kept) for t in trials] == [(224, "first")] * 3


def test_a_campaign_stored_at_224_matches_its_file_without_a_size(tmp_path):
    """A campaign stored before the per-backbone default, each method's study at 224: its file, which gives no size,
    is the same campaign (the same fingerprint), its studies at 224; in a new database, at 32."""
    import dataclasses

    from pipeline.spec.campaign_config import parse_campaign

    raw = tomllib.loads(STUDY.format(name="trio", root=tmp_path / "images", extra=""))
    del raw["method"]
    raw["methods"] = ["ls"]
    campaign = parse_campaign(raw, "trio.toml")
    assert {s.data.image_size for s in campaign.studies.values()} == {32}
    old = dataclasses.replace(campaign, studies={m: dataclasses.replace(
        s, data=dataclasses.replace(s.data, image_size=224)) for m, s in campaign.studies.items()})
    store = Store(str(tmp_path / "c.db"))
    store.save_campaign(old)
    stored = store.campaign("trio")
    settled = campaign.settle_image_size(stored.config)
    assert settled.fingerprint() == old.fingerprint() and store.save_campaign(settled).name == "trio"
    assert {s.data.image_size for s in settled.studies.values()} == {224}
    assert campaign.settle_image_size(None) == campaign


def test_the_start_line_names_size_channels_and_cache_for_image_files_only(tmp_path):
    from cli.render import image_line
    from pipeline.config import DataConfig

    assert image_line(DataConfig(name="images", root="x", image_size=32, channels=1)) == (
        "images: resized to 32 x 32 px, 1 channel, cached in runs/cache")
    for kind in (DataConfig(), DataConfig(name="idx", root="x"), DataConfig(name="medmnist", path="x.npz")):
        assert image_line(kind) is None  # their arrays keep their own size and channels
