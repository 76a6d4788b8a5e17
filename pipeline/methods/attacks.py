"""The adversarial attacks of the GI-LS paper's Tables 6 and 7, in [0, 1] pixel space: FGSM, PGD (L-inf and L2)
and Carlini-Wagner L2, untargeted.

Each follows torchattacks 3.5.1 (Kim 2020) operation for operation, so that a run gives the numbers it gave when
these attacks came from that package (tests/methods/test_attacks.py checks the two equal where it is installed):
the same random start drawn from torch's global RNG, the same clipping, CW's same early stop. The package itself
pins a `requests` with published advisories, so it is no dependency. `logits` maps a pixel batch to the model's
logits (normalising on the way); every attack returns a detached pixel batch.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

Logits = Callable[[torch.Tensor], torch.Tensor]


def _input_gradient(logits: Logits, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """d(mean cross-entropy)/d(images) at `images`, which become a leaf that requires it."""
    images.requires_grad = True
    (gradient,) = torch.autograd.grad(F.cross_entropy(logits(images), labels), images)
    return gradient


def fgsm(logits: Logits, images: torch.Tensor, labels: torch.Tensor, *, eps: float) -> torch.Tensor:
    """FGSM (Goodfellow et al. 2014): one step of eps * sign(gradient), clipped to [0, 1]."""
    images = images.clone().detach()
    gradient = _input_gradient(logits, images, labels)
    return torch.clamp(images + eps * gradient.sign(), min=0, max=1).detach()


def pgd(logits: Logits, images: torch.Tensor, labels: torch.Tensor, *, eps: float, step: float,
        steps: int) -> torch.Tensor:
    """PGD in the L-inf ball (Madry et al. 2018): a uniform random start in the ball, then `steps` signed
    gradient steps, each projected back onto the ball and [0, 1]."""
    images = images.clone().detach()
    adversarial = images + torch.empty_like(images).uniform_(-eps, eps)
    adversarial = torch.clamp(adversarial, min=0, max=1).detach()
    for _ in range(steps):
        gradient = _input_gradient(logits, adversarial, labels)
        adversarial = adversarial.detach() + step * gradient.sign()
        delta = torch.clamp(adversarial - images, min=-eps, max=eps)
        adversarial = torch.clamp(images + delta, min=0, max=1).detach()
    return adversarial


def pgd_l2(logits: Logits, images: torch.Tensor, labels: torch.Tensor, *, eps: float, step: float,
           steps: int) -> torch.Tensor:
    """PGD in the L2 ball (Madry et al. 2018): a random start in the ball (a Gaussian direction at a uniform
    fraction of eps), then `steps` steps along the normalised gradient, each scaled back into the ball and
    clipped to [0, 1]."""
    images = images.clone().detach()
    size = len(images)
    delta = torch.empty_like(images).normal_()
    norms = delta.view(size, -1).norm(p=2, dim=1).view(size, 1, 1, 1)
    delta *= torch.zeros_like(norms).uniform_(0, 1) / norms * eps
    adversarial = torch.clamp(images + delta, min=0, max=1).detach()
    for _ in range(steps):
        gradient = _input_gradient(logits, adversarial, labels)
        gradient = gradient / (torch.norm(gradient.view(size, -1), p=2, dim=1) + 1e-10).view(size, 1, 1, 1)
        adversarial = adversarial.detach() + step * gradient
        delta = adversarial - images
        norms = torch.norm(delta.view(size, -1), p=2, dim=1)
        factor = torch.min(eps / norms, torch.ones_like(norms))
        adversarial = torch.clamp(images + delta * factor.view(-1, 1, 1, 1), min=0, max=1).detach()
    return adversarial


def carlini_wagner(logits: Logits, images: torch.Tensor, labels: torch.Tensor, *, c: float, steps: int,
                   lr: float) -> torch.Tensor:
    """Carlini and Wagner's L2 attack (2017) with kappa = 0 and no search over c: Adam on w, the image being
    (tanh(w) + 1) / 2, minimising ||image - x||^2 + c * max(Z_y - max_{i != y} Z_i, 0). Each example keeps
    the closest misclassified image found (the original where none was); the loop stops early when the
    cost, looked at every steps // 10 steps, went up."""
    images = images.clone().detach()
    centred = torch.clamp(images * 2 - 1, min=-1, max=1)
    w = (0.5 * torch.log((1 + centred) / (1 - centred))).detach()  # atanh: the original image's w
    w.requires_grad = True
    best = images.clone().detach()
    best_l2 = 1e10 * torch.ones(len(images), device=images.device)
    previous_cost = 1e10
    optimizer = torch.optim.Adam([w], lr=lr)
    for done in range(steps):
        adversarial = 1 / 2 * (torch.tanh(w) + 1)
        l2 = F.mse_loss(adversarial.flatten(1), images.flatten(1), reduction="none").sum(dim=1)
        outputs = logits(adversarial)
        one_hot = torch.eye(outputs.shape[1], device=images.device)[labels]
        other = torch.max((1 - one_hot) * outputs, dim=1)[0]  # the largest logit of another class
        real = torch.max(one_hot * outputs, dim=1)[0]
        cost = l2.sum() + c * torch.clamp(real - other, min=0).sum()
        optimizer.zero_grad()
        cost.backward()
        optimizer.step()
        wrong = (torch.argmax(outputs.detach(), 1) != labels).float()
        closer = wrong * (best_l2 > l2.detach())
        best_l2 = closer * l2.detach() + (1 - closer) * best_l2
        closer = closer.view([-1] + [1] * (images.dim() - 1))
        best = closer * adversarial.detach() + (1 - closer) * best
        if done % max(steps // 10, 1) == 0:
            if cost.item() > previous_cost:
                return best
            previous_cost = cost.item()
    return best


ATTACKS: dict[str, Callable[..., torch.Tensor]] = {"fgsm": fgsm, "pgd": pgd, "pgdl2": pgd_l2, "cw": carlini_wagner}
