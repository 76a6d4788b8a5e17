"""Weights parts put a weight on each example's loss in a step: class-balanced weights, Group DRO over
the classes and Learning to Reweight. Any weights part composes with any update, mixer or generator.

`weigh(images, targets, losses) -> weights (N,) or None` is called once per step (through `batch_weigh`)
with the batch the step trains on and the per-example losses of the original batch at the current
parameters; the step minimises (1/b) sum_i w_i loss_i. The hardness sampler's importance weights stay
with the sampler (they need its stale losses) and multiply these.

On mixed examples (Mixup, CutMix) the targets are mixed one-hot vectors t_i, and an example counts for
each class c in proportion to t_ic: its class-balanced weight is sum_c t_ic w_c (the two examples'
weights mixed with the mixing coefficient) and it adds t_ic of its loss to group c's mean loss. Learning
to Reweight weighs the mixed example itself, by its own look-ahead gradient.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import forward_ad
from torch.func import functional_call

from pipeline.data import Split
from pipeline.methods.context import PartContext
from pipeline.methods.interfaces import Params, Sampler, Weigh, Weights
from pipeline.methods.losses import method_loss


def class_membership(targets: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(N, k): one-hot rows for integer labels, the mixed one-hot rows a mixer made as they are."""
    if targets.is_floating_point():
        return targets.float()
    return F.one_hot(targets, num_classes).float()


class NoWeights:
    """Every example weighs 1: the weights of a method that names none, and the base of the weights parts
    here (`train` is the split the sampler draws from)."""

    def __init__(self, params: Params, context: PartContext, train: Split, model: nn.Module,
                 optimizer: torch.optim.Optimizer) -> None:
        self.train = train

    def weigh(self, images: torch.Tensor, targets: torch.Tensor, losses: torch.Tensor) -> torch.Tensor | None:
        return None


def class_balanced_weights(class_counts: torch.Tensor, power: float) -> torch.Tensor:
    """w_c proportional to frequency_c^-power, scaled to mean 1 over the training set
    (sum_c n_c w_c = N); a class with no training example gets 0."""
    counts = class_counts.double()
    raw = torch.where(counts > 0, counts.clamp(min=1) ** -power, torch.zeros_like(counts))
    return (raw * counts.sum() / (counts * raw).sum()).float()


class ClassBalanced(NoWeights):
    """Each example weighted by the inverse of its class's training frequency (to the power cb_power)."""

    def __init__(self, params: Params, context: PartContext, train: Split, model: nn.Module,
                 optimizer: torch.optim.Optimizer) -> None:
        super().__init__(params, context, train, model, optimizer)
        counts = torch.bincount(train.labels, minlength=context.num_classes)
        self.class_weights = class_balanced_weights(counts, params["cb_power"])

    def weigh(self, images: torch.Tensor, targets: torch.Tensor, losses: torch.Tensor) -> torch.Tensor | None:
        return class_membership(targets, len(self.class_weights)) @ self.class_weights


class GroupDro(NoWeights):
    """Group DRO with the classes as groups (Sagawa et al. 2020, as DomainBed's GroupDRO): each step
    q_g <- q_g exp(eta * group g's mean loss in the batch), q renormalised (a group absent from the batch gets
    no factor, so its renormalised share shrinks), then the step minimises sum_g q_g (group g's mean loss)."""

    def __init__(self, params: Params, context: PartContext, train: Split, model: nn.Module,
                 optimizer: torch.optim.Optimizer) -> None:
        super().__init__(params, context, train, model, optimizer)
        self.eta, self.num_classes = params["groupdro_eta"], context.num_classes
        # log q, so that q = softmax(log q) is the multiplicative update renormalised without overflow
        self.log_q = torch.zeros(context.num_classes, device=context.generator.device)

    @property
    def q(self) -> torch.Tensor:
        return torch.softmax(self.log_q, dim=0)

    def weigh(self, images: torch.Tensor, targets: torch.Tensor, losses: torch.Tensor) -> torch.Tensor | None:
        membership = class_membership(targets, self.num_classes)  # (N, k)
        mass = membership.sum(dim=0)
        present = mass > 0
        group_loss = (membership * losses.detach().float()[:, None]).sum(dim=0) / mass.clamp(min=1e-12)
        self.log_q = self.log_q + self.eta * torch.where(present, group_loss, torch.zeros_like(group_loss))
        # sum_g q_g group_loss_g = (1/b) sum_i w_i loss_i  with  w_i = b sum_g q_g t_ig / mass_g
        per_unit = torch.where(present, self.q / mass.clamp(min=1e-12), torch.zeros_like(mass))
        return len(losses) * (membership @ per_unit)


