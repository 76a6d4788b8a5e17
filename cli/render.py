"""Rich renderings shared by the commands: metric tables and progress bars."""
from __future__ import annotations

import os
import re
import textwrap
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from rich import box
from rich.console import Console
from rich.cells import cell_len, set_cell_size
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from pipeline.config import IMAGE_FILE_DATA
from pipeline.report.formats import render_text
from pipeline.output_file import write_output
from pipeline.methods.declarations import ALL_PARAMS
from pipeline.report.tables import DESCRIPTIVE, FLEXIBLE, IN_NOTES, WRAPPED, Table as ReportTable, percent

if TYPE_CHECKING:
    from pipeline.config import DataConfig
    from pipeline.training.result import RunResult, SplitMetrics

stdout = Console()
stderr = Console(stderr=True)


PIPE_WIDTH = 80  # what a line printed to a pipe or a log file fits, where no terminal says its width


def print_line(console: Console, text: str, **options: Any) -> None:
    """An error, warning or note: on a terminal wrapped between words to the width (print_wrapped); elsewhere (a log
    file, a pipe) one line, whatever its length, so that it greps whole (`error: ...` is one line)."""
    if console.is_terminal:
        print_wrapped(console, text, **options)
    else:
        console.print(text, soft_wrap=True, **options)


def print_progress(console: Console, text: str, **options: Any) -> None:
    """A progress or event line, or a line of a plan: wrapped between words (print_wrapped) to the terminal's width,
    or to PIPE_WIDTH in a log file or a pipe, its further lines indented two spaces more (an event begins at the
    start of a line; a word, a path or a command is never broken)."""
    hang = options.pop("hang", 2)
    print_wrapped(console, text, hang=hang, width=None if console.is_terminal else PIPE_WIDTH, **options)


def print_plan(lines: list[str]) -> None:
    """A plan's lines on stdout, each wrapped with its further lines two spaces in from its own indentation."""
    for line in lines:
        text = line.lstrip()
        print_progress(stdout, text, indent=len(line) - len(text), hang=2, markup=False, highlight=False)


def print_wrapped(console: Console, text: str, indent: int = 0, hang: int = 0, width: int | None = None,
                  **options: Any) -> None:
    """`text` wrapped between words to `width` (default: the console's width), each line `indent` spaces in and the
    lines after the first of each paragraph `hang` more, none ending in a space. A word wider than a line (a long
    path) has a line of its own, whole: it is never cut, so it copies as it is."""
    style, markup, highlight = options.pop("style", ""), options.pop("markup", None), options.pop("highlight", None)
    width = width or console.width
    for paragraph in console.render_str(text, style=style, markup=markup, highlight=highlight).split():
        lead = len(paragraph.plain) - len(paragraph.plain.lstrip(" "))  # an indented paragraph stays indented
        body = paragraph[lead:]
        room = width - indent - lead
        for number, line in enumerate(body.divide(_breaks(body.plain, room, room - hang))):
            line.rstrip()
            console.print(Text(" " * (indent + lead + (hang if number else 0))) + line, soft_wrap=True, **options)


def _breaks(text: str, first: int, rest: int) -> list[int]:
    """Where `text` breaks into lines between words: the first line at most `first` cells, the others `rest`; a word
    wider than its line stays whole on a line of its own."""
    breaks: list[int] = []
    start, room = 0, max(1, first)
    for word in re.finditer(r"\S+", text):
        if word.start() > start and cell_len(text[start:word.end()]) > room:
            breaks.append(word.start())
            start, room = word.start(), max(1, rest)
    return breaks


def print_file_text(text: str) -> None:
    """A file's text (best's TOML) on stdout as it is, to redirect into a file; on a terminal its comment lines
    wider than the terminal are wrapped between words, each part still a comment."""
    for line in text.splitlines():
        if stdout.is_terminal and line.startswith("# ") and cell_len(line) > stdout.width:
            print(*textwrap.wrap(line[2:], stdout.width, initial_indent="# ", subsequent_indent="# ",
                                 break_long_words=False, break_on_hyphens=False), sep="\n")
        else:
            print(line)


def terminal_width(console: Console) -> int:
    """The width lines must fit on `console`: a terminal's, or PIPE_WIDTH for a log file or a pipe."""
    return console.width if console.is_terminal else PIPE_WIDTH


