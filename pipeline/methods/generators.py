"""Generators make the extra batch a step trains on before the original (Algorithm 1's two descents):
the GI-LS ascent and the adversarial attacks of the GI-LS paper's Tables 6 and 7 (attacks.py).

`generate(model, images, labels) -> (generated, losses at the start or None)` runs with the model in
eval mode (BatchNorm statistics untouched, per-example ascents independent) and accumulates no
parameter gradient. Generators chain: in gils+pgd, PGD attacks the GI-LS batch. The attacks are one
class, `Attack`, given the attack's name in attacks.ATTACKS by their declarations.
"""
from __future__ import annotations

from typing import Callable, Mapping, cast

import torch
import torch.nn as nn

from pipeline.methods.attacks import ATTACKS
from pipeline.methods.context import PartContext, global_rng_from
from pipeline.methods.interfaces import FeatureModel, Params
from pipeline.methods.losses import smoothed_cross_entropy, smoothed_targets

Forward = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def features_and_logits(model: nn.Module) -> Forward:
    """x -> (z, logits) in one backbone pass: what the input-space ascent differentiates."""
    classifier = cast(FeatureModel, model)  # a run's model is a training.models.Classifier

    def forward(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = classifier.embed(images)
        return features, classifier.head(features)

    return forward


class GilsAscent:
    """GI-LS's generation (the GI-LS paper's Algorithm 1), batched over the mini-batch: T ascent steps
    of size eta on  l_LS(x^t) - gamma * 1/2 ||f(x^t) - f(x)||^2,  on the image (perturb = "input") or
    on the feature map z = f(x) through the linear head (perturb = "feature", eq. 16 in closed form)."""

    def __init__(self, params: Params, context: PartContext | None = None, model: nn.Module | None = None) -> None:
        self.alpha, self.steps, self.eta, self.gamma = params["alpha"], params["T"], params["eta"], params["gamma"]
        self.generates_features = params["perturb"] == "feature"
        self.measures_start_losses = self.steps > 0  # the ascent's first forward pass gives them; T = 0 has none

    def generate(self, model: nn.Module, images: torch.Tensor,
                 labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.ascend(features_and_logits(model), images, labels)

    def ascend(self, forward: Forward, start: torch.Tensor,
               labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """T batched ascent steps from `start`; `forward` maps a point to (features, logits).

        Returns the generated points and the per-example losses at the start (None when T = 0).
        Only d/d(point) is computed: no parameter gradient is accumulated.
        """
        point, anchor, start_losses = start.detach(), None, None
        for _ in range(self.steps):
            point.requires_grad_(True)
            features, logits = forward(point)
            losses = smoothed_cross_entropy(logits, labels, self.alpha)
            if anchor is None:
                anchor, start_losses = features.detach(), losses.detach()
            transport_cost = 0.5 * (features - anchor).pow(2).flatten(1).sum(dim=1)
            # The sum over the batch gives each example the gradient of its own objective.
            (gradient,) = torch.autograd.grad((losses - self.gamma * transport_cost).sum(), point)
            point = (point + self.eta * gradient).detach()
        return point, start_losses

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


class Attack:
    """An attack of attacks.py as a generator: `ATTACKS[attack](logits, pixels, labels, **keywords)`, each keyword
    argument set from the method's parameter that `arguments` names for it (its declaration gives both). It takes
    and returns normalised images and perturbs in [0, 1] pixel space between (clipping there), with the model in
    eval mode; its random draws come from the run's generator."""

    measures_start_losses = False
    generates_features = False

    def __init__(self, params: Params, context: PartContext, model: nn.Module, *, attack: str,
                 arguments: Mapping[str, str]) -> None:
        self.attack = ATTACKS[attack]
        self.keywords = {keyword: params[name] for keyword, name in arguments.items()}
        channels = len(context.pixel_mean)
        self.mean = torch.tensor(context.pixel_mean).reshape(1, channels, 1, 1)
        self.std = torch.tensor(context.pixel_std).reshape(1, channels, 1, 1)
        self.context = context

    def generate(self, model: nn.Module, images: torch.Tensor,
                 labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        mean, std = self.mean.to(images.device), self.std.to(images.device)
        training = model.training
        model.eval()
        with global_rng_from(self.context.generator):
            pixels = self.attack(lambda x: model((x - mean) / std), images.detach() * std + mean, labels,
                                 **self.keywords)
        model.train(training)
        return (pixels - mean) / std, None
