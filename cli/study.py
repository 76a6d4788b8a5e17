"""`robust-tune run`, `report` and `studies`: Bayesian-optimisation studies and their tables."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table as RichTable
from rich.text import Text

from cli.app import app
from cli.interrupts import ctrl_c_kept, print_resume, resume_command
from cli.options import (DEFAULT_LOG_FILE, chosen_workers, Db, Device, LogFile, Mlflow, new_database, plan_workers,
                         Precision, Scheduler, Threads, TrialsPerGpu, Wide, Workers, chosen_format, TABLE_FORMATS,
                         TablesFormat)
from cli.render import (update_batch_bars, image_line, pick_columns, print_line, print_plan, print_progress,
                        print_tables, print_upgrade, stderr, stdout, terminal_width)
from pipeline.config import DEFAULT_TRIALS_PER_GPU
from pipeline.errors import ServerLost, UserError
from pipeline.report.formats import FORMATS, check_extension, output_format
from pipeline.library_logs import log_file_for
from pipeline.output_file import check_folder, check_output
from pipeline.report.tables import Table as ReportTable, percent

if TYPE_CHECKING:  # the store and the report import SQLAlchemy: each command that reads imports them
    from pipeline.store import Store


def _params_text(parameters: dict[str, Any]) -> str:
    return "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in parameters.items())


def clock(seconds: float) -> str:
    """A duration as the live views print it: `m:ss`, or `h:mm:ss` from an hour."""
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


# The batch bar of a trial trained in this process names what it counts: training batches or an evaluation.
BATCH_LABELS = {"train": "batch  ", "val": "eval val", "test": "eval test"}


class StudyView:
    """The live view of a running study, and the plain lines that replace it when stderr is not a
    terminal. A trial is named by its index everywhere (as in the tables); `k of N` is progress.
    Several trials run at once on parallel workers: each has its line (worker, epoch, clock)."""

    def __init__(self, fixed_epochs: int | None = None, slots: int = 1) -> None:
        self.fixed_epochs = fixed_epochs  # a study that does not search epochs trains this many
        self.name, self.budget, self.ran = "", 0, 0
        self.started = time.monotonic()
        self.running: dict[int, dict[str, Any]] = {}  # index -> k, parameters, started, worker, epoch
        self.slots = max(1, slots)  # trials that train at once (on workers, one more may wait for a free one)
        self.ended_seconds: list[float] = []  # of trials that ended in this run
        self.best = ""
        self.rows: list[tuple[str, str, str, str, str]] = []
        self.bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[status]}"), console=stderr)
        self.epochs = self.bars.add_task("epoch  ", total=None, status="")
        self.batches = self.bars.add_task("batch  ", total=None, status="")

    def eta(self) -> str:
        """Time left from the mean time of the trials that ended in this run; '?' before the first."""
        if not self.ended_seconds:
            return "?"
        mean = sum(self.ended_seconds) / len(self.ended_seconds)
        now = time.monotonic()
        running = sum(min(now - trial["started"], mean) for trial in self.running.values()
                      if trial["worker"] or self.slots == 1)  # not one that waits for a worker
        return "~" + clock(max(0.0, (mean * (self.budget - self.ran) - running) / self.slots))

    def status_line(self) -> Text:
        now = time.monotonic()
        line = f"study {self.name}: elapsed {clock(now - self.started)}, left {self.eta()}"
        for index, trial in sorted(self.running.items()):
            if self.slots > 1 and not trial["worker"]:  # proposed while the others train: starts on the next free one
                line += f"\ntrial {index} ({trial['k']} of {self.budget}) waits for a free worker"
                continue
            where = f" on worker {trial['worker']}" if trial["worker"] else ""
            epoch = f", epoch {trial['epoch']}/{trial['epochs']}" if trial["epoch"] else ""
            line += (f"\ntrial {index} ({trial['k']} of {self.budget}){where}{epoch}, running "
                     f"{clock(now - trial['started'])}: {_params_text(trial['parameters'])}")
        return Text(line)

    def trials_grid(self, last: int | None = None) -> RichTable:
        """The trials that ended in this run (the last `last` of them while it runs)."""
        grid = RichTable(box=None, show_header=bool(self.rows), pad_edge=False)
        for column in ("trial", "status", "objective", "seconds", "parameters or error"):
            grid.add_column(column, no_wrap=column != "parameters or error",
                            justify="right" if column in ("trial", "objective", "seconds") else "left")
        for row in self.rows[-last:] if last else self.rows:
            grid.add_row(*row)
        return grid

    def __rich__(self) -> Group:  # re-read on every refresh, so the clocks move
        in_process = len(self.running) == 1 and not any(t["worker"] for t in self.running.values())
        bars = [self.bars] if in_process else []  # batch bars only for a trial trained in this process
        return Group(self.status_line(), *bars, Text(self.best), self.trials_grid(last=5))

    def on_event(self, event: Any) -> str | None:
        """Update the view; returns the plain line a log shows for the event, if any."""
        from pipeline.search.study import RangesWidened, StudyStarted, TrialEnded, TrialStarted
        from pipeline.store import Reconnected, SchemaUpgraded, TrialStatus
        from pipeline.search.trial import TrialEpoch, TrialHandedBack, TrialRunning
        from pipeline.training.trainer import BatchEnd, EpochEnd

        if isinstance(event, BatchEnd):
            update_batch_bars(self.bars, self.epochs, self.batches, event, BATCH_LABELS)
        elif isinstance(event, EpochEnd):
            self.bars.update(self.epochs, total=event.epochs, completed=event.epoch,
                             status=f"loss {event.train_loss:.3f}  val acc {percent(event.val_accuracy)}%")
        elif isinstance(event, (SchemaUpgraded, Reconnected)):
            return event.message
        elif isinstance(event, StudyStarted):
            self.name, self.budget, self.ran = event.name, event.budget, event.ran
            resumed = f", resuming after {event.ran} trial(s)" if event.resumed else ""
            again = f"; {len(event.requeued)} interrupted trial(s) run again" if event.requeued else ""
            return f"study {event.name}: budget {event.budget} trials{resumed}{again}"
        elif isinstance(event, RangesWidened):
            grown = f"; budget now {event.budget} trials" if event.budget != self.budget else ""
            self.budget = event.budget
            return "\n".join(w.text() for w in event.widenings) + grown
        elif isinstance(event, TrialStarted):
            self.running[event.trial_index] = dict(
                k=event.number, parameters=event.parameters, started=time.monotonic(), worker="", epoch=0,
                epochs=event.parameters.get("epochs", self.fixed_epochs))
            self.bars.reset(self.epochs, total=event.parameters.get("epochs", self.fixed_epochs), status="")
            self.bars.reset(self.batches, total=None)
        elif isinstance(event, TrialRunning) and event.trial_index in self.running:
            self.running[event.trial_index].update(worker=event.worker, started=time.monotonic())
        elif isinstance(event, TrialEpoch) and event.trial_index in self.running:
            self.running[event.trial_index].update(epoch=event.epoch, epochs=event.epochs)
        elif isinstance(event, TrialHandedBack):
            if event.trial_index in self.running:
                self.running[event.trial_index].update(epoch=0)
            return (f"trial {event.trial_index}: its worker {event.worker} left the cluster; it trains again from "
                    f"its start on worker {event.to}")
        elif isinstance(event, TrialEnded):
            trial = self.running.pop(event.trial_index, None) or dict(
                k=self.ran + 1, parameters={}, started=time.monotonic(), worker="")
            seconds = time.monotonic() - trial["started"]
            if event.status != TrialStatus.INTERRUPTED:  # an interrupted trial runs again and does not count
                self.ended_seconds.append(seconds)
                self.ran += 1
            objective = "-" if event.objective is None else f"{100 * event.objective:.1f}%"
            status = f"stopped at epoch {event.stopped_at}" if event.stopped_at else event.status
            self.rows.append((str(event.trial_index), status, objective, f"{seconds:.1f}",
                              event.error or _params_text(trial["parameters"])))
            if event.best:
                value, best_index, best_parameters = event.best
                self.best = f"best so far: {100 * value:.1f}% (trial {best_index}: {_params_text(best_parameters)})"
            best = f"; best {100 * event.best[0]:.1f}% (trial {event.best[1]})" if event.best else ""
            where = f" on worker {trial['worker']}" if trial["worker"] else ""
            prefixes = (f" (+{event.prefixes} epoch prefix{'es' if event.prefixes > 1 else ''} told to Ax)"
                        if event.prefixes else "")
            return (f"trial {event.trial_index} ({trial['k']} of {self.budget}){where} {status}: "
                    f"objective {objective}, {seconds:.1f} s, {event.error or _params_text(trial['parameters'])}"
                    f"{prefixes}{best}")
        return None


def _stopped_trials(study: str, indices: list[int]) -> str:
    """What a stopped run leaves: the trials it stopped, which run again first, or none."""
    if not indices:
        return f"study {study} was stopped between trials"
    if len(indices) == 1:
        return f"trial {indices[0]} of study {study} was stopped and will run again first"
    return f"trials {', '.join(map(str, indices))} of study {study} were stopped and will run again first"


@app.command()
def run(
    ctx: typer.Context,
    study_file: Annotated[Path, typer.Argument(help="A study file (TOML), e.g. studies/quickstart.toml.")],
    trials: Annotated[Optional[int], typer.Option(
        min=1, help="Run until this many trials have run, completed or failed (default: the study's budget).")] = None,
    db: Db = None,
    device: Device = "auto",
    precision: Precision = "auto",
    threads: Threads = None,
    seed: Annotated[Optional[int], typer.Option(help="Override the study's training seed (every trial's).")] = None,
    search_seed: Annotated[Optional[int], typer.Option(
        help="Override the study's search seed (Sobol points and the Gaussian process).")] = None,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", metavar="KEY=VALUE",
        help="Override a study field, e.g. --set budget.trials=5 --set params.epochs=3 (repeat).")] = None,
    log_file: LogFile = DEFAULT_LOG_FILE,
    workers: Workers = None,
    scheduler: Scheduler = None,
    trials_per_gpu: TrialsPerGpu = DEFAULT_TRIALS_PER_GPU,
    mlflow: Mlflow = None,
    format_: TablesFormat = "table",
    plan: Annotated[bool, typer.Option(
        "--plan", help="Say what the study would train and about how long that takes here, from its stored trials "
                       "or a short timing probe; train and store nothing.")] = False,
) -> None:
    """Run a Bayesian-optimisation study, or resume it.

    Completed trials are kept. Trials train at once, one per CPU core (or --trials-per-gpu per GPU) unless
    --workers says otherwise; the search proposes the next while they train."""
    from pipeline.spec.study_config import check_trials, load_study, naming_source

    fmt = chosen_format(format_, TABLE_FORMATS)
    check_trials(trials)
    log_file = log_file_for(log_file, db)  # checked: its folder can hold it
    overrides = list(set_ or []) + ([f"seed={seed}"] if seed is not None else []) + (
        [f"search_seed={search_seed}"] if search_seed is not None else []) + (
        [f"threads={threads}"] if threads is not None else [])
    study = load_study(study_file, overrides, on_note=lambda note: stderr.print(f"note: {note}"))
    # torch, Ax and Dask load only once the study file is read: a missing or bad file is said at once
    from pipeline.search.parallel import trial_runner
    from pipeline.report.study_tables import best_table, model_pick_table, pareto_tables
    from pipeline.store import Reconnected, SchemaUpgraded, Store, TrialStatus, shown_database
    from pipeline.search.study import RangesWidened, StudyInterrupted, StudyStarted, TrialEnded, as_stored, run_study
    from pipeline.search.trial import InProcessRunner, TrialHandedBack, dataset_for

    study = as_stored(study, db)  # a stored study keeps its image size where the file does not give one
    if plan:
        with naming_source(str(study_file), overrides):  # a class or folder the data lacks: the file's field
            return _print_study_plan(ctx, study, db, trials, device, precision, workers, scheduler, trials_per_gpu)
    live = live_export(db, mlflow or study.mlflow)
    workers = chosen_workers(ctx, workers, scheduler)
    runner = trial_runner(workers, scheduler, trials_per_gpu, device, str(log_file))  # bad options: exit 2 here
    in_process = isinstance(runner, InProcessRunner)

    # checked once here: a class lost by a split is refused, a class or folder the data lacks named as its field
    with stderr.status(f"loading {study.data.name}"), naming_source(str(study_file), overrides):
        data = dataset_for(study.data, device if in_process else "cpu")  # trials in this process reuse it
    split_lines = [line for line in [image_line(study.data)] if line] + ["examples per split and class:",
                                                                          *data.split_summary(terminal_width(stderr))]

    def show_splits(event: Any) -> None:
        """How images are read and the split sizes, once, when the study starts (after every check that could
        refuse it in one line)."""
        if isinstance(event, StudyStarted) and split_lines:
            print_progress(stderr, "\n".join(split_lines), markup=False, highlight=False)
            split_lines.clear()

    def export_trial(event: Any) -> None:
        """With MLflow, each trial's run once the trial is stored."""
        if live is not None and isinstance(event, TrialEnded) and event.status != TrialStatus.INTERRUPTED:
            live.study(study.name)

    fixed_epochs = study.fixed.get("epochs")
    view = StudyView(fixed_epochs if isinstance(fixed_epochs, int) else None, runner.capacity)
    resume = resume_command(ctx, {"db": shown_database})
    try:
        if stderr.is_terminal:
            def on_live_event(event: Any) -> None:
                ctrl_c.check()
                show_splits(event)
                export_trial(event)
                if isinstance(event, SchemaUpgraded):
                    print_upgrade(event.message)
                line = view.on_event(event)
                if line and isinstance(event, (RangesWidened, Reconnected, TrialHandedBack)):  # above the live table
                    print_progress(stderr, line, markup=False, highlight=False)

            with new_database(db), ctrl_c_kept() as ctrl_c, Live(view, console=stderr, refresh_per_second=4,
                                                                 transient=True):
                summary = run_study(study, db, device, trials, log_file, on_live_event, runner=runner,
                                    precision=precision)
            if view.rows:
                stderr.print(view.trials_grid())  # the run's trials stay on screen
        else:  # a log (nohup, CI): one plain line per study start and per trial end
            def on_event(event: Any) -> None:
                ctrl_c.check()
                show_splits(event)
                export_trial(event)
                line = view.on_event(event)
                if line:
                    print_progress(stderr, line, markup=False, highlight=False)

            with new_database(db), ctrl_c_kept() as ctrl_c:
                summary = run_study(study, db, device, trials, log_file, on_event, runner=runner, precision=precision)
    except KeyboardInterrupt as stop:
        if stderr.is_terminal and view.rows:
            stderr.print(view.trials_grid())  # the live table went with Ctrl-C: its trials stay on screen
        stopped = _stopped_trials(study.name, stop.trial_indices if isinstance(stop, StudyInterrupted) else [])
        print_resume(stderr, f"interrupted: {stopped}; resume with", resume)
        raise typer.Exit(130)
    except ServerLost as lost:  # cli/main.py prints it in one line, exit code 1
        raise ServerLost(f"{lost}; {_stopped_trials(study.name, sorted(view.running))}; resume with {resume} "
                         "once it is back") from None
    overhead, (idle, span) = summary.proposal_seconds + summary.storage_seconds, summary.idle()
    said = stdout if fmt == "table" else stderr  # stdout holds only the tables in a file format
    if not summary.new_trials and not summary.stopped:
        print_progress(said, f"study {summary.name} already has its {summary.budget} trials; --trials N runs more. "
                       "Nothing was changed.", markup=False, highlight=False)
    else:
        print_progress(said, f"study {summary.name}: {summary.completed} trial(s) completed now"
                     + (f" ({summary.early_stopped} stopped early)" if summary.early_stopped else "")
                     + f", {summary.failed} failed"
                     + (f", {summary.prefixes} epoch prefixes told to Ax" if summary.prefixes else "")
                     + f", in {summary.seconds:.1f} s" + ("" if in_process else f" on {runner.capacity} workers")
                     + f"; proposing and storing took {overhead:.1f} s; from the first trial's start to the last "
                     f"one's end, {span:.1f} s, no trial trained for {idle:.1f} s ({100 * idle / max(span, 1e-9):.0f}%)"
                     + f". Library messages: {summary.log_file}", markup=False, highlight=False)
    if live is not None:
        live.study(study.name)  # a study resumed or finished before: what MLflow lacks of it
        if not live.failed:
            print_line(stderr, f"MLflow: study {study.name} and its trials at {live.uri}", highlight=False)
    store = Store(db)
    picks = model_pick_table(store, [study.name])
    print_tables([best_table(store, [study.name]), *pareto_tables(store, [study.name])]
                 + ([picks] if picks else []), fmt, None)
    if summary.stopped:
        stderr.print(f"[bold red]stopped:[/] {summary.stopped}")
        raise typer.Exit(1)


