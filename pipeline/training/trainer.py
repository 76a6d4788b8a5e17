"""The one training and evaluation loop that every method and every study trial shares."""
from __future__ import annotations

import functools
import importlib.util
import itertools
import math
import platform
import re
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from pipeline.config import RunSettings, TrainConfig, resolve_device, resolve_precision
from pipeline.data import Dataset, Split
from pipeline.errors import TrainingFailed
from pipeline.data.augment import Augment, make_augment
from pipeline.methods import parse_method
from pipeline.methods.context import PartContext
from pipeline.methods.declarations import MIXERS, SAMPLERS, WEIGHTS
from pipeline.methods.interfaces import Mixer, Sampler, Update, Weights
from pipeline.methods.updates import build_update
from pipeline.methods.weights import batch_weigh
from pipeline.params import training_defaults
from pipeline.training.metrics import evaluate, predict, split_metrics
from pipeline.training.result import EpochMetrics, RunResult
from pipeline.training.models import build_model, make_optimizer


@dataclass(frozen=True)
class EpochEnd:
    """Sent to the progress callback after each epoch."""

    epoch: int
    epochs: int
    train_loss: float
    val_accuracy: float | None  # None without a validation split
    seconds: float


@dataclass(frozen=True)
class BatchEnd:
    """Sent after each training batch, and each evaluation chunk of the validation and test splits (`stage`),
    with the run's epoch count so a progress bar knows it from the start (no values read back from the device,
    so it costs no sync)."""

    epoch: int
    batch: int
    batches: int
    epochs: int
    stage: str = "train"  # train | val | test


Progress = Callable[[EpochEnd | BatchEnd], None]
# Asked after every epoch but the last with the epochs so far: True ends the run there (early stopping).
StopEarly = Callable[[list["EpochMetrics"]], bool]


class TrainingDiverged(TrainingFailed):
    """Training blew up: a NaN, infinite or absurdly large loss, or a model collapsed onto one class."""


# A uniform prediction scores log(k); a model whose true-class logit sits g nats below the top one
# scores about g. A mean loss above 100 log(k) (230 nats for 10 classes) therefore means blown-up
# weights, not a slow or bumpy start. Measured on the digits at one epoch: healthy runs end at 2.2,
# lr_head = 1 spikes to 10 (and recovers to 0.5 in the next epoch), lr_head = 3 to 20 end at 30 to
# 180 with 37-44% accuracy, lr_head = 1e6 stays near 1e6 at chance.
DIVERGED_LOSS_FACTOR = 100.0
DIVERGED_EPOCHS = 3  # epochs in a row above the bound that stop a run early; the last epoch alone also does
# One predicted class for all validation examples is a collapse only with a loss at least twice a
# uniform guess's (confidently wrong, not undecided): hardness-weighted sampling at beta = 10 with
# momentum 0.9 passes through one-class epochs at 1.4 log(k) and is a poor run, not a failed one.
COLLAPSED_LOSS_FACTOR = 2.0


def check_diverged(epoch_losses: list[float], epochs: int, num_classes: int) -> None:
    """Raise TrainingDiverged when the loss is not finite, or stays above the bound (see above)."""
    loss, epoch = epoch_losses[-1], len(epoch_losses)
    if not math.isfinite(loss):
        raise TrainingDiverged(f"training loss is {loss} at epoch {epoch}; lower the learning rates")
    bound = DIVERGED_LOSS_FACTOR * math.log(num_classes)
    above = len(list(itertools.takewhile(lambda value: value > bound, reversed(epoch_losses))))  # epochs in a row
    if above >= DIVERGED_EPOCHS or (above and epoch == epochs):
        raise TrainingDiverged(f"training loss is {loss:.4g} at epoch {epoch}, above {bound:.3g} "
                               f"({DIVERGED_LOSS_FACTOR:g} x log {num_classes}, the loss of a uniform guess) "
                               f"for {above} epoch(s); lower the learning rates")