def image_line(data: "DataConfig") -> str | None:
    """How image files are read, shown when a run starts (the size decides its speed and its results); None for
    the data sets that keep their arrays' own size and channels (digits, idx, medmnist)."""
    if data.name not in IMAGE_FILE_DATA:
        return None
    cache = f"cached in {data.cache_dir}" if data.cache_dir else "not cached"
    return (f"images: resized to {data.image_size} x {data.image_size} px, {data.channels} "
            f"channel{'s' if data.channels != 1 else ''}, {cache}")


def print_image_line(data: "DataConfig") -> None:
    """`image_line` on stderr, where there is one."""
    if (line := image_line(data)) is not None:
        print_line(stderr, line, markup=False, highlight=False)


def result_title(result: "RunResult") -> str:
    """What ran, where and how long: the line above the result table."""
    settings = result.settings
    threads = f"{settings.threads} thread{'s' if settings.threads != 1 else ''}, "
    return (f"{settings.method} on {settings.data.name} with {settings.backbone} (seed {result.seed}, {threads}"
            f"{result.train_seconds:.1f} s on {settings.device}, {settings.precision})")


def result_table(result: "RunResult") -> Table:
    """Accuracy on the validation and test splits, then per class, so a gain in the mean cannot hide a lost class."""
    return metrics_table({"validation": result.val, "test": result.test})


def metrics_table(splits: dict[str, "SplitMetrics"]) -> Table:
    """Accuracy per split (a column each, named by the keys), then per class of the last split."""
    table = Table()
    table.add_column("top-1 accuracy (%)")
    for name in splits:
        table.add_column(name, justify="right")
    for label, key in (("mean", "accuracy"), ("balanced", "balanced_accuracy"),
                       ("worst class", "worst_class_accuracy")):
        table.add_row(label, *(percent(getattr(metrics, key)) for metrics in splits.values()))
    table.add_section()
    for name in list(splits.values())[-1].per_class_accuracy:
        table.add_row(f"class {name}", *(percent(metrics.per_class_accuracy.get(name)) for metrics in splits.values()))
    return table


def params_line(result: "RunResult") -> str:
    return "parameters: " + ", ".join(f"{k}={v}" for k, v in result.settings.params.items())


def batches_line(result: "RunResult") -> str:
    """How many different examples a training batch held on average: fewer than the batch size means the
    sampler drew examples twice (hardness-weighted sampling at a large beta)."""
    return (f"distinct examples per batch: {result.distinct_per_batch:.1f} on average "
            f"(batch size {result.settings.params['batch_size']})")


@contextmanager
def training_progress(description: str) -> Iterator:
    """A progress bar over epochs and batches on stderr; yields the callback for the trainer."""
    from pipeline.training.trainer import BatchEnd

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[status]}"), TimeRemainingColumn())
    with Progress(*columns, console=stderr, transient=True) as bar:
        epochs = bar.add_task(description, total=None, status="")
        batches = bar.add_task("  batches", total=None, status="")

        def on_event(event: Any) -> None:  # the trainer's EpochEnd or BatchEnd
            if isinstance(event, BatchEnd):
                update_batch_bars(bar, epochs, batches, event)
            else:
                bar.update(epochs, total=event.epochs, completed=event.epoch,
                           status=f"loss {event.train_loss:.3f}  val acc {percent(event.val_accuracy)}%")

        yield on_event


BATCH_STAGES = {"train": "  batches", "val": "  evaluating val", "test": "  evaluating test"}


def update_batch_bars(bar: Progress, epochs: Any, batches: Any, event: Any,
                      labels: dict[str, str] = BATCH_STAGES) -> None:
    """A trainer's BatchEnd on an epochs bar and a batches bar: the epoch count known from the first batch,
    the batches bar named by `labels` for what it counts (training batches, or evaluating the validation or
    test split)."""
    if next(task for task in bar.tasks if task.id == epochs).total is None:
        bar.update(epochs, total=event.epochs)
    bar.update(batches, total=event.batches, completed=event.batch, description=labels[event.stage])


def print_upgrade(message: str | None) -> None:
    """The one line saying a database written by an earlier version was upgraded, on stderr."""
    if message:
        print_line(stderr, message, markup=False, highlight=False)


# Terminal tables show one line per row from CARDS_BELOW columns up: `fit_columns` chooses what they show.
CARDS_BELOW = 60  # narrower terminals get one block of `header value` lines per row
NAME_WIDTH = 12  # a long cell (a study's name, a data set) is cut to no fewer characters than this
FLEXIBLE_WIDTH = 10  # a FLEXIBLE column (errors, parameter lists) given less room than this is not shown
# Results a terminal table always shows, even when every row has the same: the objective, test and worst class.
RESULTS = ("best", "objective", "val acc", "test acc", "worst class", "val balanced", "test balanced", "val worst",
           "test worst")
