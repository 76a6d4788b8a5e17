"""IDX files (MNIST format) and MedMNIST .npz archives, read from files these tests write."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.config import DataConfig
from pipeline.data.arrays import load_idx, load_medmnist
from pipeline.errors import UserError
from helpers import STUDIES


def idx_bytes(array: np.ndarray) -> bytes:
    """An IDX file of unsigned bytes: magic 0 0 8 ndim, big-endian sizes, the data."""
    header = bytes([0, 0, 8, array.ndim]) + np.array(array.shape, dtype=">u4").tobytes()
    return header + array.astype(np.uint8).tobytes()


def digits_like(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n 28x28 images, 10 classes in turn, each class a bright band at its own rows plus noise."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 10
    images = rng.integers(0, 60, size=(n, 28, 28))
    for i, label in enumerate(labels):
        images[i, 2 * label + 4: 2 * label + 8] = 250
    return images.astype(np.uint8), labels.astype(np.uint8)


def write_idx(root: Path, n_train: int = 200, n_test: int = 50, gz: bool = False) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for part, n, seed in (("train", n_train, 0), ("t10k", n_test, 1)):
        images, labels = digits_like(n, seed)
        for kind, array in (("images-idx3", images), ("labels-idx1", labels)):
            name = f"{part}-{kind}-ubyte"
            if gz:
                (root / f"{name}.gz").write_bytes(gzip.compress(idx_bytes(array)))
            else:
                (root / name).write_bytes(idx_bytes(array))
    return root


@pytest.fixture(scope="module")
def idx_root(tmp_path_factory) -> Path:
    return write_idx(tmp_path_factory.mktemp("mnist"))


@pytest.mark.parametrize("gz", [False, True])
def test_idx_files_raw_or_gzipped_give_train_val_from_training_and_the_test_file(tmp_path, gz):
    root = write_idx(tmp_path / "mnist", gz=gz)
    (root / "classes.txt").write_text("\n".join(f"digit {d}" for d in range(10)) + "\n")
    data = load_idx(DataConfig(name="idx", root=str(root), val_fraction=0.2))
    assert (len(data.train), len(data.val), len(data.test)) == (160, 40, 50)
    assert data.class_names[3] == "digit 3" and data.in_channels == 1
    assert data.train.images.dtype == data.test.images.dtype == torch.uint8
    assert tuple(data.train.images.shape[1:]) == (1, 28, 28)
    images, labels = digits_like(50, 1)  # the test split is the t10k file, in order, pixel for pixel
    assert np.array_equal(data.test.images[:, 0].numpy(), images) and np.array_equal(data.test.labels.numpy(), labels)


def test_the_imbalance_applies_to_training_only(idx_root):
    config = DataConfig(name="idx", root=str(idx_root), imbalance_class="3", imbalance_keep=0.1)
    balanced, skewed = load_idx(DataConfig(name="idx", root=str(idx_root))), load_idx(config)
    assert balanced.train.class_counts(10)[3] == 16 and skewed.train.class_counts(10)[3] == 2
    assert skewed.train.class_counts(10)[:3] == balanced.train.class_counts(10)[:3]
    assert skewed.val.class_counts(10) == balanced.val.class_counts(10) == [4] * 10
    assert skewed.test.class_counts(10) == balanced.test.class_counts(10) == [5] * 10


def rare_examples(data, label: int) -> set[bytes]:
    """Which examples of class `label` stayed in training, each named by its pixels."""
    return {image.numpy().tobytes() for image in data.train.images[data.train.labels == label]}


def test_idx_keeps_rare_examples_drawn_with_the_split_seed_or_as_a_study_stored_before_the_first_ones(idx_root):
    """The training file's 20 examples of digit 3, 4 kept (no validation carve, so only the draw can vary them):
    another split seed keeps other ones, the same seed the same ones; "first", what a study stored before the choice
    reads as, keeps the first 4 whatever the seed."""
    def kept(**fields) -> set[bytes]:
        config = dict(name="idx", root=str(idx_root), val_fraction=0.0, imbalance_class="3", imbalance_keep=0.2)
        return rare_examples(load_idx(DataConfig(**{**config, **fields})), 3)

    assert len(kept(split_seed=0)) == 4 and kept(split_seed=0) != kept(split_seed=1)
    assert kept(split_seed=1) == kept(split_seed=1)  # reproducible
    images, labels = digits_like(200, 0)
    first = {image[None].tobytes() for image in images[labels == 3][:4]}
    old = DataConfig.from_dict({"name": "idx", "root": str(idx_root), "val_fraction": 0.0, "imbalance_class": "3",
                                "imbalance_keep": 0.2, "imbalance_in": "train", "split_seed": 1})
    assert old.rare_kept == "first" and rare_examples(load_idx(old), 3) == first
    assert kept(split_seed=0, rare_kept="first") == kept(split_seed=1, rare_kept="first") == first


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[:-7], "is truncated"),
    (lambda b: b"\x00\x00\x08\x01" + b[4:], "its magic number is 00000801"),
    (lambda b: b[:3], "magic number is 000008"),
])
def test_a_malformed_idx_file_is_refused_naming_it(tmp_path, damage, message):
    root = write_idx(tmp_path / "mnist")
    victim = root / "train-images-idx3-ubyte"
    victim.write_bytes(damage(victim.read_bytes()))
    with pytest.raises(UserError, match=message) as refused:
        load_idx(DataConfig(name="idx", root=str(root)))
    assert str(victim) in str(refused.value)


def test_image_and_label_counts_that_disagree_or_a_cut_gzip_are_refused(tmp_path):
    root = write_idx(tmp_path / "mnist", gz=True)
    labels = root / "t10k-labels-idx1-ubyte.gz"
    labels.write_bytes(gzip.compress(idx_bytes(np.zeros(49, dtype=np.uint8))))
    with pytest.raises(UserError, match="holds 50 images but .* holds 49 labels"):
        load_idx(DataConfig(name="idx", root=str(root)))
    images = root / "train-images-idx3-ubyte.gz"
    intact = images.read_bytes()
    corrupt = intact[:40] + bytes(b ^ 0xFF for b in intact[40:80]) + intact[80:]
    for damaged in (intact[:100], corrupt):  # cut off; its compressed data garbled
        images.write_bytes(damaged)
        with pytest.raises(UserError, match=f"cannot read IDX file {images}"):
            load_idx(DataConfig(name="idx", root=str(root)))


def write_medmnist(path: Path, rgb: bool, label_shape: str = "n1", drop: str | None = None) -> Path:
    rng = np.random.default_rng(0)
    arrays = {}
    for part, n in (("train", 60), ("val", 12), ("test", 18)):
        shape = (n, 28, 28, 3) if rgb else (n, 28, 28)
        arrays[f"{part}_images"] = rng.integers(0, 256, size=shape, dtype=np.uint8)
        labels = np.arange(n) % 3
        arrays[f"{part}_labels"] = {"n1": labels[:, None], "n": labels, "multi": np.stack([labels] * 4, 1)}[label_shape]
    arrays.pop(drop, None)
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("rgb", [False, True])
def test_a_medmnist_archive_keeps_its_own_validation_split(tmp_path, rgb):
    path = write_medmnist(tmp_path / "organmnist.npz", rgb)
    data = load_medmnist(DataConfig(name="medmnist", path=str(path), imbalance_class="2", imbalance_keep=0.05))
    assert (len(data.val), len(data.test)) == (12, 18)  # the archive's own, untouched by the imbalance
    assert data.train.class_counts(3) == [20, 20, 1]
    assert data.in_channels == (3 if rgb else 1) and tuple(data.train.images.shape[2:]) == (28, 28)
    with np.load(path) as archive:
        expected = archive["val_images"] if rgb else archive["val_images"][..., None]
    assert np.array_equal(data.val.images.permute(0, 2, 3, 1).numpy(), expected)
    assert data.name == "organmnist" and data.class_names == ["0", "1", "2"]


def test_medmnist_splits_stay_its_own_while_the_rare_examples_kept_are_drawn_with_the_split_seed(tmp_path):
    path = write_medmnist(tmp_path / "organmnist.npz", rgb=False)

    def loaded(**fields):
        config = dict(name="medmnist", path=str(path), imbalance_class="2", imbalance_keep=0.2)
        return load_medmnist(DataConfig(**{**config, **fields}))

    zero, one = loaded(split_seed=0), loaded(split_seed=1)
    assert torch.equal(zero.val.images, one.val.images) and torch.equal(zero.test.images, one.test.images)
    assert len(rare_examples(zero, 2)) == 4 and rare_examples(zero, 2) != rare_examples(one, 2)
    with np.load(path) as archive:
        first = {image[None].tobytes() for image in archive["train_images"][archive["train_labels"][:, 0] == 2][:4]}
    assert rare_examples(loaded(split_seed=0, rare_kept="first"), 2) == first
    assert rare_examples(loaded(split_seed=1, rare_kept="first"), 2) == first


@pytest.mark.parametrize("label_shape, drop, message", [
    ("multi", None, "only single-label data sets"),
    ("n", "val_labels", "is not a MedMNIST archive: it lacks val_labels"),
])
def test_a_multi_label_or_incomplete_medmnist_archive_is_refused(tmp_path, label_shape, drop, message):
    path = write_medmnist(tmp_path / "chestmnist.npz", rgb=False, label_shape=label_shape, drop=drop)
    with pytest.raises(UserError, match=message) as refused:
        load_medmnist(DataConfig(name="medmnist", path=str(path)))
    assert str(path) in str(refused.value)


def test_train_two_epochs_on_idx_files_from_the_cli(cli, idx_root):
    code, out, err = cli("train", "--dataset", "idx", "--root", str(idx_root), "--param", "epochs=2",
                         "--device", "cpu", "--imbalance-class", "3", "--format", "json")
    assert code == 0, err
    metrics = json.loads(out)
    assert metrics["test_examples"] == 50 and set(metrics["test_per_class_accuracy"]) == {str(d) for d in range(10)}
    assert metrics["settings"]["data"]["root"] == str(idx_root)


def test_train_on_a_medmnist_archive_and_bad_files_from_the_cli(cli, tmp_path, idx_root):
    path = write_medmnist(tmp_path / "bloodmnist.npz", rgb=True)
    code, out, err = cli("train", "--dataset", "medmnist", "--path", str(path), "--param", "epochs=1",
                         "--device", "cpu", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["test_examples"] == 18
    path.write_bytes(b"not a zip")
    for args in (["--dataset", "medmnist", "--path", str(path)], ["--dataset", "idx", "--root", str(tmp_path)],
                 ["--dataset", "idx"]):
        code, _, err = cli("train", *args, "--param", "epochs=1", "--device", "cpu")
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert str(path) in cli("train", "--dataset", "medmnist", "--path", str(path), "--device", "cpu")[2]


def test_gils_on_the_feature_map_of_wrn16_1_trains_on_idx_files(cli, idx_root):
    code, out, err = cli("train", "--dataset", "idx", "--root", str(idx_root), "--backbone", "wrn16_1",
                         "--method", "gils", "--param", "perturb=feature", "--param", "epochs=1", "--param", "T=1",
                         "--device", "cpu", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["settings"]["backbone"] == "wrn16_1"


def test_a_two_trial_study_of_the_hardness_papers_mnist_file_on_generated_idx_files(cli, idx_root, tmp_path):
    study = STUDIES / "paper" / "hws-mnist-wrn16-1.toml"
    db = tmp_path / "runs.db"
    code, _, err = cli("run", str(study), "--db", str(db), "--set", f"data.root={idx_root}",
                       "--set", "budget.trials=2", "--set", "budget.initial=2", "--set", "params.epochs=1",
                       "--set", "data.imbalance_keep=0.1", "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    from pipeline.store import Store

    store = Store(str(db), create=False)
    trials = store.trials(store.study("hws-mnist-wrn16-1").id)
    assert [t.status for t in trials] == ["completed", "completed"]
    assert all(t.settings.backbone == "wrn16_1" and t.settings.data.name == "idx" for t in trials)
    assert all(0.1 <= t.parameters["beta"] <= 100 and t.settings.params["momentum"] == 0 for t in trials)
    assert all(set(t.per_class["test"]) == {str(d) for d in range(10)} for t in trials)


def test_a_study_with_a_sample_of_idx_files_trains_on_the_sample_and_says_so(cli, idx_root, tmp_path, monkeypatch):
    """[data] sample = 10: ten images of each class in all, spread over the training and test files as they hold
    them (20:5 -> 8:2), the validation carve from the sampled training images; the counts line says so, and the
    study's identity records it (a study stored before it keeps its own). The libraries' log goes beside the
    database, not into the folder the command runs in."""
    study = tmp_path / "sampled.toml"
    study.write_text(f'name = "sampled"\n[data]\nname = "idx"\nroot = "{idx_root}"\nsample = 10\n[method]\n'
                     'name = "erm"\n[params]\nepochs = 1\nlr_head = { low = 0.01, high = 0.1 }\n'
                     '[budget]\ntrials = 1\ninitial = 1\n')
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    code, out, err = cli("run", str(study), "--db", str(tmp_path / "runs.db"))
    assert code == 0, err
    assert (tmp_path / "runs.log").is_file() and list((tmp_path / "here").iterdir()) == []
    assert f"Library messages: {tmp_path / 'runs.log'}" in " ".join(out.split())
    assert "train     60  0:6 1:6" in err and "test      20  0:2 1:2" in err, err
    assert "a sample (data.sample): 100 of the data set's 250 images" in err
    from pipeline.store import Store

    store = Store(str(tmp_path / "runs.db"), create=False)
    record = store.study("sampled")
    assert record.study.data.sample == 10 and record.study.identity()["data"]["sample"] == 10
    assert store.trials(record.id)[0].settings.data.sample == 10
    from dataclasses import replace

    unsampled = replace(record.study, data=replace(record.study.data, sample=None))
    assert "sample" not in unsampled.identity()["data"]  # as every study stored before data.sample: the same study


def test_a_medmnist_sample_takes_a_share_of_each_of_its_own_splits(tmp_path):
    path = write_medmnist(tmp_path / "blood.npz", rgb=False)
    data = load_medmnist(DataConfig(name="medmnist", path=str(path), sample=0.5))
    assert [data.train.class_counts(3), data.val.class_counts(3), data.test.class_counts(3)] == [[10] * 3, [2] * 3,
                                                                                                [3] * 3]
    assert data.sample == (45, 90)


def test_a_data_fields_problem_found_as_the_data_loads_names_the_field_where_it_was_set(cli, idx_root, tmp_path):
    """An unknown class or a wrong IDX folder, found only once the data is read: the study file's field, the --set
    that set it, or train's option; each one line, nothing stored."""
    study = tmp_path / "rare.toml"
    study.write_text(f'name = "rare"\n[data]\nname = "idx"\nroot = "{idx_root}"\nimbalance_class = "33"\n'
                     '[method]\nname = "erm"\n[params]\nlr_head = { low = 0.01, high = 0.1 }\n')
    db = tmp_path / "runs.db"
    for args, said in ((["run", str(study)], f"{study}: data.imbalance_class: unknown class '33' (did you mean 3?)"),
                       (["run", str(study), "--set", 'data.root="nowhere"'], "--set data.root: IDX folder not found"),
                       (["compare", str(STUDIES / "digits-campaign.toml"), "--set", 'data.imbalance_class="33"'],
                        "--set data.imbalance_class: unknown class '33' (did you mean 3?)"),
                       (["train", "--dataset", "idx", "--root", str(tmp_path)], f"--root: {tmp_path} needs "
                        "train-images-idx3-ubyte or train-images-idx3-ubyte.gz, found neither")):
        code, _, err = cli(*args, "--db", str(db), "--device", "cpu")
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and said in lines[0], (args, err)
    assert not db.exists()
