"""Mixers rewrite a drawn batch and its targets before the step: Mixup, CutMix, Cutout.

`mix(images, labels) -> (images, targets)`: targets are the labels (N,) when they stay one class per
image, or mixed one-hot vectors (N, k), which the loss smooths as eq. 3. Every random draw comes from
the run's generator (torchvision's transforms draw from the global RNG, seeded from it here).
"""
from __future__ import annotations

import torch

from pipeline.methods.context import PartContext, global_rng_from
from pipeline.methods.interfaces import Params


class NoMixer:
    """The batch as drawn: the mixer of a method that names none."""

    def __init__(self, params: Params, context: PartContext) -> None:
        pass

    def mix(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return images, labels


class TorchvisionMixer:
    """Mixup (Zhang et al. 2018) or CutMix (Yun et al. 2019) as torchvision.transforms.v2 implements them:
    lambda ~ Beta(mix_alpha, mix_alpha), each image paired with the previous one in the batch."""

    TRANSFORM: str  # the name of the torchvision.transforms.v2 class, imported with the first mixer (see models.py)

    def __init__(self, params: Params, context: PartContext) -> None:
        from torchvision.transforms import v2

        self.transform = getattr(v2, self.TRANSFORM)(alpha=params["mix_alpha"], num_classes=context.num_classes)
        self.generator = context.generator

    def mix(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with global_rng_from(self.generator):
            return self.transform(images, labels)


class MixUpMixer(TorchvisionMixer):
    TRANSFORM = "MixUp"


class CutMixMixer(TorchvisionMixer):
    TRANSFORM = "CutMix"


class CutoutMixer:
    """Cutout (DeVries and Taylor 2017): one square hole of side `cutout_size` (0: half the image side)
    at a uniformly random centre per image, clipped at the border, set to zero (the data set mean)."""

    def __init__(self, params: Params, context: PartContext) -> None:
        self.size, self.generator = params["cutout_size"], context.generator

    def mix(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return cutout(images, self.size or min(images.shape[-2:]) // 2, self.generator), labels


def cutout(images: torch.Tensor, size: int, generator: torch.Generator) -> torch.Tensor:
    """Zero rows [cy - size // 2, cy + size - size // 2) and the same columns around a random centre."""
    n, _, height, width = images.shape
    device = images.device
    cy = torch.randint(0, height, (n, 1), generator=generator, device=generator.device).to(device)
    cx = torch.randint(0, width, (n, 1), generator=generator, device=generator.device).to(device)
    rows, cols = torch.arange(height, device=device), torch.arange(width, device=device)
    in_rows = (rows >= cy - size // 2) & (rows < cy + size - size // 2)  # (N, H)
    in_cols = (cols >= cx - size // 2) & (cols < cx + size - size // 2)  # (N, W)
    hole = in_rows[:, None, :, None] & in_cols[:, None, None, :]
    return images.masked_fill(hole, 0.0)
