"""Data sets as tensors resident on the training device; batches are indexed from them.

`load_dataset(config, device)` returns a Dataset with train / val / test splits of float images
(N, C, H, W) and integer labels, already on `device`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from pipeline.config import DataConfig
from pipeline.errors import UserError


@dataclass
class Split:
    """Images (N, C, H, W) float32 and labels (N,) int64, on one device."""

    images: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return self.labels.shape[0]

    def to(self, device: torch.device) -> "Split":
        return Split(self.images.to(device), self.labels.to(device))

    def class_counts(self, num_classes: int) -> list[int]:
        return torch.bincount(self.labels, minlength=num_classes).tolist()


@dataclass
class Dataset:
    """A named data set with its class names and its three splits."""

    name: str
    class_names: list[str]
    train: Split
    val: Split
    test: Split
    # The normalisation applied: normalised = (pixel - mean) / std per channel, pixels in [0, 1]
    # (attacks work in pixel space).
    pixel_mean: tuple[float, ...] = (0.0,)
    pixel_std: tuple[float, ...] = (1.0,)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def in_channels(self) -> int:
        return self.train.images.shape[1]

    def to(self, device: torch.device) -> "Dataset":
        return Dataset(self.name, self.class_names, self.train.to(device), self.val.to(device), self.test.to(device),
                       self.pixel_mean, self.pixel_std)


def _digits(config: DataConfig) -> Dataset:
    from pipeline.data.digits import load_digits

    return load_digits(config)


def _images(config: DataConfig) -> Dataset:
    from pipeline.data.images import load_images

    return load_images(config)


LOADERS: dict[str, Callable[[DataConfig], Dataset]] = {"digits": _digits, "images": _images}


def load_dataset(config: DataConfig, device: torch.device) -> Dataset:
    """Load, split and move a data set to `device`; an unknown name is a UserError."""
    if config.name not in LOADERS:
        raise UserError(f"unknown data set {config.name!r}; known: {', '.join(LOADERS)}")
    return LOADERS[config.name](config).to(device)