def _print_study_plan(ctx: typer.Context, study: Any, db: str | None, trials: int | None, device: str,
                      precision: str, workers: int | None, scheduler: str | None, trials_per_gpu: int) -> None:
    """`run --plan`: what the study would train and about how long it takes; nothing trained or stored."""
    from pipeline.compare.plan import plan_study
    from pipeline.search.parallel import check_options
    from pipeline.search.study import reading_store, settle_threads

    workers = chosen_workers(ctx, workers, scheduler)
    check_options(workers, scheduler, trials_per_gpu, device)
    store = reading_store(db)
    study = settle_threads(study, None if store is None else store.study(study.name))
    count, where = plan_workers(workers, scheduler, device, trials_per_gpu)
    with stderr.status("timing a few batches"):
        found = plan_study(study, store, count, trials, device, precision)
    probe = found.probe
    stored = f"{found.ran} stored" if found.ran else "none stored yet"
    timed = (f"from its {found.measured} stored trial{'' if found.measured == 1 else 's'}" if found.measured else
             f"at the middle of its ranges, timed here: {probe.epochs:g} epochs of {probe.batches} batches at "
             f"{1000 * probe.batch_seconds:.0f} ms, evaluation {1000 * probe.eval_seconds:.0f} ms an epoch")
    print_plan([f"plan of study {study.name} (a timing probe trained, nothing stored)",
                "data, as its trials load it:",
                *(f"  {line}" for line in found.dataset.split_summary(
                    terminal_width(stdout) - 2, found.dataset.rare_class(study.data.imbalance_class))),
                (f"to train: {found.trials} trial{'' if found.trials == 1 else 's'} ({found.budget} in all, {stored})"
                 if found.trials else f"nothing left to train: its {found.budget} trials are stored (--trials N "
                                      "runs more)"),
                f"a trial: about {clock(found.trial_seconds)} ({timed})",
                f"expected time: about {clock(found.seconds)} on {count} worker{'' if count == 1 else 's'}",
                f"workers: {where}"])


