"""The generic image data set: folder per class or manifest, decoding, normalisation and the disk cache."""
import os

import numpy as np
import pytest
import torch
from conftest import encoded_image
from PIL import Image

from pipeline.config import DataConfig, TrainConfig
from pipeline.data import load_dataset
from pipeline.data.decode import decode_images
from pipeline.data.images import IMAGENET_MEAN, IMAGENET_STD, folder_listing
from pipeline.data.paper_splits import MT_DEFECT, magnetic_tile_splits, write_splits
from pipeline.errors import UserError

CPU = torch.device("cpu")


def make_class_folders(root, counts={"cat": 10, "dog": 6, "eel": 4}):
    """root/<class>/<n>.png|jpg: gray PNGs and colour JPEGs of a different shade per class."""
    for k, (name, count) in enumerate(counts.items()):
        (root / name).mkdir(parents=True)
        for i in range(count):
            if i % 2:
                (root / name / f"{i}.png").write_bytes(encoded_image("PNG", 40 + 80 * k, (12, 9)))
            else:
                (root / name / f"{i}.jpg").write_bytes(encoded_image("JPEG", 40 + 80 * k, (10, 14), mode="RGB"))
    (root / next(iter(counts)) / "notes.txt").write_text("not an image")
    return root


def images(root, **fields):
    return DataConfig(name="images", root=str(root), image_size=16, cache_dir="", **fields)


def test_folder_per_class_is_split_stratified_seeded_and_resized(tmp_path):
    data = load_dataset(images(make_class_folders(tmp_path / "pets"), val_fraction=0.25, test_fraction=0.25), CPU)
    assert data.name == "pets" and data.class_names == ["cat", "dog", "eel"]
    assert data.train.images.shape[1:] == (3, 16, 16) and data.train.images.dtype == torch.uint8
    assert data.train.inputs().dtype == torch.float32
    assert data.test.class_counts(3) == [2, 2, 1] and data.val.class_counts(3) == [2, 2, 1]
    assert data.train.class_counts(3) == [6, 2, 2]
    again = load_dataset(images(tmp_path / "pets", val_fraction=0.25, test_fraction=0.25), CPU)
    assert torch.equal(again.train.images, data.train.images)


def test_dataset_normalisation_uses_training_statistics_per_channel(tmp_path):
    data = load_dataset(images(make_class_folders(tmp_path / "pets"), normalize="dataset"), CPU)
    assert torch.allclose(data.train.inputs().mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-4)
    assert torch.allclose(data.train.inputs().std(dim=(0, 2, 3)), torch.ones(3), atol=1e-2)


