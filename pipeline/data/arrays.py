"""Image data sets stored as arrays: IDX files (MNIST, Fashion-MNIST, KMNIST, EMNIST) and MedMNIST `.npz` archives.

Both are read from local files with numpy (nothing is downloaded) at their own size and channels, and go
through the same imbalance option and resident uint8 splits as image folders (images.resident_dataset).
A file that is not what it claims to be is a UserError naming it.
"""
from __future__ import annotations

import gzip
import zipfile
import zlib
from pathlib import Path

import numpy as np
import torch

from pipeline.config import DataConfig
from pipeline.data.dataset import Dataset
from pipeline.data.images import resident_dataset
from pipeline.data.splits import draw_sample, stratified_split
from pipeline.errors import FieldError, UserError

IDX_UBYTE = 0x08  # the IDX type code of unsigned bytes, the only one image and label files use
IDX_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
MEDMNIST_ARRAYS = ("train_images", "train_labels", "val_images", "val_labels", "test_images", "test_labels")


def read_idx(path: Path, ndim: int) -> np.ndarray:
    """The uint8 array of an IDX file (gzipped or not) with `ndim` dimensions: magic 0 0 8 ndim, then
    ndim big-endian uint32 sizes, then the bytes (http://yann.lecun.com/exdb/mnist/)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as file:
            raw = file.read()
    except (OSError, EOFError, zlib.error) as error:  # gzip's errors for a cut-off or corrupt archive
        raise UserError(f"cannot read IDX file {path}: {getattr(error, 'strerror', None) or error}") from None
    header = 4 + 4 * ndim
    if len(raw) < header or raw[:4] != bytes([0, 0, IDX_UBYTE, ndim]):
        raise UserError(f"{path} is not an IDX file of {ndim}-dimensional unsigned bytes: its magic number is "
                        f"{raw[:4].hex() or 'missing'}, expected {bytes([0, 0, IDX_UBYTE, ndim]).hex()}")
    shape = tuple(int(size) for size in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = header + int(np.prod(shape))
    if len(raw) != expected:
        raise UserError(f"IDX file {path} is {'truncated' if len(raw) < expected else 'longer than its header says'}: "
                        f"its header says {' x '.join(map(str, shape))} bytes of data, it holds {len(raw) - header}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def idx_file(root: Path, stem: str) -> Path:
    """root/stem or root/stem.gz; neither, or both (which one is meant?), is a UserError."""
    found = [path for path in (root / stem, root / f"{stem}.gz") if path.is_file()]
    if len(found) != 1:
        raise UserError(f"{root} needs {stem} or {stem}.gz, found {'neither' if not found else 'both'}")
    return found[0]


def read_idx_pair(root: Path, part: str) -> tuple[np.ndarray, np.ndarray]:
    """The images (N, H, W) and labels (N,) of one part (train or test), checked to agree in number."""
    image_file, label_file = (idx_file(root, stem) for stem in IDX_FILES[part])
    images, labels = read_idx(image_file, 3), read_idx(label_file, 1)
    if len(images) != len(labels):
        raise UserError(f"{image_file} holds {len(images)} images but {label_file} holds {len(labels)} labels")
    return images, labels


def class_names_for(labels: np.ndarray, names_file: Path | None, source: Path) -> list[str]:
    """Names from `names_file` (one a line) when it exists, else the labels 0, 1, ... as text."""
    if labels.size == 0:
        raise UserError(f"{source} holds no images")
    count = int(labels.max()) + 1
    if names_file is None or not names_file.is_file():
        return [str(label) for label in range(count)]
    names = [line.strip() for line in names_file.read_text().splitlines() if line.strip()]
    if len(names) < count:
        raise UserError(f"{names_file} names {len(names)} classes but {source} has labels up to {count - 1}")
    return names


def load_idx(config: DataConfig) -> Dataset:
    """root/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]: validation carved from the training file
    (stratified, seeded; val_fraction of it), the test file as the test split."""
    root = config.location("root")
    if not root.is_dir():
        raise FieldError("", "data.root", f"IDX folder not found: {root}")
    try:
        idx_file(root, IDX_FILES["train"][0])
    except UserError as missing:
        raise FieldError("", "data.root", f"{missing} (the folder of MNIST-format files)") from None
    train_images, train_labels = read_idx_pair(root, "train")
    test_images, test_labels = read_idx_pair(root, "test")
    if train_images.shape[1:] != test_images.shape[1:]:
        raise UserError(f"the training images in {root} are {train_images.shape[1:]} pixels, the test images "
                        f"{test_images.shape[1:]}")
    labels = torch.from_numpy(np.concatenate([train_labels, test_labels]).astype(np.int64))
    class_names = class_names_for(labels.numpy(), root / "classes.txt", root)
    files = [torch.arange(len(train_labels)), torch.arange(len(train_labels), len(labels))]  # training, test file
    train_part, test = draw_sample(labels, files, config.sample, config.split_seed)
    keep, val, _ = stratified_split(labels[train_part], config.val_fraction, 0.0, config.split_seed)

    def pixels() -> torch.Tensor:
        return torch.from_numpy(np.concatenate([train_images, test_images]))[:, None].contiguous()

    return resident_dataset(config, root.resolve().name, class_names, pixels, labels, train_part[keep],
                            train_part[val], test)


def load_medmnist(config: DataConfig) -> Dataset:
    """A MedMNIST archive with its own train, val and test splits; single-label, grayscale or RGB uint8."""
    path = config.location("path")
    if not path.is_file():
        raise FieldError("", "data.path", f"MedMNIST archive not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = [name for name in MEDMNIST_ARRAYS if name not in archive.files]
            if missing:
                raise UserError(f"{path} is not a MedMNIST archive: it lacks {', '.join(missing)}")
            arrays = {name: archive[name] for name in MEDMNIST_ARRAYS}
    except OSError as error:
        raise UserError(f"cannot read MedMNIST archive {path}: {error.strerror or error}") from None
    except (ValueError, EOFError, zipfile.BadZipFile):  # numpy takes a file that is no zip for a pickle
        raise UserError(f"{path} is not a .npz archive (a zip of numpy arrays, as MedMNIST ships)") from None
    images, labels = [], []
    for part in ("train", "val", "test"):
        part_images, part_labels = arrays[f"{part}_images"], arrays[f"{part}_labels"]
        if part_labels.ndim == 2 and part_labels.shape[1] == 1:
            part_labels = part_labels[:, 0]
        if part_labels.ndim != 1:
            raise UserError(f"{path}: {part}_labels has shape {part_labels.shape}; only single-label data sets "
                            "(labels of shape (n,) or (n, 1)) can be trained, not multi-label ones")
        if not np.issubdtype(part_labels.dtype, np.integer) or (len(part_labels) and part_labels.min() < 0):
            raise UserError(f"{path}: {part}_labels must be non-negative integers, got {part_labels.dtype}")
        if part_images.dtype != np.uint8 or not (part_images.ndim == 3 or part_images.ndim == 4
                                                 and part_images.shape[3] == 3):
            raise UserError(f"{path}: {part}_images must be uint8 of shape (n, h, w) or (n, h, w, 3), "
                            f"got {part_images.dtype} {part_images.shape}")
        if len(part_images) != len(part_labels):
            raise UserError(f"{path}: {part}_images holds {len(part_images)} images but {part}_labels "
                            f"{len(part_labels)} labels")
        images.append(part_images)
        labels.append(part_labels)
    if len({image.shape[1:] for image in images}) != 1:
        raise UserError(f"{path}: the splits' images differ in size: {', '.join(str(i.shape[1:]) for i in images)}")
    all_labels = torch.from_numpy(np.concatenate(labels).astype(np.int64))
    bounds = np.cumsum([0] + [len(part) for part in labels])
    train, val, test = draw_sample(all_labels, [torch.arange(bounds[i], bounds[i + 1]) for i in range(3)],
                                   config.sample, config.split_seed)

    def pixels() -> torch.Tensor:
        stacked = torch.from_numpy(np.concatenate(images))
        return (stacked[:, None] if stacked.ndim == 3 else stacked.permute(0, 3, 1, 2)).contiguous()

    return resident_dataset(config, path.stem, class_names_for(all_labels.numpy(), None, path), pixels, all_labels,
                            train, val, test)
