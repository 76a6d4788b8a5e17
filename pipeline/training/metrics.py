"""Accuracy as an honest report needs it: mean, per class, worst class and balanced."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from pipeline.data import Split
from pipeline.training.result import SplitMetrics

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
