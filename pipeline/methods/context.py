"""What a method's parts are given explicitly: the run's seeded generator, the number of classes and
the data set's normalisation (attacks work in [0, 1] pixel space)."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch


@dataclass(frozen=True)
class PartContext:
    """Everything a part may draw on besides its hyper-parameters."""

    generator: torch.Generator  # the run's seeded generator: every random draw of a part comes from it
    num_classes: int
    pixel_mean: tuple[float, ...]  # normalised = (pixel - mean) / std, per channel, pixels in [0, 1]
    pixel_std: tuple[float, ...]


@contextmanager
def global_rng_from(generator: torch.Generator) -> Iterator[None]:
    """Run library code that draws from torch's global RNG (torchvision's MixUp and CutMix, the attacks'
    random start) on a seed drawn from the run's generator, then restore the global state untouched."""
    seed = int(torch.randint(2**62, (1,), generator=generator, device=generator.device))
    devices = [generator.device] if generator.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield
