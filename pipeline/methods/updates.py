"""Updates decide how one batch moves the model: one descent on the batch, or Algorithm 1's two
descents (on a generated batch, then on the original).

`step(model, optimizer, images, targets, weigh)` trains on one batch and returns the detached
per-example losses of the original batch. Each update calls `weigh` once, on the per-example
losses of the original batch at the current parameters and before any backward pass; the
weights it returns (None: uniform) multiply every descent loss of the step.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence, cast

import torch
import torch.nn as nn

from pipeline.methods.context import PartContext
from pipeline.methods.declarations import GENERATORS, LOSSES
from pipeline.methods.interfaces import FeatureGenerator, FeatureModel, Generator, Loss, Params, Update, Weigh
from pipeline.methods.losses import weighted_mean

if TYPE_CHECKING:
    from pipeline.methods import Method


def descend(optimizer: torch.optim.Optimizer, losses: torch.Tensor, weights: torch.Tensor | None) -> None:
    """One optimiser step on the (weighted) mean of per-example losses."""
    optimizer.zero_grad(set_to_none=True)
    weighted_mean(losses, weights).backward()
    optimizer.step()


class OneDescentUpdate:
    """One descent step on the batch as the sampler drew it and the mixer rewrote it, with the method's
    loss (erm, ls, on a mixer's targets too) and the step's weights: every method without a generator."""

    def __init__(self, loss: Loss) -> None:
        self.loss = loss

    def step(self, model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor,
             targets: torch.Tensor, weigh: Weigh) -> torch.Tensor:
        losses = self.loss(model(images), targets)
        descend(optimizer, losses, weigh(losses.detach()))
        return losses.detach()


class TwoDescentUpdate:
    """Algorithm 1's step with any chain of generators: generate (model in eval mode), then one descent
    on the generated batch followed by one on the original batch, the method's loss and the same
    weights in both.

    A lone generator that makes feature maps (GI-LS with perturb = "feature") moves the head only in
    its first descent; one backbone pass then serves both descent steps.
    """

    def __init__(self, loss: Loss, generators: Sequence[Generator]) -> None:
        self.loss = loss
        self.generators = list(generators)
        self.on_features = len(self.generators) == 1 and self.generators[0].generates_features

    def step(self, model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor,
             labels: torch.Tensor, weigh: Weigh) -> torch.Tensor:
        if self.on_features:
            return self._feature_step(model, optimizer, images, labels, weigh)
        generated, start_losses = self.generate(model, images, labels)
        weights = weigh(start_losses)
        descend(optimizer, self.loss(model(generated), labels), weights)
        losses = self.loss(model(images), labels)
        descend(optimizer, losses, weights)
        return losses.detach()

    def generate(self, model: nn.Module, images: torch.Tensor,
                 labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The chain's batch and the original batch's losses (eval mode), never the generated batch's: an attack,
        or GI-LS with T = 0 (which measures nothing, and may be followed by an attack), gets one extra forward."""
        was_training = model.training
        model.eval()
        generated, start_losses = images, None
        if not self.generators[0].measures_start_losses:  # one extra forward gives the weights their losses
            with torch.no_grad():
                start_losses = self.loss(model(images), labels)
        for generator in self.generators:
            generated, losses = generator.generate(model, generated, labels)
            start_losses = losses if start_losses is None else start_losses
        model.train(was_training)
        assert start_losses is not None, "the first generator or the extra forward measures them"
        return generated, start_losses

    def _feature_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor,
                      labels: torch.Tensor, weigh: Weigh) -> torch.Tensor:
        classifier = cast(FeatureModel, model)  # a run's model is a training.models.Classifier
        features = classifier.embed(images)  # one backbone pass serves both descent steps
        with torch.no_grad():
            weights = weigh(self.loss(classifier.head(features), labels))
        generator = cast(FeatureGenerator, self.generators[0])
        generated = generator.ascend_features(classifier.head, features.detach(), labels)
        descend(optimizer, self.loss(classifier.head(generated), labels), weights)  # moves the head only
        # The backbone did not move, so `features` is still f(x) at the new parameters.
        losses = self.loss(classifier.head(features), labels)
        descend(optimizer, losses, weights)
        return losses.detach()


def build_update(method: Method, params: Params, context: PartContext, model: nn.Module) -> Update:
    """The update of `method`: its loss part, with its chain of generators if it has one (two descents),
    else one descent."""
    loss = LOSSES.load(method.loss)(params)
    if not method.generators:
        return OneDescentUpdate(loss)
    return TwoDescentUpdate(loss, [GENERATORS.load(name)(params, context, model) for name in method.generators])
