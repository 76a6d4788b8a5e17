"""Seeded, stratified splits and the hardness paper's imbalance protocol."""
from __future__ import annotations

import hashlib
from typing import Sequence

import torch

from pipeline.config import DataConfig
from pipeline.errors import FieldError, UserError, did_you_mean


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


def keep_fraction_of_class(indices: torch.Tensor, labels: torch.Tensor, label: int, keep: float,
                           draw: torch.Generator | None = None) -> torch.Tensor:
    """Drop all but `keep` (at least one) of class `label` from `indices`: the ones `draw` picks, or without it the
    first ones (what every study stored before rare_kept trains on).

    The hardness paper's MNIST check keeps 1% of one digit in training; the test set is unchanged.
    """
    of_class = indices[labels[indices] == label]
    if len(of_class) == 0:
        raise UserError(f"class {label} has no examples to keep a fraction of")
    if draw is not None:
        of_class = of_class[torch.randperm(len(of_class), generator=draw)]
    kept = of_class[:max(1, round(keep * len(of_class)))]
    return torch.cat([indices[labels[indices] != label], kept]).sort().values


def rare_draw(split_seed: int) -> torch.Generator:
    """The generator that picks the rare-class examples kept for `split_seed`: seeded from a hash of it, so its draws
    are not the split's own (stratified_split seeds its generator with the split seed itself)."""
    return _hashed_generator(f"rare kept, split seed {split_seed}")


def _hashed_generator(text: str) -> torch.Generator:
    digest = hashlib.sha256(text.encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "big") >> 1)


def draw_sample(labels: torch.Tensor, parts: Sequence[torch.Tensor], sample: int | float | None,
                split_seed: int) -> list[torch.Tensor]:
    """Each part's indices (into `labels`) cut to data.sample, drawn with a generator of the split seed's own: a
    fraction keeps that share of each class of each part (at least one); a count keeps at most that many of each
    class in all, spread over the parts in proportion to what each holds of the class (largest remainders; at least
    one in each part that has the class, where the count allows). None keeps every index. The parts are the files'
    own (IDX's training and test files, a manifest's, MedMNIST's three), or one pool for data sets whose splits are
    carved (digits, a folder per class); sorted, as they came."""
    if sample is None:
        return list(parts)
    draw = _hashed_generator(f"sample, split seed {split_seed}")
    kept: list[list[torch.Tensor]] = [[] for _ in parts]
    for label in labels[torch.cat(list(parts))].unique(sorted=True).tolist():
        members = [part[labels[part] == label] for part in parts]
        sizes = [len(m) for m in members]
        counts = _fraction_counts(sizes, sample) if isinstance(sample, float) else _spread(sizes, int(sample))
        for i, (m, count) in enumerate(zip(members, counts)):
            kept[i].append(m[torch.randperm(len(m), generator=draw)[:count]])
    return [torch.cat(k).sort().values if k else part[:0] for k, part in zip(kept, parts)]


def _fraction_counts(sizes: list[int], fraction: float) -> list[int]:
    return [max(1, round(fraction * n)) if n else 0 for n in sizes]


def _spread(sizes: list[int], count: int) -> list[int]:
    """`count` (at most the sizes' sum) spread over parts of `sizes` in proportion, by largest remainders, each part
    that holds any getting at least one where the count allows."""
    total = sum(sizes)
    count = min(count, total)
    shares = [count * n / total for n in sizes]
    counts = [int(s) for s in shares]
    for i in sorted(range(len(sizes)), key=lambda i: counts[i] - shares[i])[:count - sum(counts)]:
        counts[i] += 1
    for i, n in enumerate(sizes):
        if n and not counts[i] and max(counts) > 1:
            counts[counts.index(max(counts))] -= 1
            counts[i] = 1
    return counts


def compact(labels: torch.Tensor,
            parts: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """The examples the parts keep, renumbered: (their indices into the old numbering, in order; each part's
    indices into the new; the labels of the kept examples). So a sample's files are the only ones decoded."""
    kept = torch.cat(list(parts)).sort().values
    position = torch.full((len(labels),), -1, dtype=torch.int64)
    position[kept] = torch.arange(len(kept))
    return kept, [position[part] for part in parts], labels[kept]


def apply_imbalance(config: DataConfig, class_names: list[str], labels: torch.Tensor, train: torch.Tensor,
                    val: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The imbalance option of any data set: keep only `imbalance_keep` of one class in training, and
    in validation too when `imbalance_in` is "train+val"; the test split is never changed. Which ones stay is
    `rare_kept`'s: drawn with the split seed, or the first ones."""
    if config.imbalance_class is None:
        return train, val
    rare = class_index(class_names, str(config.imbalance_class))
    draw = rare_draw(config.split_seed) if config.rare_drawn else None
    train = keep_fraction_of_class(train, labels, rare, config.imbalance_keep, draw)
    if config.imbalance_in == "train+val":
        val = keep_fraction_of_class(val, labels, rare, config.imbalance_keep, draw)
    return train, val


def class_index(class_names: list[str], name: str) -> int:
    """The index of a class given by name (or by index written as a number); another is data.imbalance_class's
    error (the command names where it was set)."""
    if name in class_names:
        return class_names.index(name)
    raise FieldError("", "data.imbalance_class", f"unknown class {name!r}{did_you_mean(name, class_names)}; "
                                                 f"classes: {', '.join(class_names)}")
