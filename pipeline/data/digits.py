"""scikit-learn's 1,797 real 8x8 handwritten digits: a real data set shipped with the package."""
from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch

from pipeline.config import DataConfig
from pipeline.data.dataset import Dataset, Split
from pipeline.data.splits import apply_imbalance, draw_sample, stratified_split


def shipped_digits() -> tuple[np.ndarray, np.ndarray]:
    """The digits' 8x8 images and labels as scikit-learn's load_digits gives them: its digits.csv.gz read as it
    reads it, found where scikit-learn is installed without importing it (about 0.9 s of every process that trains
    on digits: `train`, each Dask worker); through load_digits itself where the file is not there."""
    spec = importlib.util.find_spec("sklearn")
    folders = [] if spec is None or spec.submodule_search_locations is None else spec.submodule_search_locations
    shipped = [path for folder in folders if (path := Path(folder) / "datasets" / "data" / "digits.csv.gz").is_file()]
    if not shipped:
        from sklearn.datasets import load_digits as sklearn_digits

        bunch = sklearn_digits()
        return bunch.images, bunch.target
    with gzip.open(shipped[0], mode="rt", encoding="utf-8") as rows:
        data = np.loadtxt(rows, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def load_digits(config: DataConfig) -> Dataset:
    """Seeded stratified split, optional imbalance on train and val, standardised with train statistics."""
    pixels_16, target = shipped_digits()
    images = torch.tensor(pixels_16, dtype=torch.float32)[:, None] / 16.0  # (1797, 1, 8, 8) in [0, 1]
    labels = torch.tensor(target, dtype=torch.int64)
    (pool,) = draw_sample(labels, [torch.arange(len(labels))], config.sample, config.split_seed)
    sample = None if config.sample is None else (len(pool), len(labels))
    images, labels = images[pool], labels[pool]
    class_names = [str(c) for c in range(10)]
    train, val, test = stratified_split(labels, config.val_fraction, config.test_fraction, config.split_seed)
    train, val = apply_imbalance(config, class_names, labels, train, val)
    # Summed in float64 (exactly for the mean: pixels are multiples of 1/16) and rounded to float32, the
    # statistics do not depend on the order torch sums in, which changes with its thread count.
    pixels = images[train].double()
    mean, std = pixels.mean().float(), pixels.std().float()
    images = (images - mean) / std

    def split(indices: torch.Tensor) -> Split:
        return Split(images[indices].contiguous(), labels[indices].contiguous())

    return Dataset("digits", class_names, split(train), split(val), split(test), (mean.item(),), (std.item(),), sample)
