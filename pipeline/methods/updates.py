"""Updates decide how one batch moves the model: ERM, label smoothing (LS) and GI-LS.

`step(model, optimizer, images, labels, weigh)` trains on one batch and returns the detached
per-example losses of the original batch. Each update calls `weigh` once, on the per-example
losses of the original batch at the current parameters and before any backward pass; the
weights it returns (None: uniform) multiply every descent loss of the step.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from pipeline.methods.losses import smoothed_cross_entropy, smoothed_targets, weighted_mean
from pipeline.methods.declarations import UPDATE_PARAMS
from pipeline.params import HParam

Weigh = Callable[[torch.Tensor], torch.Tensor | None]

def descend(optimizer: torch.optim.Optimizer, losses: torch.Tensor, weights: torch.Tensor | None) -> None:
    """One optimiser step on the (weighted) mean of per-example losses."""
    optimizer.zero_grad(set_to_none=True)
    weighted_mean(losses, weights).backward()
    optimizer.step()


def features_and_logits(model: nn.Module) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """x -> (z, logits) in one backbone pass: what the input-space ascent differentiates."""

    def forward(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = model.features(images)
        return features, model.head(features)

    return forward


class ErmUpdate:
    """Empirical risk minimisation: one step on the cross-entropy of the batch."""

    PARAMS: tuple[HParam, ...] = ()

    def __init__(self, params: dict) -> None:
        self.alpha = params.get("alpha", 0.0)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return smoothed_cross_entropy(logits, labels, self.alpha)

    def step(self, model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor,
             labels: torch.Tensor, weigh: Weigh) -> torch.Tensor:
        losses = self.loss(model(images), labels)
        descend(optimizer, losses, weigh(losses.detach()))
        return losses.detach()


class LabelSmoothingUpdate(ErmUpdate):
    """ERM on the eq. 3 smoothed targets."""

    PARAMS = UPDATE_PARAMS["ls"]


class GilsUpdate(ErmUpdate):
    """GI-LS (the GI-LS paper's Algorithm 1), batched over the mini-batch.

    T ascent steps of size eta on  l_LS(x^t) - gamma * 1/2 ||f(x^t) - f(x)||^2  generate x^T; then
    one descent step on the generated batch followed by one on the original batch, LS loss in both.
    perturb = "input" ascends on the image x through the whole network (BatchNorm in eval mode, so
    the per-example ascents are independent); perturb = "feature" ascends on z = f(x) through the
    linear head only (eq. 16 in closed form), where the generated point is a feature map and its
    descent step moves the head; one backbone pass then serves both descent steps.
    """

    PARAMS = UPDATE_PARAMS["gils"]

    def __init__(self, params: dict) -> None:
        super().__init__(params)
        self.steps, self.eta, self.gamma = params["T"], params["eta"], params["gamma"]
        self.perturb = params["perturb"]

    def ascend(self, forward: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
               start: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """T batched ascent steps from `start`; `forward` maps a point to (features, logits).

        Returns the generated points and the per-example losses at the start (None when T = 0).
        Only d/d(point) is computed: no parameter gradient is accumulated.
        """
        point, anchor, start_losses = start.detach(), None, None
        for _ in range(self.steps):
            point.requires_grad_(True)
            features, logits = forward(point)
            losses = self.loss(logits, labels)
            if anchor is None:
                anchor, start_losses = features.detach(), losses.detach()
            transport_cost = 0.5 * (features - anchor).pow(2).flatten(1).sum(dim=1)
            # The sum over the batch gives each example the gradient of its own objective.
            (gradient,) = torch.autograd.grad((losses - self.gamma * transport_cost).sum(), point)
            point = (point + self.eta * gradient).detach()
        return point, start_losses

    def step(self, model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor,
             labels: torch.Tensor, weigh: Weigh) -> torch.Tensor:
        if self.perturb == "feature":
            return self._feature_step(model, optimizer, images, labels, weigh)
        was_training = model.training
        model.eval()
        generated, start_losses = self.ascend(features_and_logits(model), images, labels)
        model.train(was_training)
        weights = None if start_losses is None else weigh(start_losses)
        generated_losses = self.loss(model(generated), labels)
        if start_losses is None:  # T = 0: the generated batch is the original batch
            weights = weigh(generated_losses.detach())
        descend(optimizer, generated_losses, weights)
        losses = self.loss(model(images), labels)
        descend(optimizer, losses, weights)
        return losses.detach()

    @torch.no_grad()
    def ascend_features(self, head: nn.Linear, start: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The same ascent on z through a linear head, with eq. 16's closed-form gradient:
        d l_LS / dz = sum_j p_j w_j - sum_j y_j w_j  (y: the eq. 3 targets), minus gamma (z - z')."""
        targets = smoothed_targets(labels, head.out_features, self.alpha)
        point = start.detach()
        for _ in range(self.steps):
            probabilities = torch.softmax(head(point), dim=1)
            gradient = (probabilities - targets) @ head.weight - self.gamma * (point - start)
            point = point + self.eta * gradient
        return point

    def _feature_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor,
                      labels: torch.Tensor, weigh: Weigh) -> torch.Tensor:
        features = model.features(images)  # one backbone pass serves both descent steps
        with torch.no_grad():
            weights = weigh(self.loss(model.head(features), labels))
        generated = self.ascend_features(model.head, features.detach(), labels)
        descend(optimizer, self.loss(model.head(generated), labels), weights)  # moves the head only
        # The backbone did not move, so `features` is still f(x) at the new parameters.
        losses = self.loss(model.head(features), labels)
        descend(optimizer, losses, weights)
        return losses.detach()


UPDATES = {"erm": ErmUpdate, "ls": LabelSmoothingUpdate, "gils": GilsUpdate}