def carve_clean_set(train: Split, per_class: int, num_classes: int,
                    generator: torch.Generator) -> tuple[Split, Split]:
    """(the training split without the clean set, the clean set): per class, min(per_class, half the
    class) random examples, at least one; drawn from the training split only."""
    chosen = []
    for c in range(num_classes):
        members = (train.labels == c).nonzero().flatten()
        if len(members):
            take = max(1, min(per_class, len(members) // 2))
            order = torch.randperm(len(members), generator=generator, device=generator.device)
            chosen.append(members[order[:take].to(members.device)])
    clean = torch.cat(chosen).sort().values
    keep = torch.ones(len(train), dtype=torch.bool, device=train.labels.device)
    keep[clean] = False
    return train.subset(keep), train.subset(clean)


def l2rw_weights(model: nn.Module, images: torch.Tensor, targets: torch.Tensor, clean: Split,
                 learning_rates: dict[str, float], alpha: float) -> torch.Tensor:
    """Ren et al. 2018, Algorithm 1, lines 4-11: the per-example weights (summing to 1, or all 0) from a
    one-step look-ahead with weights epsilon = 0 on a copy of the parameters:
    w = max(-d loss_clean(theta - lr * grad_theta sum_i eps_i loss_i) / d eps, 0), normalised.
    `learning_rates` names the parameters the step moves and their learning rates (the optimiser's).

    At epsilon = 0 the look-ahead leaves theta where it is, so -d loss_clean / d eps_i is the derivative of
    loss_i along v = lr * grad loss_clean(theta): a clean forward and backward give v, and one forward-mode
    pass of the batch gives every example's derivative along it (Ren et al.'s three passes), where backpropagating
    through the look-ahead's backward pass cost about twice as much."""
    params: dict[str, torch.Tensor] = {name: p for name, p in model.named_parameters()
                                       if name in learning_rates and p.requires_grad}

    def buffers() -> dict[str, torch.Tensor]:
        return {name: b.clone() for name, b in model.named_buffers()}  # BatchNorm's statistics stay untouched

    clean_loss = method_loss(functional_call(model, (params, buffers()), (clean.inputs(),)), clean.labels,
                             alpha).mean()
    gradients = torch.autograd.grad(clean_loss, list(params.values()), allow_unused=True)
    with forward_ad.dual_level():
        along = {name: forward_ad.make_dual(p.detach(), torch.zeros_like(p) if g is None else learning_rates[name] * g)
                 for (name, p), g in zip(params.items(), gradients)}
        losses = method_loss(functional_call(model, (along, buffers()), (images,)), targets, alpha)
        derivative = forward_ad.unpack_dual(losses).tangent  # None when no parameter moves
    raw = torch.zeros_like(losses) if derivative is None else derivative.clamp(min=0)
    total = raw.sum()
    return raw / torch.where(total > 0, total, torch.ones_like(total))  # no sync: all zero stays zero


class LearningToReweight(NoWeights):
    """Learning to Reweight (Ren et al. 2018): per step, the weights of `l2rw_weights` against a batch of
    the clean set (the whole set when it is no larger than the batch), carved out of the training split
    so that validation and test stay untouched; the real step then trains on the weighted loss."""

    def __init__(self, params: Params, context: PartContext, train: Split, model: nn.Module,
                 optimizer: torch.optim.Optimizer) -> None:
        self.generator, self.model, self.optimizer = context.generator, model, optimizer
        self.alpha = params.get("alpha", 0.0)
        self.train, self.clean = carve_clean_set(train, params["l2rw_clean_per_class"], context.num_classes,
                                                 context.generator)

    def clean_batch(self, size: int) -> Split:
        if len(self.clean) <= size:
            return self.clean
        drawn = torch.randperm(len(self.clean), generator=self.generator, device=self.generator.device)[:size]
        drawn = drawn.to(self.clean.labels.device)
        return self.clean.subset(drawn)

    def weigh(self, images: torch.Tensor, targets: torch.Tensor, losses: torch.Tensor) -> torch.Tensor | None:
        by_parameter = {id(p): group["lr"] for group in self.optimizer.param_groups for p in group["params"]}
        learning_rates = {name: by_parameter[id(p)] for name, p in self.model.named_parameters()
                          if id(p) in by_parameter}
        with torch.enable_grad():  # a feature-space GI-LS step asks for weights under no_grad
            weights = l2rw_weights(self.model, images.detach(), targets, self.clean_batch(len(images)),
                                   learning_rates, self.alpha)
        return len(losses) * weights  # (1/b) sum_i (b w_i) loss_i is Algorithm 1's sum_i w_i loss_i


def batch_weigh(sampler: Sampler, weights: Weights, indices: torch.Tensor, images: torch.Tensor,
                targets: torch.Tensor) -> Weigh:
    """The step's `weigh`: the sampler's weights (it also refreshes its stale losses) times the weights part's."""

    def weigh(losses: torch.Tensor) -> torch.Tensor | None:
        drawn, own = sampler.weigh(indices, losses), weights.weigh(images, targets, losses)
        if drawn is None or own is None:
            return own if drawn is None else drawn
        return drawn * own

    return weigh
