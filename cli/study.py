"""`robust-tune run`, `report` and `studies`: Bayesian-optimisation studies and their tables."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable
from rich.text import Text

from cli.main import app
from cli.render import stderr
from pipeline.errors import UserError
from pipeline.output_file import write_output
from pipeline.report import FORMATS, Table, best_table, render_text, trials_table
from pipeline.store import DEFAULT_DB, Store, sqlite_file
from pipeline.study_config import load_study
from pipeline.trainer import BatchEnd, EpochEnd

stdout = Console()
DB_HELP = f"Database: a SQLite file path or any SQLAlchemy URL (default {DEFAULT_DB})."


def _params_text(parameters: dict[str, Any]) -> str:
    return "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in parameters.items())


class StudyView:
    """The live view of a running study: trial k of N, the trial's epochs, the best so far."""

    def __init__(self) -> None:
        self.header = Text("starting")
        self.best = Text("")
        self.recent: list[tuple[str, str, str, str]] = []
        self.parameters: dict[str, Any] = {}
        self.bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=stderr)
        self.epochs = self.bars.add_task("epochs", total=None, status="")
        self.batches = self.bars.add_task("batches", total=None, status="")

    def render(self) -> Group:
        recent = RichTable(box=None, show_header=bool(self.recent), pad_edge=False)
        for column in ("trial", "status", "objective", "parameters or error"):
            recent.add_column(column)
        for row in self.recent[-5:]:
            recent.add_row(*row)
        return Group(self.header, self.bars, self.best, recent)

    def on_event(self, event: Any) -> None:
        from pipeline.study import StudyStarted, TrialEnded, TrialStarted

        if isinstance(event, BatchEnd):
            self.bars.update(self.batches, total=event.batches, completed=event.batch)
        elif isinstance(event, EpochEnd):
            self.bars.update(self.epochs, total=event.epochs, completed=event.epoch,
                             status=f"loss {event.train_loss:.3f}  val acc {100 * event.val_accuracy:.1f}%")
        elif isinstance(event, StudyStarted):
            resumed = f", resuming after {event.ran} trial(s)" if event.resumed else ""
            again = f"; {len(event.requeued)} interrupted trial(s) run again" if event.requeued else ""
            self.header = Text(f"study {event.name}: budget {event.budget} trials{resumed}{again}")
        elif isinstance(event, TrialStarted):
            self.header = Text(f"trial {event.number} of {event.budget} (Ax trial {event.trial_index}): "
                               f"{_params_text(event.parameters)}")
            self.parameters = event.parameters
            self.bars.reset(self.epochs, total=None, status="")
            self.bars.reset(self.batches, total=None)
        elif isinstance(event, TrialEnded):
            objective = "-" if event.objective is None else f"{100 * event.objective:.1f}%"
            self.recent.append((str(event.trial_index), event.status, objective,
                                event.error or _params_text(self.parameters)))
            if event.best:
                value, index, parameters = event.best
                self.best = Text(f"best so far: {100 * value:.1f}% (trial {index}: {_params_text(parameters)})")


def _rich_table(t: Table, console: Console) -> RichTable:
    """The table as a grid, or one block of `header: value` lines per row when the terminal is too narrow."""
    grid = RichTable(title=t.title, title_justify="left")
    for i, header in enumerate(t.headers):
        grid.add_column(header, no_wrap=header not in ("data set", "error"), justify="right" if i > 2 else "left")
    for row in t.rows:
        grid.add_row(*row)
    if Measurement.get(console, console.options.update_width(10_000), grid).maximum <= console.width:
        return grid
    cards = RichTable(title=t.title, title_justify="left", show_header=False, box=None)
    cards.add_column(style="dim")
    cards.add_column()
    for row in t.rows:
        for header, cell in zip(t.headers, row):
            cards.add_row(header, cell)
        cards.add_section()
        cards.add_row("", "")
    return cards


def _print_tables(tables: list[Table], fmt: str, out: Path | None, force: bool = False,
                  database: Path | None = None) -> None:
    """Tables to the terminal, or to `out` (never over `database`, over an existing file only with `force`)."""
    if fmt == "table" and out is None:
        for t in tables:
            stdout.print(_rich_table(t, stdout))
            for note in t.notes:
                stdout.print(note, style="dim")
        return
    text = render_text(tables, "markdown" if fmt == "table" else fmt)
    if out is None:
        print(text, end="")
    else:
        stderr.print(f"wrote {write_output(out, text, force, database)}")


