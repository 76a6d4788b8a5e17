"""Rich renderings shared by the commands: metric tables and progress bars."""
from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from pipeline.report import percent

if TYPE_CHECKING:
    from pipeline.trainer import TrainResult

stderr = Console(stderr=True)


def result_title(result: "TrainResult") -> str:
    """What ran, where and how long: the line above the result table."""
    settings = result.settings
    return (f"{settings['method']} on {settings['data']['name']} with {settings['backbone']} (seed {result.seed}, "
            f"{result.train_seconds:.1f} s on {settings['device']}, {settings.get('precision', 'fp32')})")


def result_table(result: "TrainResult") -> Table:
    """Accuracy per split, then per class, so a gain in the mean cannot hide a lost class."""
    table = Table()
    table.add_column("top-1 accuracy (%)")
    table.add_column("validation", justify="right")
    table.add_column("test", justify="right")
    for label, key in (("mean", "accuracy"), ("balanced", "balanced_accuracy"),
                       ("worst class", "worst_class_accuracy")):
        table.add_row(label, percent(getattr(result.val, key)), percent(getattr(result.test, key)))
    table.add_section()
    for name, test_accuracy in result.test.per_class_accuracy.items():
        table.add_row(f"class {name}", percent(result.val.per_class_accuracy.get(name)), percent(test_accuracy))
    return table


def params_line(result: "TrainResult") -> str:
    return "parameters: " + ", ".join(f"{k}={v}" for k, v in result.settings["params"].items())


def batches_line(result: "TrainResult") -> str:
    """How many different examples a training batch held on average: fewer than the batch size means the
    sampler drew examples twice (hardness-weighted sampling at a large beta)."""
    return (f"distinct examples per batch: {result.distinct_per_batch:.1f} on average "
            f"(batch size {result.settings['params']['batch_size']})")


@contextmanager
def training_progress(description: str) -> Iterator:
    """A progress bar over epochs and batches on stderr; yields the callback for the trainer."""
    from pipeline.trainer import BatchEnd

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[status]}"), TimeRemainingColumn())
    with Progress(*columns, console=stderr, transient=True) as bar:
        epochs = bar.add_task(description, total=None, status="")
        batches = bar.add_task("  batches", total=None, status="")

        def on_event(event: Any) -> None:  # the trainer's EpochEnd or BatchEnd
            if isinstance(event, BatchEnd):
                bar.update(batches, total=event.batches, completed=event.batch)
            else:
                bar.update(epochs, total=event.epochs, completed=event.epoch,
                           status=f"loss {event.train_loss:.3f}  val acc {percent(event.val_accuracy)}%")

        yield on_event
