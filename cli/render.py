"""Rich renderings shared by the commands: metric tables and progress bars."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from pipeline.formats import render_text
from pipeline.output_file import write_output
from pipeline.tables import FLEXIBLE, Table as ReportTable, fold_constant_columns, percent

if TYPE_CHECKING:
    from pipeline.trainer import TrainResult

stdout = Console()
stderr = Console(stderr=True)


def result_title(result: "TrainResult") -> str:
    """What ran, where and how long: the line above the result table."""
    settings = result.settings
    threads = f"{settings.threads} thread{'s' if settings.threads != 1 else ''}, "
    return (f"{settings.method} on {settings.data.name} with {settings.backbone} (seed {result.seed}, {threads}"
            f"{result.train_seconds:.1f} s on {settings.device}, {settings.precision})")


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
    return "parameters: " + ", ".join(f"{k}={v}" for k, v in result.settings.params.items())


def batches_line(result: "TrainResult") -> str:
    """How many different examples a training batch held on average: fewer than the batch size means the
    sampler drew examples twice (hardness-weighted sampling at a large beta)."""
    return (f"distinct examples per batch: {result.distinct_per_batch:.1f} on average "
            f"(batch size {result.settings.params['batch_size']})")


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


def print_upgrade(message: str | None) -> None:
    """The one line saying a database written by an earlier version was upgraded, on stderr."""
    if message:
        stderr.print(message, soft_wrap=True, markup=False, highlight=False)


def grid(t: ReportTable, columns: list[int], flexible_width: int | None = None) -> Table:
    """The table as a narrow Rich grid of the given columns; a FLEXIBLE column gets `flexible_width`
    (errors are cut there, parameter lists wrapped)."""
    grid = Table(title=t.title, title_justify="left", box=box.SIMPLE_HEAD, collapse_padding=True,
                 pad_edge=False)  # no vertical rules and one space between columns: narrow
    for i in columns:
        header = t.headers[i]
        if header == "error":  # cut, never wrapped: one failed trial must not widen the table
            grid.add_column(header, no_wrap=True, overflow="ellipsis", max_width=flexible_width)
        elif header in FLEXIBLE:  # wrapped within the room left
            grid.add_column(header, overflow="fold", max_width=flexible_width)
        else:
            grid.add_column(header, no_wrap=True, justify="right" if i > 2 and header not in ("study", "verdict") else "left")
    for row in t.rows:
        grid.add_row(*(row[i] for i in columns))
    return grid


def rich_table(t: ReportTable, console: Console) -> Table:
    """The table as a grid that fits the terminal, a FLEXIBLE column (errors, parameter lists) given the room
    left; one block of `header: value` lines per row only when even that does not fit. Nothing in the grid is
    cut but errors."""
    t = fold_constant_columns(t)
    flexible = [i for i, header in enumerate(t.headers) if header in FLEXIBLE]
    others = [i for i in range(len(t.headers)) if i not in flexible]
    width = Measurement.get(console, console.options.update_width(10_000), grid(t, others)).maximum
    room = console.width - width - 3 * len(flexible)  # each flexible column's padding and border
    if width <= console.width and (not flexible or room >= 10):
        return grid(t, list(range(len(t.headers))), flexible_width=room // max(1, len(flexible)))
    if width <= console.width and t.headers[flexible[0]] == "error":
        return grid(t, others)  # no room for the error text: the table without it
    cards = Table(title=t.title, title_justify="left", show_header=False, box=None)
    cards.add_column(style="dim")
    cards.add_column(overflow="fold")
    for row in t.rows:
        for header, cell in zip(t.headers, row):
            cards.add_row(header, cell)
        cards.add_section()
        cards.add_row("", "")
    return cards


def print_tables(tables: list[ReportTable], fmt: str, out: Path | None, force: bool = False,
                 database: Path | None = None, images: dict[str, list[tuple[str, bytes]]] | None = None) -> None:
    """Tables to the terminal, or to `out` (never over `database`, over an existing file only with `force`);
    HTML also embeds `images`, (caption, PNG) pairs per study."""
    if fmt == "table" and out is None:
        for t in tables:
            stdout.print(rich_table(t, stdout))
            for note in t.notes:
                stdout.print(note, style="dim")
        return
    text = render_text(tables, "markdown" if fmt == "table" else fmt, images)
    if out is None:
        print(text, end="")
    else:
        stderr.print(f"wrote {write_output(out, text, force, database)}")