def live_export(db: str | None, uri: str | None) -> Any:
    """With an MLflow URI (--mlflow or the file's [tracking] mlflow), what logs each trial there as it ends;
    None without one."""
    if uri is None:
        return None
    from pipeline.report.export_mlflow import LiveExport

    return LiveExport(db, uri, lambda problem: print_line(stderr, f"warning: {problem}", markup=False,
                                                          highlight=False))


@app.command()
def report(
    studies: Annotated[Optional[list[str]], typer.Argument(help="Study names (default: all in the database).")]
    = None,
    db: Db = None,
    format_: Annotated[Optional[str], typer.Option("--format", help=(
        f"One of {', '.join(FORMATS)} (default: what --out's extension names, else table); "
        "html is one complete, self-contained page: every table of the studies (best, trials, importance, "
        "evaluations, a campaign's verdict) and every picture, with a table of contents."))] = None,
    out: Annotated[Optional[Path], typer.Option(
        help="Write to this file instead of the terminal (never over a database).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Let --out and --plots replace existing files.")] = False,
    list_trials: Annotated[bool, typer.Option("--all-trials", help="Also list every trial of each study.")]
    = False,
    plots: Annotated[Optional[Path], typer.Option(help=(
        "Also write each study's pictures as PNG files into this folder: trace, parameter maps, "
        "curves, per class, and the Pareto front of a study with several objectives."))] = None,
    log_file: Annotated[Path, typer.Option(
        help="Where Ax's messages go while pictures are drawn (default: discarded; a report writes nothing "
             "it was not asked for).")] = Path(os.devnull),
    compare: Annotated[bool, typer.Option("--compare", help="The evaluations (robust-tune evaluate): mean and 95% "
                                                            "interval over seeds per variant, paired differences.")]
    = False,
    baseline: Annotated[Optional[str], typer.Option(
        help="With --compare: the variant differences are taken to (default erm, when evaluated).")] = None,
    verdict: Annotated[Optional[str], typer.Option(
        help="A campaign's verdict (robust-tune compare), from what is stored: every method against tuned ERM.")]
    = None,
    wide: Wide = False,
    columns: Annotated[Optional[str], typer.Option(
        help="The terminal's best and trials tables show only these columns, in this order: names as in "
             "--format csv's header, joined with commas (for example \"method,test acc,worst class\").")] = None,
) -> None:
    """Print the best hyper-parameters of each method.

    The best combination of hyper-parameters per (data set, network, method), paper-style."""
    from pipeline.report.study_tables import (best_table, compare_table, importance_table, model_pick_table,
                                              pareto_tables, trials_table)
    from pipeline.store import Store, sqlite_file

    fmt = output_format(format_, out)
    store = Store(db, create=False)
    if out is not None:
        check_output(out, force, sqlite_file(store.url))  # before drawing: a refused --out wastes no work
        check_extension(out)
    if plots is not None:
        check_folder(plots, "--plots")
    if columns is not None and (verdict is not None or compare or fmt != "table" or out is not None):
        raise UserError("--columns picks the columns of the terminal's best and trials tables; it goes without "
                        "--verdict, --compare, --format and --out (files keep every column)")
    if verdict is not None:
        return _report_verdict(store, verdict, studies, compare, list_trials, fmt, out, force, plots, wide)
    if not store.all_studies():
        raise UserError(f"no studies in {store.shown} yet; run one with `robust-tune run STUDY.toml`")
    if baseline and not compare:
        raise UserError("--baseline goes with --compare")
    if fmt == "html":  # one complete page: every table there is for the studies, and every picture
        from pipeline.report.report_page import page_pictures, page_tables

        tables, verdicts = page_tables(store, studies, baseline, compare)
        started = time.perf_counter()
        pictures = page_pictures(store, studies, verdicts, log_file)
    else:
        best = best_table(store, studies)
        tables = ([compare_table(store, studies, baseline)] if compare else [best, *pareto_tables(store, studies)])
        if not compare and (picks := model_pick_table(store, studies)) is not None:
            tables.append(picks)
        if not compare and (importance := importance_table(store, studies)) is not None:
            tables.append(importance)
        trials = ([trials_table(store, s.name) for s in store.all_studies() if not studies or s.name in studies]
                  if list_trials else [])
        tables += trials
        pictures = []
        if plots is not None:
            from pipeline.report.plots import draw, load_studies  # matplotlib and Ax only when drawing

            started = time.perf_counter()
            pictures = draw(load_studies(store, studies, log_file))
    if plots is not None:
        from pipeline.report.plots import write_pictures

        written = write_pictures(pictures, plots, force, sqlite_file(store.url))
        stderr.print(f"wrote {len(written)} pictures to {plots} in {time.perf_counter() - started:.1f} s")
    from pipeline.report.report_page import page_images, page_source

    chosen: list[ReportTable] = []
    if columns is not None:
        tables, chosen = _pick_columns(tables, [best, *trials], columns)
    print_tables(tables, fmt, out, force, sqlite_file(store.url), page_images(pictures) or None, wide, chosen,
                 page_source(store.shown))


