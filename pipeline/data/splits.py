"""Seeded, stratified splits and the hardness paper's imbalance protocol."""
from __future__ import annotations

import torch

from pipeline.config import DataConfig
from pipeline.errors import UserError


def stratified_split(labels: torch.Tensor, val_fraction: float, test_fraction: float,
                     seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Indices of train / val / test with each class split in the same proportions (seeded)."""
    generator = torch.Generator().manual_seed(seed)
    parts: tuple[list, list, list] = ([], [], [])
    for label in labels.unique(sorted=True).tolist():
        members = torch.nonzero(labels == label).flatten()
        members = members[torch.randperm(len(members), generator=generator)]
        n_test = round(test_fraction * len(members))
        n_val = round(val_fraction * len(members))
        parts[2].append(members[:n_test])
        parts[1].append(members[n_test:n_test + n_val])
        parts[0].append(members[n_test + n_val:])
    return tuple(torch.cat(part).sort().values for part in parts)  # type: ignore[return-value]


def keep_fraction_of_class(indices: torch.Tensor, labels: torch.Tensor, label: int, keep: float) -> torch.Tensor:
    """Drop all but `keep` (at least one) of class `label` from `indices`, keeping the first ones.

    The hardness paper's MNIST check keeps 1% of one digit in training; the test set is unchanged.
    """
    of_class = indices[labels[indices] == label]
    if len(of_class) == 0:
        raise UserError(f"class {label} has no examples to keep a fraction of")
    kept = of_class[:max(1, round(keep * len(of_class)))]
    return torch.cat([indices[labels[indices] != label], kept]).sort().values


def apply_imbalance(config: DataConfig, class_names: list[str], labels: torch.Tensor, train: torch.Tensor,
                    val: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The imbalance option of any data set: keep only `imbalance_keep` of one class in training, and
    in validation too when `imbalance_in` is "train+val"; the test split is never changed."""
    if config.imbalance_class is None:
        return train, val
    rare = class_index(class_names, str(config.imbalance_class))
    train = keep_fraction_of_class(train, labels, rare, config.imbalance_keep)
    if config.imbalance_in == "train+val":
        val = keep_fraction_of_class(val, labels, rare, config.imbalance_keep)
    return train, val


def class_index(class_names: list[str], name: str) -> int:
    """The index of a class given by name (or by index written as a number)."""
    if name in class_names:
        return class_names.index(name)
    raise UserError(f"unknown class {name!r} for --imbalance-class; classes: {', '.join(class_names)}")
