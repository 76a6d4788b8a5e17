"""Validated configuration objects: plain, frozen data that fully describe a training run."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from pipeline.errors import UserError


@dataclass(frozen=True)
class DataConfig:
    """Which data set and how to split it. The split seed is separate from the training seed so
    that several training seeds can be compared on the same split."""

    name: str = "digits"
    split_seed: int = 0
    val_fraction: float = 0.2
    test_fraction: float = 0.2
    imbalance_class: str | None = None  # keep only `imbalance_keep` of this class in train and val
    imbalance_keep: float = 0.01

    def __post_init__(self) -> None:
        if not 0 < self.val_fraction < 1 or not 0 < self.test_fraction < 1 or self.val_fraction + self.test_fraction >= 1:
            raise UserError("val_fraction and test_fraction must each be in (0, 1) and sum to less than 1")
        if not 0 < self.imbalance_keep <= 1:
            raise UserError(f"imbalance_keep must be in (0, 1], got {self.imbalance_keep}")


@dataclass(frozen=True)
class TrainConfig:
    """One training run: data, network, method and its parameter values (unresolved: as given)."""

    data: DataConfig = field(default_factory=DataConfig)
    backbone: str = "small_cnn"
    weights: str = "none"
    method: str = "erm"
    params: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    device: str = "auto"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve_device(name: str) -> torch.device:
    """auto -> cuda when available, else cpu; asking for cuda without a GPU is a UserError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("device cuda was asked for but no CUDA GPU is available; use --device cpu or auto")
    if name not in ("cpu", "cuda"):
        raise UserError(f"unknown device {name!r}; use auto, cpu or cuda")
    return torch.device(name)