@app.command()
def run(
    study_file: Annotated[Path, typer.Argument(help="A study file (TOML), e.g. studies/quickstart.toml.")],
    trials: Annotated[Optional[int], typer.Option(
        min=1, help="Run until this many trials have run, completed or failed (default: the study's budget).")] = None,
    db: Annotated[Optional[str], typer.Option(help=DB_HELP)] = None,
    device: Annotated[str, typer.Option(help="auto (cuda if available), cpu or cuda.")] = "auto",
    seed: Annotated[Optional[int], typer.Option(help="Override the study's seed.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", help="Override a study field, e.g. --set budget.trials=5 --set params.epochs=3 (repeat).")] = None,
    log_file: Annotated[Path, typer.Option(help="Where Ax's and other libraries' messages go.")] =
        Path("runs/robust-tune.log"),
) -> None:
    """Run a Bayesian-optimisation study, or resume it: completed trials are kept."""
    overrides = list(set_ or []) + ([f"seed={seed}"] if seed is not None else [])
    study = load_study(study_file, overrides, on_note=lambda note: stderr.print(f"note: {note}"))
    from pipeline.study import StudyInterrupted, run_study

    view = StudyView()
    try:
        with Live(view.render(), console=stderr, refresh_per_second=4, transient=True) as live:
            def on_event(event: Any) -> None:
                view.on_event(event)
                if not isinstance(event, BatchEnd):
                    live.update(view.render())

            summary = run_study(study, db, device, trials, log_file, on_event)
    except KeyboardInterrupt as stop:
        what = (f"trial {stop.trial_index} of study {study.name} was stopped and will run again first"
                if isinstance(stop, StudyInterrupted) else f"study {study.name} was stopped between trials")
        again = "".join([f" --db {db}" if db else ""] + [f" --set {o}" for o in overrides])
        stderr.print(f"interrupted: {what}; resume with robust-tune run {study_file}{again}", soft_wrap=True)
        raise typer.Exit(130)
    overhead = summary.proposal_seconds + summary.storage_seconds
    if not summary.new_trials and not summary.stopped:
        stdout.print(f"study {summary.name} already has its {summary.budget} trials; "
                     "--trials N runs more. Nothing was changed.")
    else:
        stdout.print(f"study {summary.name}: {summary.completed} trial(s) completed now, {summary.failed} failed, "
                     f"in {summary.seconds:.1f} s; proposing and storing took {overhead:.1f} s "
                     f"({100 * overhead / max(summary.seconds, 1e-9):.1f}%). Library messages: {summary.log_file}")
    _print_tables([best_table(Store(db), [study.name])], "table", None)
    if summary.stopped:
        stderr.print(f"[bold red]stopped:[/] {summary.stopped}")
        raise typer.Exit(1)


@app.command()
def report(
    studies: Annotated[Optional[list[str]], typer.Argument(help="Study names (default: all in the database).")]
    = None,
    db: Annotated[Optional[str], typer.Option(help=DB_HELP)] = None,
    format_: Annotated[str, typer.Option("--format", help=f"One of {', '.join(FORMATS)}.")] = "table",
    out: Annotated[Optional[Path], typer.Option(
        help="Write to this file instead of the terminal (never over a database).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Let --out replace an existing file.")] = False,
    list_trials: Annotated[bool, typer.Option("--trials", help="Also list every trial of each study.")] = False,
) -> None:
    """The best combination of hyper-parameters per (data set, network, method), paper-style."""
    if format_ not in FORMATS:
        raise UserError(f"unknown format {format_!r}; known: {', '.join(FORMATS)}")
    store = Store(db, create=False)
    if not store.all_studies():
        raise UserError(f"no studies in {store.url} yet; run one with `robust-tune run STUDY.toml`")
    tables = [best_table(store, studies)]
    if list_trials:
        tables += [trials_table(store, s.name) for s in store.all_studies() if not studies or s.name in studies]
    _print_tables(tables, format_, out, force, sqlite_file(store.url))


@app.command("studies")
def list_studies(db: Annotated[Optional[str], typer.Option(help=DB_HELP)] = None) -> None:
    """The studies in the database and how far each has come."""
    store = Store(db, create=False)
    table = RichTable(title=f"Studies in {store.url}", title_justify="left")
    for column in ("study", "method", "data", "network", "completed", "failed", "running", "best", "objective"):
        table.add_column(column)
    from pipeline.report import best_trial, dataset_label

    for study in store.all_studies():
        trials = store.trials(study.id)
        counts = {s: sum(t.status == s for t in trials) for s in ("completed", "failed", "running")}
        best = best_trial(study, trials)
        config = study.config
        table.add_row(study.name, config["method"], dataset_label(config["data"]), config["backbone"],
                      f"{counts['completed']}/{config['budget']['trials']}", str(counts["failed"]),
                      str(counts["running"]),
                      "-" if best is None else f"{100 * best.metrics[config['objective']]:.1f}%", config["objective"])
    stdout.print(table)