def check_collapsed(val_predictions: torch.Tensor, val_labels: torch.Tensor, final_loss: float,
                    class_names: list[str]) -> None:
    """Raise TrainingDiverged when every validation example (of several classes) gets one class and
    the last epoch's loss is above COLLAPSED_LOSS_FACTOR x log k (see above)."""
    predicted, present = val_predictions.unique(), val_labels.unique()
    bound = COLLAPSED_LOSS_FACTOR * math.log(len(class_names))
    if len(predicted) == 1 and len(present) > 1 and final_loss > bound:
        raise TrainingDiverged(f"the model predicts class {class_names[predicted.item()]} for every validation "
                               f"example and its training loss {final_loss:.3g} is above {bound:.3g} "
                               f"({COLLAPSED_LOSS_FACTOR:g} x log {len(class_names)}, the loss of a uniform guess); "
                               "training is unstable: lower the learning rates, momentum or beta")


@dataclass
class Run:
    """What one training run holds: the model, its optimiser and schedule, the method's parts."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    update: Update  # how a batch moves the model: one descent, or generate then two descents
    sampler: Sampler  # which examples form each batch, and their loss weights
    mixer: Mixer  # rewrites the drawn batch and its targets (the identity for most methods)
    weights: Weights  # per-example loss weights (every example weighs 1 for most methods)
    params: dict[str, Any]
    device: torch.device
    precision: str  # the backbone's arithmetic, resolved: fp32 or bf16
    augment: Augment  # applied to each training batch on the device (the identity unless configured)

    @property
    def train(self) -> Split:
        """What the sampler draws from: the training split, less l2rw's clean set."""
        return self.weights.train


def prepare(config: TrainConfig, dataset: Dataset) -> Run:
    """Validate the settings and build everything a run needs, seeded; bad settings are UserErrors."""
    method = parse_method(config.method)
    params = method.resolve({**training_defaults(config.weights), **config.params})
    device = resolve_device(config.device)
    torch.manual_seed(config.seed)
    generator = torch.Generator(device=device).manual_seed(config.seed)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    precision = resolve_precision(config.precision, device)
    model = build_model(config.backbone, config.weights, dataset.in_channels, dataset.num_classes).to(device)
    model.run_as(autocast=torch.bfloat16 if precision == "bf16" else None,
                 channels_last=device.type == "cuda" and config.backbone != "small_cnn")
    optimizer, scheduler = make_optimizer(model, params)
    context = PartContext(generator, dataset.num_classes, dataset.pixel_mean, dataset.pixel_std)
    weights = WEIGHTS.load(method.weights)(params, context, dataset.train, model, optimizer)
    # Stale losses start at log(k), the loss of a uniform prediction, so first weights are sensible.
    sampler = SAMPLERS.load(method.sampler)(len(weights.train), int(params["batch_size"]), params, generator,
                                            initial_loss=math.log(dataset.num_classes))
    return Run(model, optimizer, scheduler, build_update(method, params, context, model), sampler,
               MIXERS.load(method.mixer)(params, context), weights, params, device, precision,
               make_augment(config.data, generator))


def run_epoch(run: Run, split: Split, on_batch: Callable[[int], None] = lambda batch: None) -> float:
    """One pass of the sampler over `split`, the hot path; returns the mean training loss."""
    run.model.train()
    loss_sum, seen = torch.zeros((), device=run.device), 0
    for batch, indices in enumerate(run.sampler.epoch(), start=1):
        images, targets = run.mixer.mix(run.augment(split.inputs(indices)), split.labels[indices])
        losses = run.update.step(run.model, run.optimizer, images, targets,
                                 batch_weigh(run.sampler, run.weights, indices, images, targets))
        loss_sum += losses.sum()
        seen += len(indices)
        on_batch(batch)
    return loss_sum.item() / seen


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Run the block with torch computing on `threads` CPU threads, then give the caller back its own count."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@functools.cache
def library_versions() -> dict[str, str]:
    """The versions a run's numbers depend on, stored with its settings: python, torch, torchvision, this tool."""
    try:
        tool = version("robust-tune")
    except PackageNotFoundError:  # a source tree that was never installed
        tool = "unknown"
    # Plain strings (torch's version is a str subclass), so that a model saved with them loads with weights_only.
    return {"python": platform.python_version(), "torch": str(torch.__version__),
            "torchvision": torchvision_version(), "robust-tune": tool}


