"""Samplers decide which training examples form each batch.

A sampler yields index tensors for one epoch and, after each forward pass, is shown the fresh
per-example losses of its batch (`weigh`), which it may use to update its state and to return
per-example weights for the loss. Any sampler composes with any other part.
"""
from __future__ import annotations

import math
from typing import Iterator

import torch


IMPORTANCE_WEIGHT_CLIP = (0.1, 10.0)  # w_min, w_max of the hardness paper (appendix 8.1)


class UniformSampler:
    """Every example once per epoch in a random order (plain SGD)."""

    def __init__(self, num_examples: int, batch_size: int, params: dict, generator: torch.Generator,
                 initial_loss: float = 0.0) -> None:
        self.num_examples, self.batch_size, self.generator = num_examples, batch_size, generator
        self.batches_per_epoch = max(1, num_examples // batch_size + (num_examples % batch_size > 1))

    def epoch(self) -> Iterator[torch.Tensor]:
        order = torch.randperm(self.num_examples, generator=self.generator, device=self.generator.device)
        batches = list(order.split(self.batch_size))
        if len(batches) > 1 and len(batches[-1]) == 1:  # BatchNorm cannot train on a batch of one
            batches[-2:] = [torch.cat(batches[-2:])]
        yield from batches

    def weigh(self, indices: torch.Tensor, losses: torch.Tensor) -> torch.Tensor | None:
        return None


class HardnessWeightedSampler:
    """DRO with hardness-weighted sampling (the hardness paper's Algorithm 1).

    Keeps a stale loss per training example; batches are drawn from p = softmax(beta * L) and
    the drawn examples' stale losses are replaced by their fresh losses. beta -> 0 is ERM.
    """

    def __init__(self, num_examples: int, batch_size: int, params: dict, generator: torch.Generator,
                 initial_loss: float = 0.0) -> None:
        self.batch_size, self.generator = batch_size, generator
        self.beta, self.importance_sampling = params["beta"], params["importance_sampling"]
        self.batches_per_epoch = math.ceil(num_examples / batch_size)
        self.stale_losses = torch.full((num_examples,), float(initial_loss), device=generator.device)

    def probabilities(self) -> torch.Tensor:
        """The hardness weights p = softmax(beta * L) over all training examples."""
        return torch.softmax(self.beta * self.stale_losses, dim=0)

    def epoch(self) -> Iterator[torch.Tensor]:
        for _ in range(self.batches_per_epoch):
            yield torch.multinomial(self.probabilities(), self.batch_size, replacement=True, generator=self.generator)

    def weigh(self, indices: torch.Tensor, losses: torch.Tensor) -> torch.Tensor | None:
        stale = self.stale_losses[indices]
        self.stale_losses[indices] = losses.detach().to(self.stale_losses.dtype)
        if not self.importance_sampling:
            return None
        return importance_weights(losses.detach(), stale, self.beta)


def importance_weights(losses: torch.Tensor, stale_losses: torch.Tensor, beta: float) -> torch.Tensor:
    """w_i = exp(beta * (loss_i - L_i)) clipped to [0.1, 10] (Algorithm 1, lines 9-10)."""
    return torch.exp(beta * (losses - stale_losses)).clamp(*IMPORTANCE_WEIGHT_CLIP)


SAMPLERS = {"uniform": UniformSampler, "hws": HardnessWeightedSampler}