def test_pretrained_weights_get_imagenet_normalisation_of_replicated_grayscale(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    for i in range(5):
        (tmp_path / "a" / f"{i}.png").write_bytes(encoded_image("PNG", 51))
        (tmp_path / "b" / f"{i}.png").write_bytes(encoded_image("PNG", 204))
    config = TrainConfig(data=images(tmp_path), backbone="resnet18", weights="imagenet")
    assert config.data.normalize == "imagenet" and TrainConfig(data=images(tmp_path)).data.normalize == "dataset"
    data = load_dataset(config.data, CPU)
    expected = (0.2 - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)  # shade 51 of class a
    first = data.train.inputs(data.train.labels == 0)[0]
    assert torch.allclose(first.mean(dim=(1, 2)), expected, atol=1e-5)


def test_uint8_pixels_give_the_same_batches_as_normalising_the_whole_split_up_front(tmp_path):
    """Images stay resident as uint8 and each batch is normalised where it lives: the numbers are exactly
    those of a float32 copy of the split normalised at load time (what the float path stored)."""
    noise = np.random.default_rng(0)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        for i in range(6):
            Image.fromarray(noise.integers(0, 256, (20, 13, 3), dtype=np.uint8)).save(tmp_path / name / f"{i}.png")
    config = images(tmp_path, normalize="dataset", val_fraction=0.0, test_fraction=0.25)
    data = load_dataset(config, CPU)
    listing = folder_listing(config)
    pixels = decode_images(listing.files, 16, 3)[listing.train]
    mean, std = (torch.tensor(values).view(1, -1, 1, 1) for values in (data.pixel_mean, data.pixel_std))
    float_path = (pixels.float() / 255 - mean) / std
    assert data.train.images.dtype == torch.uint8 and torch.equal(data.train.images, pixels)
    batch = torch.tensor([5, 0, 3, 3])
    assert torch.equal(data.train.inputs(batch), float_path[batch])
    assert torch.equal(torch.cat(list(data.train.chunks(4))), float_path)
    assert data.val.inputs().shape == (0, 3, 16, 16)


def test_one_channel_keeps_luminance_only(tmp_path):
    data = load_dataset(images(make_class_folders(tmp_path / "pets"), channels=1), CPU)
    assert data.in_channels == 1


def test_sixteen_bit_grayscale_is_scaled_not_clipped(tmp_path):
    for name, value in (("dark", 4096), ("light", 65535)):
        (tmp_path / name).mkdir()
        for i in range(5):
            Image.fromarray(np.full((8, 8), value, dtype=np.uint16)).save(tmp_path / name / f"{i}.png")
    data = load_dataset(images(tmp_path, normalize="imagenet"), CPU)
    light = data.test.inputs(data.test.labels == 1)[0, 0, 0, 0]
    assert torch.isclose(light, torch.tensor((1.0 - IMAGENET_MEAN[0]) / IMAGENET_STD[0]))
    dark = data.test.inputs(data.test.labels == 0)[0, 0, 0, 0]
    assert torch.isclose(dark, torch.tensor((16 / 255 - IMAGENET_MEAN[0]) / IMAGENET_STD[0]))


@pytest.fixture(scope="module")
def mt_defect(mt_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("splits")
    write_splits(out, magnetic_tile_splits(mt_root, seed=0))
    return out / "mt-defect"


def test_a_manifest_keeps_its_test_images_and_carves_validation_from_train(mt_defect):
    data = load_dataset(DataConfig(name="images", manifest=str(mt_defect), image_size=8, cache_dir=""), CPU)
    assert data.name == "mt-defect" and data.class_names == list(MT_DEFECT)
    train, val = data.train.class_counts(5), data.val.class_counts(5)
    assert [t + v for t, v in zip(train, val)] == [n for n, _ in MT_DEFECT.values()]
    assert data.test.class_counts(5) == [n for _, n in MT_DEFECT.values()]
    assert val == [round(0.2 * n) for n, _ in MT_DEFECT.values()]
    gray = data.train.images[0]
    assert torch.equal(gray[0], gray[1]) and torch.equal(gray[0], gray[2])  # grayscale replicated
    other = load_dataset(DataConfig(name="images", manifest=str(mt_defect), image_size=8, cache_dir="",
                                    split_seed=1), CPU)
    assert torch.equal(other.test.labels, data.test.labels) and other.val.class_counts(5) == val


def shaded_manifest(folder, counts={"common": 12, "rare": 20}, test=2):
    """A manifest of 8x8 gray images, each of its own shade (so an image names itself), `test` of each class tested."""
    from pipeline.data.manifest import Manifest, write_manifest

    paths, labels, is_train = [], [], []
    for label, (name, count) in enumerate(counts.items()):
        (folder / "images" / name).mkdir(parents=True)
        for i in range(count + test):
            path = f"{name}/{i}.png"
            Image.fromarray(np.full((8, 8), 100 * label + 4 * i, dtype=np.uint8)).save(folder / "images" / path)
            paths.append(path)
            labels.append(label)
            is_train.append(i < count)
    write_manifest(folder / "split", Manifest(tuple(counts), tuple(paths), tuple(labels), tuple(is_train),
                                              folder / "images"))
    return folder / "split"


def test_a_manifest_keeps_rare_examples_drawn_with_the_split_seed_or_the_first_ones_where_stored_so(tmp_path):
    """The manifest's 20 rare training images, 4 kept (no validation carve, so only the draw can vary them): another
    split seed keeps other ones, the same seed the same ones; "first" keeps shades 100-112 whatever the seed."""
    manifest = shaded_manifest(tmp_path)

    def kept(**fields) -> set[int]:
        config = dict(name="images", manifest=str(manifest), image_size=8, cache_dir="", val_fraction=0.0,
                      imbalance_class="rare", imbalance_keep=0.2)
        data = load_dataset(DataConfig(**{**config, **fields}), CPU)
        return set(data.train.images[data.train.labels == 1][:, 0, 0, 0].tolist())

    assert len(kept(split_seed=0)) == 4 and kept(split_seed=0) != kept(split_seed=1)
    assert kept(split_seed=0) == kept(split_seed=0)  # reproducible
    assert kept(split_seed=0, rare_kept="first") == kept(split_seed=1, rare_kept="first") == {100, 104, 108, 112}


def test_a_manifest_without_root_txt_takes_the_root_from_the_config(mt_defect, mt_root, tmp_path):
    for name in ("images.txt", "image_class_labels.txt", "train_test_split.txt", "classes.txt"):
        (tmp_path / name).write_bytes((mt_defect / name).read_bytes())
    with pytest.raises(UserError, match="has no root.txt"):
        load_dataset(DataConfig(name="images", manifest=str(tmp_path), image_size=8, cache_dir=""), CPU)
    data = load_dataset(DataConfig(name="images", manifest=str(tmp_path), root=str(mt_root), image_size=8,
                                   cache_dir=""), CPU)
    assert len(data.test) == sum(n for _, n in MT_DEFECT.values())


def test_a_corrupt_image_is_reported_by_its_path(tmp_path):
    root = make_class_folders(tmp_path / "pets")
    broken = root / "dog" / "3.png"
    broken.write_bytes(broken.read_bytes()[:40])  # truncated
    with pytest.raises(UserError, match=f"cannot read image {broken}"):
        load_dataset(images(root), CPU)


def test_a_link_to_an_image_that_is_gone_is_reported_by_its_path_not_skipped(tmp_path):
    root = make_class_folders(tmp_path / "pets")
    dangling = root / "dog" / "gone.png"
    dangling.symlink_to(tmp_path / "nowhere.png")
    with pytest.raises(UserError, match=f"cannot read image {dangling}: it is a link to .*nowhere.png, which does"):
        load_dataset(images(root), CPU)


def test_second_load_reads_the_cache_and_a_new_size_decodes_again(tmp_path):
    root = make_class_folders(tmp_path / "pets")
    config = DataConfig(name="images", root=str(root), image_size=16, cache_dir=str(tmp_path / "cache"))
    first = load_dataset(config, CPU)
    assert len(list((tmp_path / "cache").glob("pets-16px-3ch-*.pt"))) == 1
    # Spoil an image but keep its size and modification time: a load that decoded it would fail.
    victim = root / "eel" / "1.png"
    stat = victim.stat()
    victim.write_bytes(b"\0" * stat.st_size)
    os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    second = load_dataset(config, CPU)
    assert torch.equal(first.train.images, second.train.images) and torch.equal(first.test.images, second.test.images)
    with pytest.raises(UserError, match=f"cannot read image {victim}"):
        load_dataset(DataConfig(name="images", root=str(root), image_size=24, cache_dir=str(tmp_path / "cache")), CPU)


def test_a_changed_file_or_size_makes_a_new_cache_entry(tmp_path):
    root = make_class_folders(tmp_path / "pets")
    cache = tmp_path / "cache"
    load_dataset(DataConfig(name="images", root=str(root), image_size=16, cache_dir=str(cache)), CPU)
    (root / "eel" / "0.jpg").write_bytes(encoded_image("JPEG", 0, (10, 14), mode="RGB"))
    load_dataset(DataConfig(name="images", root=str(root), image_size=16, cache_dir=str(cache)), CPU)
    data = load_dataset(DataConfig(name="images", root=str(root), image_size=20, cache_dir=str(cache)), CPU)
    assert len(list(cache.glob("*16px*.pt"))) == 2 and len(list(cache.glob("*20px*.pt"))) == 1
    assert data.train.images.shape[-2:] == (20, 20)


@pytest.mark.parametrize("fields, message", [
    ({"name": "images"}, "needs root"),
    ({"image_size": 4}, "image_size must be"),
    ({"channels": 2}, "channels must be 1 or 3"),
    ({"normalize": "imagenet", "channels": 1}, "needs channels = 3"),
    ({"normalize": "z"}, "normalize must be one of"),
    ({"augment_crop_padding": -1}, "augment_crop_padding"),
])
def test_bad_image_options(fields, message):
    with pytest.raises(UserError, match=message):
        DataConfig(**fields)


@pytest.mark.parametrize("layout, message", [
    ("missing", "image folder not found"),
    ("one class", "at least two"),
    ("empty class", "holds no images"),
])
def test_bad_folders(tmp_path, layout, message):
    if layout != "missing":
        make_class_folders(tmp_path, {"a": 3} if layout == "one class" else {"a": 3, "b": 2})
    if layout == "empty class":
        (tmp_path / "c").mkdir()
    with pytest.raises(UserError, match=message):
        load_dataset(images(tmp_path if layout != "missing" else tmp_path / "nothing"), CPU)


def test_a_sample_of_a_folder_or_a_manifest_decodes_only_its_own_files(tmp_path, mt_defect):
    root = make_class_folders(tmp_path / "pets")
    listing = folder_listing(images(root, sample=4))
    assert len(listing.files) == 12 and listing.full == 20 and torch.bincount(listing.labels).tolist() == [4, 4, 4]
    assert {f.parent.name for f in listing.files} == {"cat", "dog", "eel"}
    data = load_dataset(DataConfig(name="images", manifest=str(mt_defect), image_size=8, cache_dir="", sample=0.5),
                        CPU)  # half of each class of its training and of its test images
    assert data.test.class_counts(5) == [round(n / 2) for _, n in MT_DEFECT.values()]
    assert data.sample[1] == sum(a + b for a, b in MT_DEFECT.values()) and data.sample[0] == len(data.train) + len(
        data.val) + len(data.test)