# Columns it never leaves out for room: the results, what names a row, and a study's trials run (`studies`).
KEPT = (*RESULTS, "study", "trial", "variant", "method", "metric", "verdict", "trials")
# Short headers for a narrow terminal, each with the words the legend under the table gives it.
ABBREVIATIONS = {
    "val acc": ("val", "validation accuracy"), "test acc": ("test", "test accuracy"),
    "worst class": ("worst", "lowest per-class test accuracy"),
    "val balanced": ("vbal", "balanced validation accuracy"), "test balanced": ("tbal", "balanced test accuracy"),
    "val worst": ("vworst", "lowest per-class validation accuracy"),
    "test worst": ("tworst", "lowest per-class test accuracy"), "balanced": ("bal", "balanced test accuracy"),
    "smallest class": ("small", "test accuracy of the class with the fewest training examples"),
    "data set": ("data", "data set"), "network": ("net", "network"), "selected on": ("sel", "selected on"),
    "train s": ("s", "training seconds"), "parameters": ("params", "parameters"),
    "feasible": ("ok", "keeps every constraint"), "re-training": ("retrain", "re-training time"),
    "mean ± 95%": ("mean", "mean ± 95% interval"),
    "vs ERM (simult.)": ("vs ERM", "difference to tuned ERM with its simultaneous interval"),
    "90% interval": ("90%", "90% interval"),
}
# The papers' short column names for parameters (IS, epoch), explained under every table showing one.
PARAMETER_COLUMNS = {p.column: p.name for p in ALL_PARAMS if p.column and p.column != p.name}


def _abbreviation(header: str) -> tuple[str, str] | None:
    """A header's short form and its meaning; a difference column `vs X: metric` becomes `Δmetric`."""
    if header.startswith("vs ") and ": " in header:
        metric = header.split(": ", 1)[1]
        return "Δ" + ABBREVIATIONS.get(metric, (metric, ""))[0], header
    return ABBREVIATIONS.get(header)


def cut_text(text: str, width: int, middle: bool) -> str:
    """`text` in at most `width` cells, an ellipsis where it was cut: in the middle for a name (whose end
    often tells rows apart), at the end for free text."""
    if cell_len(text) <= width:
        return text
    if not middle:
        return set_cell_size(text, width - 1) + "…"
    head = (width - 1) // 2
    return set_cell_size(text, head) + "…" + text[len(text) - (width - 1 - head):]


def pick_columns(t: ReportTable, names: list[str]) -> ReportTable | None:
    """The table with only the columns `names` (headers as --format csv writes them), in that order; None when
    it has none of them."""
    picked = [t.headers.index(name) for name in names if name in t.headers]
    if not picked:
        return None
    return ReportTable(t.title, [t.headers[i] for i in picked], [[row[i] for i in picked] for row in t.rows],
                       t.notes, t.records)


