"""Accuracy as an honest report needs it: mean, per class, worst class and balanced."""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn

from pipeline.data import Split
from pipeline.training.result import RunResult, SplitMetrics

EVAL_BATCH_SIZE = 256


@torch.no_grad()
def predict(model: nn.Module, split: Split, on_chunk: Callable[[int, int], None] | None = None) -> torch.Tensor:
    """Predicted labels of a split's examples in eval mode, in chunks; `on_chunk(done, chunks)` after each
    (an evaluation of a large split takes a while)."""
    was_training = model.training
    model.eval()
    chunks = max(1, -(-len(split.labels) // EVAL_BATCH_SIZE))
    predictions = []
    for done, chunk in enumerate(split.chunks(EVAL_BATCH_SIZE), start=1):
        predictions.append(model(chunk).argmax(dim=1))
        if on_chunk is not None:
            on_chunk(done, chunks)
    model.train(was_training)
    return torch.cat(predictions)  # an empty split is one empty chunk


def split_metrics(predictions: torch.Tensor, labels: torch.Tensor, class_names: list[str]) -> SplitMetrics:
    """Accuracy, per-class accuracy (recall), its mean (balanced accuracy) and its minimum."""
    k = len(class_names)
    correct = torch.bincount(labels[predictions == labels], minlength=k).cpu()
    total = torch.bincount(labels, minlength=k).cpu()
    per_class = {name: correct[i].item() / total[i].item() for i, name in enumerate(class_names) if total[i] > 0}
    if not per_class:
        return SplitMetrics(None, None, None, {}, 0)
    return SplitMetrics(
        accuracy=correct.sum().item() / total.sum().item(),
        balanced_accuracy=sum(per_class.values()) / len(per_class),
        worst_class_accuracy=min(per_class.values()),
        per_class_accuracy=per_class,
        examples=int(total.sum().item()),
    )


def evaluate(model: nn.Module, split: Split, class_names: list[str],
             on_chunk: Callable[[int, int], None] | None = None) -> SplitMetrics:
    """A split's metrics from the model's predictions."""
    return split_metrics(predict(model, split, on_chunk), split.labels, class_names)


# A run whose balanced accuracy (chance: 1 / classes, whatever the class shares) is within this many points of
# chance has learned next to nothing: `train` says so, and what to try.
NEAR_CHANCE_POINTS = 10.0
WEIGHING = ("cb", "groupdro", "hws")  # the parts that weigh a rare class up, offered for classes never right
BARELY_LEARNED = 0.8  # a last training loss above this share of log k (a uniform guess's) has barely fallen
ABOVE_UNIFORM = 2.0  # ... and above this many times it, training blew up rather than stalled


def poor_run_warnings(result: RunResult) -> list[str]:
    """Lines warning that a run ended near chance or with classes it never got right, each saying what to try; none
    for a run that learned. Balanced accuracy is compared with chance, so a rare class cannot hide it."""
    classes = len(result.test.per_class_accuracy)
    if classes < 2:
        return []
    chance = 100 / classes
    splits = (("validation", result.val), ("test", result.test))
    near = [f"{name} {100 * m.balanced_accuracy:.1f}%" for name, m in splits
            if m.balanced_accuracy is not None and 100 * m.balanced_accuracy <= chance + NEAR_CHANCE_POINTS]
    never = [name for name, accuracy in result.test.per_class_accuracy.items() if accuracy == 0]
    lines = []
    if near:
        lines.append(f"warning: balanced accuracy near chance ({' and '.join(near)}; chance is {chance:.1f}%)")
    if never:
        shown = ", ".join(never[:5]) + (f" and {len(never) - 5} more" if len(never) > 5 else "")
        lines.append(f"warning: {len(never)} of {classes} classes got no test example right ({shown})")
    if lines:
        lines.append(_what_to_try(result, classes))
    return lines


def _what_to_try(result: RunResult, classes: int) -> str:
    """What to change after a poor run, read off its training loss: barely fallen (too few epochs, rates too low),
    or fallen while evaluation stayed poor (rates too high for BatchNorm's running statistics to follow)."""
    params, uniform = result.settings.params, math.log(classes)
    losses = [epoch.train_loss for epoch in result.epochs]
    epochs = params.get("epochs", len(losses))
    if losses and losses[-1] > ABOVE_UNIFORM * uniform:
        return (f"  its training loss ended at {losses[-1]:.2f}, far above a uniform guess's {uniform:.2f}: training "
                "is unstable; try lower learning rates (or, for hws, a lower beta)")
    if not losses or losses[-1] > BARELY_LEARNED * uniform:
        rates = (f"-p lr_backbone={params['lr_head']:g} (the head's rate)"
                 if params.get("lr_backbone", 0) < params.get("lr_head", 0) else "higher learning rates")
        return (f"  its training loss ended at {losses[-1] if losses else math.nan:.2f}, near a uniform guess's "
                f"{uniform:.2f}: it has barely learned; try more epochs (-p epochs={max(2 * epochs, 30)}) or "
                f"{rates}")
    others = [name for name in WEIGHING if name not in result.settings.method.split("+")]  # not what it uses
    which = "a method" if len(others) == len(WEIGHING) else "another method"
    weigh = (f"; for classes never right on imbalanced data, {which} that weighs them ({', '.join(others)})"
             if others else "")
    return (f"  its training loss fell to {losses[-1]:.2f}, so it fits its training batches but not in evaluation: "
            "with the learning rates still high, BatchNorm's running statistics lag behind the weights; try lower "
            f"learning rates or a decay within the run (-p lr_step={max(1, epochs // 2)}){weigh}")
