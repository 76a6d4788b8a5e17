"""Label smoothing exactly as the GI-LS paper's eq. 3, and the per-example losses built on it: the loss
parts erm (alpha = 0) and ls."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from pipeline.methods.interfaces import Params


def smoothed_targets(labels: torch.Tensor, num_classes: int, alpha: float) -> torch.Tensor:
    """Eq. 3: the true class gets 1 - alpha, every other class alpha / (k - 1).

    Not PyTorch's `label_smoothing`, which gives the true class 1 - alpha + alpha / k.
    """
    targets = torch.full((labels.shape[0], num_classes), alpha / (num_classes - 1), device=labels.device)
    return targets.scatter_(1, labels[:, None], 1.0 - alpha)


def smoothed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, alpha: float) -> torch.Tensor:
    """Per-example cross-entropy against the eq. 3 targets (plain cross-entropy when alpha = 0)."""
    if alpha == 0:
        return F.cross_entropy(logits, labels, reduction="none")
    targets = smoothed_targets(labels, logits.shape[1], alpha).to(logits.dtype)
    return -(targets * F.log_softmax(logits, dim=1)).sum(dim=1)


def weighted_mean(losses: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """(1/b) sum_i w_i loss_i, the hardness paper's Algorithm 1 line 12; the plain mean without weights."""
    return losses.mean() if weights is None else (weights * losses).mean()


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, alpha: float) -> torch.Tensor:
    """Per-example cross-entropy against mixed one-hot `targets` (N, k), smoothed as eq. 3.

    Eq. 3 is affine in the one-hot vector (y -> alpha / (k - 1) + (1 - alpha - alpha / (k - 1)) y), so
    smoothing a mix of one-hot targets equals mixing their smoothed targets.
    """
    k = logits.shape[1]
    smoothed = alpha / (k - 1) + (1 - alpha - alpha / (k - 1)) * targets.to(logits.dtype)
    return -(smoothed * F.log_softmax(logits, dim=1)).sum(dim=1)


def method_loss(logits: torch.Tensor, targets: torch.Tensor, alpha: float) -> torch.Tensor:
    """The loss every method trains on: integer labels (N,) or a mixer's soft targets (N, k)."""
    if targets.is_floating_point():
        return soft_cross_entropy(logits, targets, alpha)
    return smoothed_cross_entropy(logits, labels=targets, alpha=alpha)


class SmoothedLoss:
    """The loss part of erm and ls: cross-entropy on eq. 3 targets, per example (alpha = 0, erm's, is plain
    cross-entropy)."""

    def __init__(self, params: Params) -> None:
        self.alpha = params.get("alpha", 0.0)

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return method_loss(logits, targets, self.alpha)