def fit_columns(t: ReportTable, width: int, chosen: bool = False) -> ReportTable:
    """The table as a terminal `width` columns wide shows it on one line per row: IN_NOTES columns left out (the
    notes say them), columns whose value every row shares said once in a note, then as needed headers abbreviated
    (with a legend), long names cut, FLEXIBLE text cut to the room left or left out, and the least needed columns
    left out (named in a note). The records, and so markdown, csv and json, keep everything. `chosen`: the user
    picked the columns (--columns), so every one is shown, abbreviated and cut as needed but never said in a note
    or left out."""
    columns = [i for i, header in enumerate(t.headers) if header not in IN_NOTES or chosen]
    notes: list[str] = []
    # one row: only what describes a study
    constant = [i for i in columns if t.rows and len({row[i] for row in t.rows}) == 1 and t.headers[i] not in RESULTS
                and (len(t.rows) > 1 or t.headers[i] in DESCRIPTIVE) and not chosen]
    if said := [f"{t.headers[i]} {t.rows[0][i]}" for i in constant if t.rows[0][i].strip()]:
        notes.append("all rows: " + ", ".join(said))  # an empty column (no errors) goes unsaid
    columns = [i for i in columns if i not in constant]
    headers = {i: t.headers[i] for i in columns}
    widths = {i: max([cell_len(headers[i]), *(cell_len(row[i]) for row in t.rows)]) for i in columns}
    flexible = [i for i in columns if t.headers[i] in FLEXIBLE]

    def needed(flexible_at: int | None = FLEXIBLE_WIDTH) -> int:
        """The grid's width: the columns, two spaces between them and one at each edge."""
        return sum(min(widths[i], flexible_at) if i in flexible and flexible_at is not None else widths[i]
                   for i in columns) + 2 * len(columns)

    legend: dict[str, str] = {}
    if needed(None) > width:
        for i in columns:
            if (short := _abbreviation(headers[i])) is not None and short[0] not in legend:
                headers[i] = short[0]
                legend[short[0]] = short[1]
                widths[i] = max([cell_len(short[0]), *(cell_len(row[i]) for row in t.rows)])
    hidden: list[int] = []
    hideable = [i for i in reversed(columns) if i not in flexible and t.headers[i] not in KEPT and not chosen]
    differences = [i for i in hideable if _abbreviation(t.headers[i]) and headers[i].startswith("Δ")]
    order = [*(flexible if not chosen else []), *(i for i in hideable if i not in differences), *differences]

    def hide(upto: list[int]) -> None:
        """Leave out the columns of `upto`, in order, until the table fits."""
        for i in upto:
            if needed() <= width:
                break
            hidden.append(i)
            columns.remove(i)
            if i in flexible:
                flexible.remove(i)

    def spared(i: int) -> int:
        """The room leaving out column `i` makes."""
        return (min(widths[i], FLEXIBLE_WIDTH) if i in flexible else widths[i]) + 2

    # Names stay whole where leaving out columns makes room (one difference to the reference kept at least);
    # else they are cut, never a number: a table that does not fit even so is printed as cards (print_table).
    if needed() - sum(map(spared, order[:len(order) - bool(differences)])) <= width:
        hide(order[:len(order) - bool(differences)])
    cut: set[int] = set()
    for i in sorted((i for i in columns if i not in flexible and not _numeric(t, i)), key=lambda i: -widths[i]):
        if needed() <= width:
            break
        room = max(NAME_WIDTH, cell_len(headers[i]), widths[i] - (needed() - width))
        if room < widths[i]:
            widths[i], cut = room, cut | {i}
    hide([i for i in order if i in columns])
    for i in sorted(cut & set(columns), key=lambda i: widths[i]):  # a column left out made room: uncut what fits
        whole = max([cell_len(headers[i]), *(cell_len(row[i]) for row in t.rows)])
        widths[i] = min(whole, widths[i] + max(0, width - needed()))
        if widths[i] == whole:
            cut.discard(i)
    cut -= set(hidden)
    room = width - needed(0)  # what the flexible columns share
    for i in flexible:
        widths[i] = min(widths[i], max(FLEXIBLE_WIDTH, room // len(flexible)))
        if t.headers[i] in WRAPPED:  # wrapped between words: as wide as its longest word at least
            widths[i] = max([widths[i], *(cell_len(word) for row in t.rows for word in row[i].split())])
    legend.update({h: PARAMETER_COLUMNS[h] for h in headers.values() if h in PARAMETER_COLUMNS})
    explained = [(short, meaning) for short, meaning in legend.items() if short in (headers[i] for i in columns)]
    entries = [f"{short} = {meaning}" for short, meaning in explained if not short.startswith("Δ")]
    if deltas := [(short, meaning.split(": ", 1)) for short, meaning in explained if short.startswith("Δ")]:
        entries.append(f"{', '.join(short for short, _ in deltas)} = "  # one reference: said once
                       f"{', '.join(metric for _, (_, metric) in deltas)} minus {deltas[0][1][0][3:]}'s")
    if entries:
        notes.append("; ".join(entries))
    if hidden:
        notes.append("not shown here (see --wide or --format markdown): "
                     + ", ".join(t.headers[i] for i in sorted(hidden)))
    wrapped = [i for i in flexible if t.headers[i] in WRAPPED]
    if cut or any(cell_len(row[i]) > widths[i] for i in flexible if i not in wrapped for row in t.rows):
        notes.append("… marks text cut to fit; --wide shows it whole")
    cells = {i: [row[i] for row in t.rows] for i in columns}
    cells.update({i: _cut_names(cells[i], widths[i]) for i in columns if i not in flexible})
    cells.update({i: [cut_text(cell, widths[i], middle=False) for cell in cells[i]] for i in flexible
                  if i not in wrapped})
    cells.update({i: ["\n".join(textwrap.wrap(cell, widths[i], break_on_hyphens=False, break_long_words=False))
                      or cell for cell in cells[i]] for i in wrapped})
    rows = [[cells[i][r] for i in columns] for r in range(len(t.rows))]
    return ReportTable(t.title, [headers[i] for i in columns], rows, notes + t.notes, t.records)


def _numeric(t: ReportTable, i: int) -> bool:
    """Whether column `i` holds numbers (a result, an interval, a difference): cut, it would say another."""
    return all(cell[:1].isdigit() or cell[:1] in "+-" for row in t.rows if (cell := row[i]))


def _cut_names(names: list[str], width: int) -> list[str]:
    """Names cut to `width` in the middle; when that makes two of them the same, what they all begin and end
    with is cut instead (`digits-gils-…-study` and `digits-ls-…-study` become `…gils…` and `…ls…`)."""
    cut = [cut_text(name, width, middle=True) for name in names]
    if len(set(cut)) == len(set(names)):
        return cut
    prefix = len(os.path.commonprefix(names))
    suffix = len(os.path.commonprefix([name[prefix:][::-1] for name in names]))
    return [name if cell_len(name) <= width else
            ("…" if prefix else "")
            + cut_text(name[prefix:len(name) - suffix], width - bool(prefix) - bool(suffix), True)
            + ("…" if suffix else "") for name in names]


def grid(t: ReportTable, wrap: bool = False) -> Table:
    """The table as a narrow Rich grid, one line per row (`wrap`: long cells wrapped instead)."""
    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True, pad_edge=False)  # no rules: narrow
    for i, header in enumerate(t.headers):
        grid.add_column(header, no_wrap=not wrap, overflow="fold" if wrap else "ellipsis",
                        justify="right" if _numeric(t, i) else "left")
    for row in t.rows:
        grid.add_row(*row)
    return grid


def _grid_width(t: ReportTable) -> int:
    """How wide `grid` draws the table: its columns at their widest line, two spaces between them."""
    return sum(max([cell_len(header), *(cell_len(line) for row in t.rows for line in row[i].split("\n"))])
               for i, header in enumerate(t.headers)) + 2 * (len(t.headers) - 1)


def cards(t: ReportTable) -> Table:
    """One block of `header value` lines per row, for a terminal too narrow for any grid."""
    cards = Table(show_header=False, box=None)
    cards.add_column(style="dim")
    cards.add_column(overflow="fold")
    for row in t.rows:
        for header, cell in zip(t.headers, row):
            cards.add_row(header, cell)
        cards.add_row("", "")
    return cards


def print_table(t: ReportTable, console: Console, wide: bool = False, chosen: bool = False) -> None:
    """A table on the terminal: its title, the table fitted to the width (`wide`: every column, long cells
    wrapped; cards below CARDS_BELOW columns; `chosen`: columns the user picked, see fit_columns), its notes,
    a blank line."""
    console.print(t.title, style="bold", markup=False, highlight=False)
    if not t.rows:
        shown, table = t, None
    elif wide:
        shown, table = t, grid(t, wrap=True)
    elif console.width < CARDS_BELOW:
        shown, table = t, cards(t)
    else:
        shown = fit_columns(t, console.width, chosen)
        table = grid(shown) if _grid_width(shown) <= console.width else cards(shown)
    if table is not None:
        console.print(table)
    for note in shown.notes:
        console.print(note, style="dim", markup=False, highlight=False)
    console.print()


def print_tables(tables: list[ReportTable], fmt: str, out: Path | None, force: bool = False,
                 database: Path | None = None, images: dict[str, list[tuple[str, str, bytes]]] | None = None,
                 wide: bool = False, chosen: list[ReportTable] | None = None, source: str = "") -> None:
    """Tables to the terminal (`wide`: every column, see print_table; `chosen`: those whose columns the user
    picked), or to `out` (never over `database`, over an existing file only with `force`); HTML also embeds
    `images`, (file name, caption, PNG) triples per study, and says `source` (version, date, database)."""
    if fmt == "table" and out is None:
        for t in tables:
            print_table(t, stdout, wide, any(t is c for c in chosen or []))
        return
    text = render_text(tables, "markdown" if fmt == "table" else fmt, images, source)
    if out is None:
        print(text, end="")
    else:
        stderr.print(f"wrote {write_output(out, text, force, database)}")