def torchvision_version() -> str:
    """torchvision.__version__ (with its build's label, as "0.29.1+cu130"), read from its version.py without importing
    torchvision: the import takes about a second (pipeline/training/models.py), and a small network needs none."""
    if "torchvision" in sys.modules:
        return str(sys.modules["torchvision"].__version__)
    spec = importlib.util.find_spec("torchvision")  # the package's own spec: found, not imported
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    file = Path(folders[0]) / "version.py" if folders else None
    text = file.read_text() if file is not None and file.exists() else ""
    found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    if found is None:  # a torchvision laid out otherwise: ask it
        import torchvision

        return str(torchvision.__version__)
    return found.group(1)


def train(config: TrainConfig, dataset: Dataset, progress: Progress | None = None,
          stop: StopEarly | None = None) -> RunResult:
    """Train `config.method` on `dataset` (already on the device) and evaluate on val and test.

    Deterministic on CPU for a given seed and thread count (`config.threads`, set for the run and restored
    after it, so the same run gives the same numbers in any process). Bad settings raise UserError before any work.
    `stop`, asked after each epoch but the last, may end the run early; its result is then that epoch's.
    """
    with torch_threads(config.threads):
        return _train(config, dataset, progress, stop)


def _train(config: TrainConfig, dataset: Dataset, progress: Progress | None, stop: StopEarly | None) -> RunResult:
    """`train` at the thread count already set."""
    run = prepare(config, dataset)
    report = progress or (lambda event: None)
    epochs = run.params["epochs"]
    epoch_losses: list[float] = []
    epoch_metrics: list[EpochMetrics] = []
    stopped_at = None
    start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        epoch_start = time.perf_counter()
        loss = run_epoch(run, run.train,
                         lambda batch: report(BatchEnd(epoch, batch, run.sampler.batches_per_epoch, epochs)))
        epoch_losses.append(loss)
        check_diverged(epoch_losses, epochs, dataset.num_classes)
        run.scheduler.step()
        val_predictions = predict(run.model, dataset.val,
                                  lambda chunk, chunks: report(BatchEnd(epoch, chunk, chunks, epochs, "val")))
        val_metrics = split_metrics(val_predictions, dataset.val.labels, dataset.class_names)
        test_metrics = evaluate(run.model, dataset.test, dataset.class_names,
                                lambda chunk, chunks: report(BatchEnd(epoch, chunk, chunks, epochs, "test")))
        epoch_metrics.append(EpochMetrics(epoch, loss, val_metrics, test_metrics))
        report(EpochEnd(epoch, epochs, loss, val_metrics.accuracy, time.perf_counter() - epoch_start))
        if epoch < epochs and stop is not None and stop(epoch_metrics):
            stopped_at = epoch
            break
    if run.device.type == "cuda":
        torch.cuda.synchronize()
    train_seconds = time.perf_counter() - start
    check_collapsed(val_predictions, dataset.val.labels, epoch_losses[-1], dataset.class_names)

    settings = RunSettings(config.data, config.backbone, config.weights, parse_method(config.method).name, run.params,
                           config.seed, str(run.device), run.precision, config.threads, dict(library_versions()))
    return RunResult(
        val=val_metrics, test=epoch_metrics[-1].test, epochs=tuple(epoch_metrics),
        train_seconds=train_seconds, seed=config.seed, settings=settings, model=run.model,
        distinct_per_batch=run.sampler.mean_distinct_per_batch(), stopped_at=stopped_at)
