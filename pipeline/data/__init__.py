"""Data sets as tensors resident on the training device; batches are indexed from them.

`load_dataset(config, device)` returns a Dataset with train / val / test splits of images (N, C, H, W)
and integer labels, already on `device`. Image files stay resident as uint8 pixels (a quarter of the
memory of float32) and are normalised per batch where they live; `Split.inputs` gives what the
model takes, the same float32 numbers as normalising the whole split up front.
"""
from __future__ import annotations

from typing import Callable

import torch

from pipeline.config import DataConfig
from pipeline.data.dataset import Dataset, Split
from pipeline.errors import UserError

__all__ = ["Dataset", "Split", "LOADERS", "load_dataset"]


def _digits(config: DataConfig) -> Dataset:
    from pipeline.data.digits import load_digits

    return load_digits(config)


def _images(config: DataConfig) -> Dataset:
    from pipeline.data.images import load_images

    return load_images(config)


def _idx(config: DataConfig) -> Dataset:
    from pipeline.data.arrays import load_idx

    return load_idx(config)


def _medmnist(config: DataConfig) -> Dataset:
    from pipeline.data.arrays import load_medmnist

    return load_medmnist(config)


LOADERS: dict[str, Callable[[DataConfig], Dataset]] = {"digits": _digits, "images": _images, "idx": _idx,
                                                       "medmnist": _medmnist}


def load_dataset(config: DataConfig, device: torch.device) -> Dataset:
    """Load, split and move a data set to `device`; an unknown name is a UserError."""
    if config.name not in LOADERS:
        raise UserError(f"unknown data set {config.name!r}; known: {', '.join(LOADERS)}")
    dataset = LOADERS[config.name](config)
    dataset.check_every_class_present()
    return dataset.to(device)
