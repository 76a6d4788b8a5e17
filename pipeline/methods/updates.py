"""Updates decide how one batch moves the model: one descent on the batch, or Algorithm 1's two
descents (on a generated batch, then on the original).

`step(model, optimizer, images, targets, weigh)` trains on one batch and returns the detached
per-example losses of the original batch. Each update calls `weigh` once, on the per-example
losses of the original batch at the current parameters and before any backward pass; the
weights it returns (None: uniform) multiply every descent loss of the step.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from pipeline.methods.context import PartContext
from pipeline.methods.generators import GENERATORS, Attack
from pipeline.methods.losses import method_loss, weighted_mean

Weigh = Callable[[torch.Tensor], torch.Tensor | None]


def descend(optimizer: torch.optim.Optimizer, losses: torch.Tensor, weights: torch.Tensor | None) -> None:
    """One optimiser step on the (weighted) mean of per-example losses."""
    optimizer.zero_grad(set_to_none=True)
    weighted_mean(losses, weights).backward()
    optimizer.step()


class ErmUpdate:
    """One step on the method's loss (cross-entropy on eq. 3 targets; alpha = 0 is plain ERM)."""

    def __init__(self, params: dict) -> None:
        self.alpha = params.get("alpha", 0.0)

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return method_loss(logits, targets, self.alpha)

    def step(self, model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor,
             targets: torch.Tensor, weigh: Weigh) -> torch.Tensor:
        losses = self.loss(model(images), targets)
        descend(optimizer, losses, weigh(losses.detach()))
        return losses.detach()


class GeneratedUpdate(ErmUpdate):
    """Algorithm 1's step with any chain of generators: generate (model in eval mode), then one descent
    on the generated batch followed by one on the original batch, the method's loss in both.

    GI-LS alone with perturb = "feature" generates a feature map, whose descent moves the head only;
    one backbone pass then serves both descent steps.
    """

    def __init__(self, params: dict, generators: list) -> None:
        super().__init__(params)
        self.generators = generators
        self.on_features = len(generators) == 1 and params.get("perturb") == "feature"
        self.attack_first = isinstance(generators[0], Attack)  # it reports no losses at the start

    def step(self, model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor,
             labels: torch.Tensor, weigh: Weigh) -> torch.Tensor:
        if self.on_features:
            return self._feature_step(model, optimizer, images, labels, weigh)
        generated, start_losses = self.generate(model, images, labels)
        weights = None if start_losses is None else weigh(start_losses)
        generated_losses = self.loss(model(generated), labels)
        if start_losses is None:  # GI-LS with T = 0: the generated batch is the original batch
            weights = weigh(generated_losses.detach())
        descend(optimizer, generated_losses, weights)
        losses = self.loss(model(images), labels)
        descend(optimizer, losses, weights)
        return losses.detach()

    def generate(self, model: nn.Module, images: torch.Tensor,
                 labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The chain's batch and the original batch's losses (eval mode), None only for GI-LS with T = 0."""
        was_training = model.training
        model.eval()
        generated, start_losses = images, None
        if self.attack_first:
            with torch.no_grad():
                start_losses = self.loss(model(images), labels)
        for generator in self.generators:
            generated, losses = generator.generate(model, generated, labels)
            start_losses = losses if start_losses is None else start_losses
        model.train(was_training)
        return generated, start_losses

    def _feature_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor,
                      labels: torch.Tensor, weigh: Weigh) -> torch.Tensor:
        features = model.embed(images)  # one backbone pass serves both descent steps
        with torch.no_grad():
            weights = weigh(self.loss(model.head(features), labels))
        generated = self.generators[0].ascend_features(model.head, features.detach(), labels)
        descend(optimizer, self.loss(model.head(generated), labels), weights)  # moves the head only
        # The backbone did not move, so `features` is still f(x) at the new parameters.
        losses = self.loss(model.head(features), labels)
        descend(optimizer, losses, weights)
        return losses.detach()


def build_update(generators: tuple[str, ...], params: dict, context: PartContext,
                 model: nn.Module) -> ErmUpdate:
    """The update of a method with these generators (none: one descent step)."""
    if not generators:
        return ErmUpdate(params)
    return GeneratedUpdate(params, [GENERATORS[name](params, context, model) for name in generators])

