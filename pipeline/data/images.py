"""A user's own images: one sub-folder per class, or a manifest folder (see pipeline.data.manifest).

Images are decoded and resized once (cached on disk) and kept as uint8 pixels; each batch is normalised
on the training device: with ImageNet statistics for pretrained backbones, otherwise with the training
split's own per-channel statistics.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from pipeline.config import DataConfig
from pipeline.data.dataset import Dataset, Split, check_classes_present
from pipeline.data.cache import cached_pixels
from pipeline.data.manifest import read_manifest
from pipeline.data.splits import apply_imbalance, compact, draw_sample, stratified_split
from pipeline.errors import FieldError, UserError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Listing:
    """Which files make up a data set, their labels and the indices of its three splits."""

    name: str
    class_names: list[str]
    files: list[Path]
    labels: torch.Tensor
    train: torch.Tensor
    val: torch.Tensor
    test: torch.Tensor
    full: int  # the images of the data set, before data.sample


def load_images(config: DataConfig) -> Dataset:
    """Listing -> cached pixels -> uint8 splits with their normalisation (on the CPU; the caller moves them)."""
    listing = manifest_listing(config) if config.manifest else folder_listing(config)
    cache_dir = Path(config.cache_dir) if config.cache_dir else None

    def pixels() -> torch.Tensor:
        return cached_pixels(listing.files, config.image_size, config.channels, cache_dir, listing.name)

    return resident_dataset(config, listing.name, listing.class_names, pixels, listing.labels, listing.train,
                            listing.val, listing.test, listing.full)


def resident_dataset(config: DataConfig, name: str, class_names: list[str], pixels: Callable[[], torch.Tensor],
                     labels: torch.Tensor, train: torch.Tensor, val: torch.Tensor, test: torch.Tensor,
                     full: int | None = None) -> Dataset:
    """uint8 splits of any image data set, with the imbalance option applied and their normalisation: the
    pixels (N, C, H, W), read by `pixels()` once the splits are known to hold every class, stay resident. `full`: the
    images of the data set before data.sample (by default all of `labels`)."""
    drawn = len(train) + len(val) + len(test)
    sample = None if config.sample is None else (drawn, len(labels) if full is None else full)
    train, val = apply_imbalance(config, class_names, labels, train, val)
    for part, indices in (("training", train), ("validation", val), ("test", test)):
        if len(indices) == 0 and not (part == "validation" and config.val_fraction == 0):
            raise UserError(f"the {part} split of {name} is empty; the classes are too small for "
                            f"val_fraction {config.val_fraction} (and test_fraction {config.test_fraction})")
    # every check on the labels before the pixels: a refused data set decodes nothing and writes no cache
    check_classes_present(class_names, {split: torch.bincount(labels[indices], minlength=len(class_names)).tolist()
                                        for split, indices in (("train", train), ("val", val), ("test", test))})
    images = pixels()
    if config.normalize == "imagenet":
        mean, std = torch.tensor(IMAGENET_MEAN), torch.tensor(IMAGENET_STD)
    else:  # "dataset" (and "auto" outside a TrainConfig, which resolves it from the weights)
        mean, std = channel_statistics(images, train)

    def split(indices: torch.Tensor) -> Split:  # uint8 pixels, normalised per batch (Split.inputs)
        return Split(images[indices], labels[indices].contiguous(), mean.view(1, -1, 1, 1), std.view(1, -1, 1, 1))

    return Dataset(name, class_names, split(train), split(val), split(test), tuple(mean.tolist()),
                   tuple(std.tolist()), sample)


def manifest_listing(config: DataConfig) -> Listing:
    """The manifest's train and test images; validation is carved from train, stratified and seeded."""
    folder = config.location("manifest")
    manifest = read_manifest(folder, Path(config.root).resolve() if config.root else None)
    if manifest.root is None:
        raise UserError(f"manifest {folder} has no root.txt; give the folder its image paths are relative to (root)")
    labels = torch.tensor(manifest.labels, dtype=torch.int64)
    is_train = torch.tensor(manifest.is_train, dtype=torch.bool)
    parts = draw_sample(labels, [torch.nonzero(is_train).flatten(), torch.nonzero(~is_train).flatten()],
                        config.sample, config.split_seed)
    kept, (train_part, test_part), kept_labels = compact(labels, parts)  # only the sample's files are decoded
    keep, val, _ = stratified_split(kept_labels[train_part], config.val_fraction, 0.0, config.split_seed)
    return Listing(folder.resolve().name, list(manifest.class_names),
                   [manifest.root / manifest.paths[i] for i in kept.tolist()], kept_labels, train_part[keep],
                   train_part[val], test_part, len(labels))


def refuse_dangling_links(paths: list[Path]) -> None:
    """A link to an image that is gone is refused by its path, as an unreadable image is: skipping it
    would change the data set without a word."""
    for path in paths:
        if path.is_symlink() and not path.exists():
            raise UserError(f"cannot read image {path}: it is a link to {path.readlink()}, which does not exist")


def image_files(folder: Path, root: Path) -> list[Path]:
    """The image files under `folder`, searched recursively and sorted, as a data set reads them: hidden files
    and folders (a name starting with a dot, below `root`) are skipped and a dangling link is refused."""
    members = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES
                     and not any(part.startswith(".") for part in p.relative_to(root).parts))
    refuse_dangling_links(members)
    return [p for p in members if p.is_file()]


def folder_listing(config: DataConfig) -> Listing:
    """root/<class>/**/<image>: classes in name order; test and validation carved stratified and seeded."""
    root = config.location("root")
    if not root.is_dir():
        raise FieldError("", "data.root", f"image folder not found: {root}")
    root = root.resolve()
    class_folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(class_folders) < 2:
        raise FieldError("", "data.root", f"{root} needs one sub-folder per class (at least two), found "
                                          f"{len(class_folders)}")
    files: list[Path] = []
    labels: list[int] = []
    for label, folder in enumerate(class_folders):
        members = image_files(folder, root)
        if not members:
            raise UserError(f"class folder {folder} holds no images ({', '.join(IMAGE_SUFFIXES)})")
        files += members
        labels += [label] * len(members)
    label_tensor = torch.tensor(labels, dtype=torch.int64)
    (pool,) = draw_sample(label_tensor, [torch.arange(len(files))], config.sample, config.split_seed)
    sampled = [files[i] for i in pool.tolist()]  # only the sample's files are decoded
    train, val, test = stratified_split(label_tensor[pool], config.val_fraction, config.test_fraction,
                                        config.split_seed)
    return Listing(root.name, [folder.name for folder in class_folders], sampled, label_tensor[pool], train, val, test,
                   len(files))


def channel_statistics(pixels: torch.Tensor, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and standard deviation (in [0, 1] units) of the uint8 images at `indices`,
    exact and fast: from a histogram of the 256 pixel values rather than a float copy of the images."""
    chosen = pixels[indices]
    values = torch.arange(256, dtype=torch.float64) / 255
    means, stds = [], []
    for channel in range(chosen.shape[1]):
        counts = torch.bincount(chosen[:, channel].flatten(), minlength=256).to(torch.float64)
        mean = (counts * values).sum() / counts.sum()
        means.append(mean)
        stds.append(((counts * (values - mean).square()).sum() / counts.sum()).sqrt().clamp_min(1e-6))
    return torch.stack(means).float(), torch.stack(stds).float()