def _pick_columns(tables: list[ReportTable], pickable: list[ReportTable],
                  names_text: str) -> tuple[list[ReportTable], list[ReportTable]]:
    """`tables` with the `pickable` ones (best, trials) showing only the columns named in `names_text` (a table
    with none of them is shown whole), and the tables picked; a name no pickable table has is a UserError."""
    names = [name.strip() for name in names_text.split(",") if name.strip()]
    known = list(dict.fromkeys(header for t in pickable for header in t.headers))
    if not names:
        raise UserError(f"--columns names no column; known: {', '.join(known)}")
    if unknown := [name for name in names if name not in known]:
        raise UserError(f"unknown column {unknown[0]!r} for --columns; known: {', '.join(known)}")
    shown, chosen = [], []
    for t in tables:
        picked = pick_columns(t, names) if any(t is p for p in pickable) else None
        shown.append(t if picked is None else picked)
        if picked is not None:
            chosen.append(picked)
    return shown, chosen


def _report_verdict(store: Store, name: str, studies: list[str] | None, compare: bool, list_trials: bool, fmt: str,
                    out: Path | None, force: bool, plots: Path | None, wide: bool) -> None:
    """`report --verdict CAMPAIGN`: the verdict tables (and picture) from what is stored; nothing runs."""
    from pipeline.store import sqlite_file
    from pipeline.compare.verdict import take_verdict
    from pipeline.report.report_page import page_images, page_source
    from pipeline.report.verdict_report import verdict_tables

    if studies or compare or list_trials:
        raise UserError("--verdict reports one campaign; give no study names, --compare or --all-trials with it")
    parent, _, task = name.partition(".")  # CAMPAIGN.TASK: one task's verdict alone
    found = store.campaign(parent) if task else None
    campaign = found.task(task) if found is not None and task in found.tasks else store.require_campaign(name)
    if campaign.tasks:  # several tasks: each task's verdict, then the verdict across them
        from pipeline.compare.across_tasks import take_across_tasks
        from pipeline.report.verdict_report import across_tables

        across = take_across_tasks(store, campaign)
        tables = across_tables(across)
    else:
        result = take_verdict(store, campaign)
        tables = verdict_tables(result)
    images = None
    if plots is not None or fmt == "html":
        from pipeline.report.plots import across_pictures, budget_picture, verdict_picture, write_pictures

        pictures = (across_pictures(across) if campaign.tasks
                    else [p for p in (verdict_picture(result), budget_picture(result)) if p is not None])
        if plots is not None:
            written = write_pictures(pictures, plots, force, sqlite_file(store.url))
            stderr.print(f"wrote {len(written)} picture(s) to {plots}")
        images = page_images(pictures)
    print_tables(tables, fmt, out, force, sqlite_file(store.url), images, wide, source=page_source(store.shown))


