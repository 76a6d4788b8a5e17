"""The tensors a run trains on: a Split (images and labels on one device) and a Dataset (three splits
and their class names). Image files stay resident as uint8 pixels and are normalised per batch where they
live; `Split.inputs` gives what the model takes."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from pipeline.errors import UserError


THIN_CLASS = 5  # validation or test examples below which a class's accuracy is mostly the luck of a few images


@dataclass
class Split:
    """Images (N, C, H, W) and labels (N,) int64, on one device. The images are either the model's
    float32 inputs, or uint8 pixels with the per-channel `mean` and `std` (1, C, 1, 1) that normalise
    them: inputs = (pixels / 255 - mean) / std."""

    images: torch.Tensor
    labels: torch.Tensor
    mean: torch.Tensor | None = None  # set for uint8 pixels only
    std: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.labels.shape[0]

    def to(self, device: torch.device) -> "Split":
        moved = (None if t is None else t.to(device) for t in (self.mean, self.std))
        return Split(self.images.to(device), self.labels.to(device), *moved)

    def subset(self, indices: torch.Tensor | slice) -> "Split":
        """The examples at `indices` (positions, a boolean mask or a slice), with the same normalisation."""
        return Split(self.images[indices], self.labels[indices], self.mean, self.std)

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        """Model inputs from some of this split's images (uint8 pixels are normalised, float32 pass through)."""
        if self.mean is None or self.std is None:
            return images
        return images.float().div_(255).sub_(self.mean).div_(self.std)

    def inputs(self, indices: torch.Tensor | None = None) -> torch.Tensor:
        """The model inputs of the examples at `indices` (all of them when None), made on the split's device."""
        return self.normalize(self.images if indices is None else self.images[indices])

    def chunks(self, size: int) -> Iterator[torch.Tensor]:
        """The model inputs of the whole split in order, `size` examples at a time (for evaluation)."""
        return (self.normalize(chunk) for chunk in self.images.split(size))

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
    # With data.sample: (the images drawn, the images the data set holds), counted before a rare class is thinned.
    sample: tuple[int, int] | None = None

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def in_channels(self) -> int:
        return self.train.images.shape[1]

    def to(self, device: torch.device) -> "Dataset":
        return Dataset(self.name, self.class_names, self.train.to(device), self.val.to(device), self.test.to(device),
                       self.pixel_mean, self.pixel_std, self.sample)

    def split_counts(self) -> dict[str, list[int]]:
        """Examples per class in each split: {"train": [n_0, n_1, ...], "val": [...], "test": [...]}."""
        return {name: split.class_counts(self.num_classes)
                for name, split in (("train", self.train), ("val", self.val), ("test", self.test))}

    def check_every_class_present(self) -> None:
        """Refuse a split that lost a class (check_classes_present)."""
        check_classes_present(self.class_names, self.split_counts())

    def thin_classes(self, minimum: int = THIN_CLASS) -> str | None:
        """One line naming the classes with fewer than `minimum` examples in validation or test, where one image
        moves their accuracy by 100/n points; None when every class has enough."""
        counts = self.split_counts()
        thin = []
        for i, name in enumerate(self.class_names):
            few = [f"{counts[split][i]} {split}" for split in ("val", "test") if 0 < counts[split][i] < minimum]
            if few:
                thin.append(f"{name!r} ({', '.join(few)})")
        if not thin:
            return None
        return (f"warning: fewer than {minimum} validation or test examples for class{'es' if len(thin) > 1 else ''} "
                f"{', '.join(thin)}: one image moves its accuracy by more than {100 // minimum} points, so its numbers "
                "(and the rare-class and worst-class rows) say little; add images or raise val_fraction / "
                "test_fraction")

    def rare_class(self, configured: str | None = None) -> str | None:
        """The class made rare (`configured`: the data's imbalance_class), else the one with the fewest training
        examples where it has under half the most's; None when no class is rare."""
        if configured is not None and configured in self.class_names:
            return configured
        counts = self.split_counts()["train"]
        fewest = min(range(len(counts)), key=counts.__getitem__)
        return self.class_names[fewest] if counts[fewest] < max(counts) / 2 else None

    def split_summary(self, width: int | None = None, rare: str | None = None) -> list[str]:
        """What the splits hold, a line each, for the user to check once: counts per class (up to 10 classes),
        else the total and the smallest class; the `rare` class marked with a *, and a line saying so; then a
        warning line for classes too thin to measure (thin_classes). `width`: the most a line may hold (a
        terminal's, or a pipe's 80); counts that would not fit go on further lines, under the first count, so that
        no `class:count` is broken."""
        lines = []
        names = [f"{name}*" if name == rare else name for name in self.class_names]
        for split, counts in self.split_counts().items():
            head = f"{split:<5} {sum(counts):>6}  "
            if len(counts) <= 10:
                lines += _wrap_tokens(head, [f"{name}:{count}" for name, count in zip(names, counts)], width)
            else:
                fewest = min(range(len(counts)), key=counts.__getitem__)
                lines.append(f"{head}{min(counts)}-{max(counts)} per class (fewest: {self.class_names[fewest]})")
        if rare is not None:
            lines.append(f"* the rare class: {rare}")
        if self.sample is not None:
            lines.append(f"a sample (data.sample): {self.sample[0]:,} of the data set's {self.sample[1]:,} images")
        warning = self.thin_classes()
        return lines + ([warning] if warning else [])


def check_classes_present(class_names: list[str], counts: dict[str, list[int]]) -> None:
    """Refuse a split that lost a class: balanced and worst-class accuracy would silently leave it out. An empty
    validation split (val_fraction = 0, the papers' protocol) is allowed: it has no accuracy at all. `counts`: the
    examples per class of each split, as Dataset.split_counts gives them (known before any image is decoded)."""
    checked = [split for split, per_class in counts.items() if split != "val" or any(per_class)]
    for index, name in enumerate(class_names):
        missing = [split for split in checked if counts[split][index] == 0]
        if missing:
            total = sum(per_class[index] for per_class in counts.values())
            raise UserError(f"class {name!r} ({total} example(s) in all) has none in the {' and '.join(missing)} "
                            f"split{'s' if len(missing) > 1 else ''}, so its accuracy could not be measured "
                            "there; add examples of it, or change val_fraction / test_fraction / imbalance_keep")


def _wrap_tokens(head: str, tokens: list[str], width: int | None) -> list[str]:
    """`head` then the tokens, space-separated, on as many lines of at most `width` characters as they need (one
    line when `width` is None); a continuation line is indented under the first token. A token is never split."""
    lines, line, fresh = [], head, True
    for token in tokens:
        if not fresh and width is not None and len(line) + 1 + len(token) > width:
            lines.append(line)
            line, fresh = " " * len(head), True
        line += token if fresh else " " + token
        fresh = False
    return lines + [line]
