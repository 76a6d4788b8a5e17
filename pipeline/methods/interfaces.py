"""What each kind of part offers the trainer, and how a run builds it: the typed interfaces (Protocols).

A part's class needs no base class: it fits its family's interface. Torch is named for the type
checker only, so the torch-free declarations may name these types too.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch
    import torch.nn as nn

    from pipeline.data import Split
    from pipeline.methods.context import PartContext

Params = Mapping[str, Any]  # a method's resolved hyper-parameters, by name


class Loss(Protocol):
    """The per-example loss a method trains on, against integer labels (N,) or a mixer's soft targets (N, k)."""

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor: ...


class Sampler(Protocol):
    """Which training examples form each batch; shown each batch's fresh losses, it may return importance
    weights (and update its state), and it counts the distinct examples of its batches."""

    batches_per_epoch: int

    def epoch(self) -> Iterator[torch.Tensor]: ...

    def weigh(self, indices: torch.Tensor, losses: torch.Tensor) -> torch.Tensor | None: ...

    def mean_distinct_per_batch(self) -> float | None: ...


class Mixer(Protocol):
    """Rewrites a drawn batch and its targets: labels (N,) stay labels, or become mixed one-hot rows (N, k)."""

    def mix(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


class FeatureModel(Protocol):
    """What generators and updates reach of the run's model (training.models.Classifier): the feature map
    z = f(x) through `embed`, and the linear head z -> logits."""

    head: nn.Linear

    def embed(self, images: torch.Tensor) -> torch.Tensor: ...


class Generator(Protocol):
    """Makes the extra batch a step trains on first, with the model in eval mode and no parameter gradient;
    also returns the losses of the batch it started from when it computes them (else None)."""

    measures_start_losses: bool  # whether `generate` returns the start batch's losses (an attack does not)
    generates_features: bool  # whether it makes feature maps (through the head) instead of images

    def generate(self, model: nn.Module, images: torch.Tensor,
                 labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]: ...


class FeatureGenerator(Generator, Protocol):
    """A generator that can work on the feature map z through the linear head (generates_features)."""

    def ascend_features(self, head: nn.Linear, start: torch.Tensor, labels: torch.Tensor) -> torch.Tensor: ...


class Weights(Protocol):
    """Per-example loss weights; `train` is the split the sampler draws from (a part may keep some back)."""

    train: Split

    def weigh(self, images: torch.Tensor, targets: torch.Tensor, losses: torch.Tensor) -> torch.Tensor | None: ...


class Weigh(Protocol):
    """A step's weights for the per-example losses of its original batch (None: every example weighs 1)."""

    def __call__(self, losses: torch.Tensor) -> torch.Tensor | None: ...


class Update(Protocol):
    """How one batch moves the model; returns the detached per-example losses of the original batch."""

    def step(self, model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor,
             targets: torch.Tensor, weigh: Weigh) -> torch.Tensor: ...


# How a run builds each family's part from its declaration's constructor.

class LossFactory(Protocol):
    """Builds a loss part from the method's parameters."""

    def __call__(self, params: Params) -> Loss: ...


class SamplerFactory(Protocol):
    """Builds a sampler over `num_examples` training examples, drawing from the run's generator."""

    def __call__(self, num_examples: int, batch_size: int, params: Params, generator: torch.Generator,
                 initial_loss: float = 0.0) -> Sampler: ...


class MixerFactory(Protocol):
    """Builds a mixer from the method's parameters and the run's context."""

    def __call__(self, params: Params, context: PartContext) -> Mixer: ...


class GeneratorFactory(Protocol):
    """Builds a generator for the run's model."""

    def __call__(self, params: Params, context: PartContext, model: nn.Module) -> Generator: ...


class WeightsFactory(Protocol):
    """Builds a weights part from the training split and the run's model and optimiser."""

    def __call__(self, params: Params, context: PartContext, train: Split, model: nn.Module,
                 optimizer: torch.optim.Optimizer) -> Weights: ...
