"""scikit-learn's 1,797 real 8x8 handwritten digits: a real data set shipped with the package."""
from __future__ import annotations

import torch
from sklearn.datasets import load_digits as sklearn_digits

from pipeline.config import DataConfig
from pipeline.data.dataset import Dataset, Split
from pipeline.data.splits import apply_imbalance, stratified_split


def load_digits(config: DataConfig) -> Dataset:
    """Seeded stratified split, optional imbalance on train and val, standardised with train statistics."""
    bunch = sklearn_digits()
    images = torch.tensor(bunch.images, dtype=torch.float32)[:, None] / 16.0  # (1797, 1, 8, 8) in [0, 1]
    labels = torch.tensor(bunch.target, dtype=torch.int64)
    class_names = [str(c) for c in bunch.target_names]
    train, val, test = stratified_split(labels, config.val_fraction, config.test_fraction, config.split_seed)
    train, val = apply_imbalance(config, class_names, labels, train, val)
    # Summed in float64 (exactly for the mean: pixels are multiples of 1/16) and rounded to float32, the
    # statistics do not depend on the order torch sums in, which changes with its thread count.
    pixels = images[train].double()
    mean, std = pixels.mean().float(), pixels.std().float()
    images = (images - mean) / std

    def split(indices: torch.Tensor) -> Split:
        return Split(images[indices].contiguous(), labels[indices].contiguous())

    return Dataset("digits", class_names, split(train), split(val), split(test), (mean.item(),), (std.item(),))