studies_app = typer.Typer(help="List the studies in the database.\n\n`studies delete NAME` removes one.")
app.add_typer(studies_app, name="studies")


@studies_app.callback(invoke_without_command=True)
def list_studies(ctx: typer.Context, db: Db = None, wide: Wide = False, format_: TablesFormat = "table") -> None:
    """The studies in the database and how far each has come."""
    if ctx.invoked_subcommand is None:
        fmt = chosen_format(format_, TABLE_FORMATS)
        from pipeline.report.study_tables import studies_table
        from pipeline.store import Store

        print_tables([studies_table(Store(db, create=False))], fmt, None, wide=wide)


@studies_app.command("delete")
def delete_study(
    name: Annotated[str, typer.Argument(help="The study to delete.")],
    db: Db = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    log_file: LogFile = DEFAULT_LOG_FILE,
) -> None:
    """Delete one study and Ax's records of it.

    Its trials and curves go with it. Other studies are not touched."""
    from pipeline.search.forget import delete_study as forget
    from pipeline.store import Store

    log_file = log_file_for(log_file, db)  # checked: its folder can hold it
    store = Store(db, create=False)
    study = store.require_study(name)
    count = len(store.trials(study.id))
    if not yes and not typer.confirm(f"Delete study {name} and its {count} trial(s) from {store.shown}?"):
        stderr.print("nothing was deleted")
        raise typer.Exit(1)
    store = Store(db, create=False, write=True)  # upgrades a database written by an earlier version
    print_upgrade(store.upgraded)
    forget(store, name, log_file)
    stdout.print(f"deleted study {name} and its {count} trial(s)")
