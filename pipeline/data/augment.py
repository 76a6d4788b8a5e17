"""Light augmentation of a training batch where it lives (on the training device), with no Python loop
over examples: a random horizontal flip and a random crop of the same size from a zero-padded copy
(zero is the mean after normalisation). Random draws come from the run's generator."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from pipeline.config import DataConfig

Augment = Callable[[torch.Tensor], torch.Tensor]


def make_augment(config: DataConfig, generator: torch.Generator) -> Augment:
    """The batch augmentation `config` asks for (the identity when it asks for none)."""
    flip, padding = config.augment_flip, config.augment_crop_padding
    if not flip and not padding:
        return lambda images: images
    return lambda images: augment_batch(images, generator, flip, padding)


def augment_batch(images: torch.Tensor, generator: torch.Generator, flip: bool, padding: int) -> torch.Tensor:
    """Each image of (N, C, H, W) flipped with probability 1/2 and/or shifted by up to `padding` pixels."""
    n, _, height, width = images.shape
    device = images.device
    if flip:
        flipped = torch.rand(n, generator=generator, device=device) < 0.5
        images = torch.where(flipped.view(n, 1, 1, 1), images.flip(3), images)
    if padding:
        padded = F.pad(images, (padding, padding, padding, padding))
        top = torch.randint(0, 2 * padding + 1, (n, 1), generator=generator, device=device)
        left = torch.randint(0, 2 * padding + 1, (n, 1), generator=generator, device=device)
        rows = (top + torch.arange(height, device=device))[:, :, None]  # (N, H, 1)
        cols = (left + torch.arange(width, device=device))[:, None, :]  # (N, 1, W)
        batch = torch.arange(n, device=device).view(n, 1, 1)
        images = padded[batch, :, rows, cols].permute(0, 3, 1, 2).contiguous()  # gathered as (N, H, W, C)
    return images
