"""Samplers decide which training examples form each batch.

A sampler yields index tensors for one epoch and, after each forward pass, is shown the fresh
per-example losses of its batch (`weigh`), which it may use to update its state and to return
per-example weights for the loss. Any sampler composes with any other part.

Every sampler counts the distinct examples in the batches it draws (`mean_distinct_per_batch`): at a
large beta, i.i.d. hardness-weighted draws can fill a batch with copies of a few examples.
"""
from __future__ import annotations

import math
from typing import Iterator

import torch

from pipeline.methods.interfaces import Params


IMPORTANCE_WEIGHT_CLIP = (0.1, 10.0)  # w_min, w_max of the hardness paper (appendix 8.1)
# Without replacement, the authors' released sampler raises every probability to at least 1e-4 / n and
# renormalises, so that a batch can always be filled when softmax(beta * L) underflows to zero.
NO_REPLACEMENT_FLOOR = 1e-4


def distinct_count(indices: torch.Tensor) -> torch.Tensor:
    """How many different examples a batch holds, as a tensor on the batch's device (no sync)."""
    ordered = indices.sort().values
    return 1 + (ordered[1:] != ordered[:-1]).sum()


class DistinctCounter:
    """Counts the distinct examples of every batch a sampler yields, read back once at the end."""

    distinct_sum: torch.Tensor | int = 0  # summed on the device: counting costs no sync
    batches_drawn = 0

    def count(self, batches: Iterator[torch.Tensor]) -> Iterator[torch.Tensor]:
        for indices in batches:
            self.distinct_sum = self.distinct_sum + distinct_count(indices)
            self.batches_drawn += 1
            yield indices

    def mean_distinct_per_batch(self) -> float | None:
        """The mean number of distinct examples per batch drawn so far (None before any batch)."""
        return float(self.distinct_sum) / self.batches_drawn if self.batches_drawn else None


class UniformSampler(DistinctCounter):
    """Every example once per epoch in a random order (plain SGD)."""

    def __init__(self, num_examples: int, batch_size: int, params: Params, generator: torch.Generator,
                 initial_loss: float = 0.0) -> None:
        self.num_examples, self.batch_size, self.generator = num_examples, batch_size, generator
        self.batches_per_epoch = max(1, num_examples // batch_size + (num_examples % batch_size > 1))

    def epoch(self) -> Iterator[torch.Tensor]:
        order = torch.randperm(self.num_examples, generator=self.generator, device=self.generator.device)
        batches = list(order.split(self.batch_size))
        if len(batches) > 1 and len(batches[-1]) == 1:  # BatchNorm cannot train on a batch of one
            batches[-2:] = [torch.cat(batches[-2:])]
        yield from self.count(iter(batches))

    def weigh(self, indices: torch.Tensor, losses: torch.Tensor) -> torch.Tensor | None:
        return None


class HardnessWeightedSampler(DistinctCounter):
    """DRO with hardness-weighted sampling (the hardness paper's Algorithm 1).

    Keeps a stale loss per training example; batches are drawn from p = softmax(beta * L) and
    the drawn examples' stale losses are replaced by their fresh losses. beta -> 0 is ERM.
    hws_replacement = true draws i.i.d. (the formula); false draws no example twice in a batch
    (the authors' released sampler, with its probability floor).
    """

    def __init__(self, num_examples: int, batch_size: int, params: Params, generator: torch.Generator,
                 initial_loss: float = 0.0) -> None:
        self.batch_size, self.generator = batch_size, generator
        self.beta, self.importance_sampling = params["beta"], params["importance_sampling"]
        self.replacement = params.get("hws_replacement", True)
        self.batches_per_epoch = math.ceil(num_examples / batch_size)
        self.stale_losses = torch.full((num_examples,), float(initial_loss), device=generator.device)

    def probabilities(self) -> torch.Tensor:
        """The hardness weights p = softmax(beta * L) over all training examples."""
        return torch.softmax(self.beta * self.stale_losses, dim=0)

    def epoch(self) -> Iterator[torch.Tensor]:
        yield from self.count(self.draw() for _ in range(self.batches_per_epoch))

    def floored_probabilities(self) -> torch.Tensor:
        """The hardness weights with every probability raised to at least NO_REPLACEMENT_FLOOR / n and
        renormalised: what draws without replacement use, so a batch can be filled when the softmax underflows."""
        p = self.probabilities()
        floored = p.clamp(min=NO_REPLACEMENT_FLOOR / len(p))
        return floored / floored.sum()

    def draw(self) -> torch.Tensor:
        """One batch of indices from the hardness weights, i.i.d. or without replacement."""
        if self.replacement:
            return torch.multinomial(self.probabilities(), self.batch_size, replacement=True, generator=self.generator)
        p = self.floored_probabilities()
        return torch.multinomial(p, min(self.batch_size, len(p)), replacement=False, generator=self.generator)

    def weigh(self, indices: torch.Tensor, losses: torch.Tensor) -> torch.Tensor | None:
        stale = self.stale_losses[indices]
        self.stale_losses[indices] = losses.detach().to(self.stale_losses.dtype)
        if not self.importance_sampling:
            return None
        return importance_weights(losses.detach(), stale, self.beta)


def importance_weights(losses: torch.Tensor, stale_losses: torch.Tensor, beta: float) -> torch.Tensor:
    """w_i = exp(beta * (loss_i - L_i)) clipped to [0.1, 10] (Algorithm 1, lines 9-10)."""
    return torch.exp(beta * (losses - stale_losses)).clamp(*IMPORTANCE_WEIGHT_CLIP)
