"""`robust-tune evaluate` and `best`: a study's best configuration re-trained over seeds, and printed for reuse."""
from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from cli.app import app
from cli.interrupts import CtrlC, ctrl_c_kept, print_resume, resume_command
from cli.options import (DEFAULT_LOG_FILE, chosen_format, chosen_workers, Db, Device, LogFile, Precision, Scheduler,
                         TABLE_FORMATS, TablesFormat, Threads, TrialsPerGpu, typed, Wide, Workers)
from cli.render import (print_file_text, print_image_line, print_line, print_progress, print_tables, print_upgrade,
                        stderr, stdout, update_batch_bars)
from pipeline.config import DEFAULT_TRIALS_PER_GPU, TrainConfig, check_precision
from pipeline.errors import ServerLost, UserError
from pipeline.library_logs import log_file_for
from pipeline.params import parse_assignment
from pipeline.spec.study_config import DEFAULT_PICK, StudyConfig
from pipeline.report.tables import percent

if TYPE_CHECKING:  # the store imports SQLAlchemy: each command that reads imports it
    from pipeline.store import StudyRecord, TrialRecord


# The batch bar of a run trained in this process names what it counts: training batches or an evaluation.
BATCH_LABELS = {"train": "batches  ", "val": "eval val ", "test": "eval test"}


class EvaluationView:
    """Live bars (runs, epochs) on a terminal; one plain line per run otherwise (a log, CI)."""

    def __init__(self, bars: Progress | None, ctrl_c: CtrlC, named_trial: bool = False) -> None:
        self.bars, self.ctrl_c = bars, ctrl_c
        self.named_trial = named_trial  # --trial K: not the best trial
        self.running: dict[int, str] = {}  # run number -> "VARIANT, seed S", for the line after a Ctrl-C
        self.stored = 0  # runs stored by this call
        self.name_study = False  # several studies' runs at once (a campaign on workers): each line names its study
        if bars is not None:
            self.runs = bars.add_task("runs     ", total=None, status="")
            self.epochs = bars.add_task("epochs   ", total=None, status="")
            self.batches = bars.add_task("batches  ", total=None, status="")

    def on_event(self, event: Any) -> None:
        from pipeline.compare.evaluate import EvaluationStarted, RunEnded, RunLost, RunStarted
        from pipeline.training.trainer import BatchEnd, EpochEnd
        from pipeline.search.trial import TrialEpoch, TrialHandedBack

        self.ctrl_c.check()
        line = None
        if isinstance(event, EvaluationStarted):
            to_run = event.runs - event.stored - event.shared
            shared = f", {event.shared} stored for another study (copied, not trained again)" if event.shared else ""
            which = f"trial {event.trial_index}" if self.named_trial else f"best trial {event.trial_index}"
            line = (f"evaluate {event.study} ({which}): {event.runs} run(s), "
                    f"{event.stored} already stored{shared}, {to_run} to run")
            if self.bars is not None:  # the runs' count from the start, not `0/?`
                self.bars.update(self.runs, total=event.runs - event.stored)
        elif isinstance(event, RunStarted):
            self.running[event.number] = f"{event.variant}, seed {event.seed}"
        if isinstance(event, RunStarted) and self.bars is not None:
            self.bars.update(self.runs, total=event.total, status=f"{event.variant}, seed {event.seed}")
            self.bars.reset(self.epochs, total=event.epochs, status="")
            self.bars.reset(self.batches, description=BATCH_LABELS["train"])  # its count as the last run's
        elif isinstance(event, BatchEnd) and self.bars is not None:  # a large split's evaluation counts its chunks
            update_batch_bars(self.bars, self.epochs, self.batches, event, BATCH_LABELS)
        elif isinstance(event, (EpochEnd, TrialEpoch)) and self.bars is not None:
            loss = f"loss {event.train_loss:.3f}" if isinstance(event, EpochEnd) else f"run {event.trial_index}"
            self.bars.update(self.epochs, completed=event.epoch, status=loss)
        elif isinstance(event, RunLost):
            line = f"{event.variant}, seed {event.seed}: {event.reason}; it runs again"
        elif isinstance(event, TrialHandedBack):
            line = (f"run {event.trial_index}: its worker {event.worker} left the cluster; it trains again from its "
                    f"start on worker {event.to}")
        elif isinstance(event, RunEnded):
            self.running.pop(event.number, None)
            self.stored += 1
            if self.bars is not None:
                self.bars.update(self.runs, total=event.total, advance=1)
            how = (f"shared with study {event.shared_with} (not trained again)" if event.shared_with
                   else f"{event.seconds:.1f} s")
            line = (f"run {event.number} of {event.total}: {event.variant}, seed {event.seed}: "
                    f"test acc {percent(event.test_accuracy)}%, {how}")
        if line:
            study = getattr(event, "study", "")
            named = self.name_study and study and not isinstance(event, EvaluationStarted)  # that one names it
            print_progress(stderr, f"{study}: {line}" if named else line, markup=False, highlight=False)


Pick = Annotated[str, typer.Option(
    help="Which trial a study recommends: observed (the best observed) or model (the trial its Gaussian process "
         "predicts best, less flattered by a lucky draw; see the report's model's-pick table).")]


@app.command()
def evaluate(
    ctx: typer.Context,
    study: Annotated[str, typer.Argument(help="A study in the database.")],
    db: Db = None,
    seeds: Annotated[int, typer.Option(help="Train on seeds 0..N-1.")] = 5,
    pick: Pick = DEFAULT_PICK,
    trial: Annotated[Optional[int], typer.Option(
        help="Re-train this trial instead of the best one (e.g. another trade-off of a Pareto set).")] = None,
    against: Annotated[Optional[str], typer.Option(
        help="Baselines, comma-separated, each METHOD or METHOD:name=value[:name=value...] (e.g. "
             "erm,cb:cb_power=0.5), at every setting it shares with the best trial and its own values over "
             "them; a baseline with own values is its own variant, named by them.")] = None,
    param: Annotated[Optional[list[str]], typer.Option(
        "--baseline-param", metavar="NAME=VALUE",
        help="A parameter of every --against baseline as name=value (repeat; not of the study's configuration, "
             "which --vary moves); the rest are its defaults.")]
    = None,
    vary: Annotated[Optional[str], typer.Option(
        help="Re-train the best configuration with one parameter moved: NAME=V1,V2,...")] = None,
    resplit: Annotated[bool, typer.Option(
        "--resplit", help="Draw the split again with each seed: seed k on split seed S + k, S the study's own split "
                          "seed, as a campaign pairs them (the validation carving and, where drawn, the rare-class "
                          "examples kept; the whole split when the data set has no fixed test set).")]
    = False,
    drop: Annotated[Optional[str], typer.Option(
        help="Remove one variant's stored runs of the study instead (asks first), so it can run again.")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="With --drop: do not ask for confirmation.")] = False,
    device: Device = "auto",
    precision: Precision = "auto",
    threads: Threads = None,
    workers: Workers = None,
    scheduler: Scheduler = None,
    trials_per_gpu: TrialsPerGpu = DEFAULT_TRIALS_PER_GPU,
    log_file: LogFile = DEFAULT_LOG_FILE,
    wide: Wide = False,
    format_: TablesFormat = "table",
) -> None:
    """Re-train a study's best over seeds, against baselines.

    Its best configuration is re-trained on several seeds next to the baselines; only missing runs run."""
    from pipeline.compare.evaluate import pareto_note, plan_evaluation, run_evaluation
    from pipeline.report.study_tables import compare_table
    from pipeline.store import Store, shown_database

    fmt = chosen_format(format_, TABLE_FORMATS)
    if drop is not None:
        if (against or param or vary or resplit or threads is not None or trial is not None
                or any(typed(ctx, name) for name in ("workers", "scheduler"))):  # not from the environment
            raise UserError("--drop goes alone: give it with the study (and --db, --yes) only")
        _drop(study, db, drop, yes)
        return
    log_file = log_file_for(log_file, db)  # checked: its folder can hold it
    stored = Store(db, create=False)
    plan = plan_evaluation(stored, study, seeds, (against or "").split(","), vary,
                           dict(parse_assignment(text) for text in param or []), resplit,
                           threads, pick, trial)  # bad input changes nothing
    if trial is None and (note := pareto_note(stored, plan.study, plan.trial_index)):
        print_line(stderr, f"note: {note}", markup=False, highlight=False)
    check_precision(precision)
    print_image_line(plan.study.study.data)  # the study's, as stored
    from pipeline.search.parallel import trial_runner  # torch: after the plan, so bad input is refused at once

    workers = chosen_workers(ctx, workers, scheduler)
    runner = trial_runner(workers, scheduler, trials_per_gpu, device, str(log_file))  # bad options: exit 2 here
    store = Store(db, on_reconnect=lambda event: print_line(stderr, event.message, markup=False, highlight=False))
    print_upgrade(store.upgraded)  # a database written by an earlier version was upgraded
    bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[status]}"), console=stderr, transient=True) if stderr.is_terminal else None
    view = None
    resume = resume_command(ctx, {"db": shown_database})
    try:
        with bars or nullcontext(), ctrl_c_kept() as ctrl_c:
            view = EvaluationView(bars, ctrl_c, named_trial=trial is not None)
            ran = run_evaluation(store, plan, device, view.on_event, precision, runner)
    except KeyboardInterrupt:
        print_resume(stderr, f"interrupted: {_stopped_runs(view, study)}; resume with", resume)
        raise typer.Exit(130)
    except ServerLost as lost:  # cli/main.py prints it in one line, exit code 1
        raise ServerLost(f"{lost}; {_stopped_runs(view, study)}; resume with {resume} once it is back") from None
    if not ran:  # stdout holds only the table in a file format
        (stdout if fmt == "table" else stderr).print(f"study {study}: every run is already stored; nothing was "
                                                     "changed.")
    print_tables([compare_table(store, [study])], fmt, None, wide=wide)


def _stopped_runs(view: EvaluationView | None, study: str) -> str:
    """What a Ctrl-C or a lost server stopped in an evaluate: the runs in training, which run again, and what is
    kept."""
    if view is None:
        return f"evaluate of study {study} was stopped before any run; nothing was stored"
    kept = f"the {view.stored} run(s) stored by this call are kept" if view.stored else "nothing was stored"
    if not view.running:
        return f"evaluate of study {study} was stopped between runs; {kept}"
    stopped = "; ".join(f"run {number} ({what})" for number, what in sorted(view.running.items()))
    return f"evaluate of study {study} stopped {stopped}, which will run again; {kept}"


def _drop(study: str, db: str | None, variant: str, yes: bool) -> None:
    """Remove one variant's stored runs after confirmation; refused or unanswered, nothing changes."""
    from pipeline.compare.evaluate import drop_variant
    from pipeline.store import Store

    store = Store(db, create=False)
    record = store.require_study(study)
    runs = [e for e in store.evaluations(record.id) if e.variant == variant]
    if not runs:
        known = ", ".join(dict.fromkeys(e.variant for e in store.evaluations(record.id))) or "none"
        raise UserError(f"study {study} has no evaluated variant {variant!r}; evaluated: {known}")
    seeds = ", ".join(str(e.seed) for e in sorted(runs, key=lambda e: e.seed))
    if not yes and not _stdin_is_terminal():
        print_line(stderr, f"nothing was dropped: --drop asks first, and there is no terminal to answer; "
                   f"add --yes to drop variant {variant} without asking", markup=False)
        raise typer.Exit(1)
    if not yes and not typer.confirm(f"Drop variant {variant} of study {study}: {len(runs)} run(s) (seeds {seeds}) "
                                     f"from {store.shown}?"):
        stderr.print("nothing was dropped")
        raise typer.Exit(1)
    store = Store(db, create=False, write=True)  # upgrades a database written by an earlier version
    print_upgrade(store.upgraded)
    dropped = drop_variant(store, study, variant)
    print_line(stdout, f"dropped variant {variant} of study {study}: {dropped} run(s); evaluate runs it again when "
               "asked", markup=False)


def _stdin_is_terminal() -> bool:
    """Whether a person can answer a question on stdin."""
    return sys.stdin is not None and sys.stdin.isatty()


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    return repr(value)


def _goal_lines(stored: StudyConfig) -> list[str]:
    """A study file's objective (or objectives) and constraints, as the study has them."""
    lines = ([f"objectives = [{', '.join(map(_toml_value, stored.objectives))}]"] if stored.multi_objective
             else [f"objective = {_toml_value(stored.objective)}"])
    if stored.constraints:
        lines.append(f"constraints = [{', '.join(map(_toml_value, stored.constraints))}]")
    return lines


def _study_toml(study: StudyRecord, trial: TrialRecord, config: TrainConfig) -> str:
    """The best configuration as a study file that `train --study-file` trains as it is: the study's data (only the
    fields it reads), network and method, every parameter fixed at the trial's value; no search, as nothing is
    left to search."""
    stored = study.study
    objective = stored.objective
    tuned = ", ".join(stored.search) or "none"
    lines = [f"# The best configuration of study {study.name}: trial {trial.trial_index}, "
             f"{objective} {percent((trial.metrics or {}).get(objective))}%.",
             f"# Every parameter is fixed (the study tuned {tuned}).",
             "# Train it with `robust-tune train --study-file FILE`.",
             f"name = {_toml_value(study.name + '-best')}", *_goal_lines(stored), f"seed = {stored.seed}", "",
             "[data]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in stored.data.used().items()]
    lines += ["", "[model]", f"backbone = {_toml_value(config.backbone)}", f"weights = {_toml_value(config.weights)}",
              "", "[method]", f"name = {_toml_value(config.method)}", "", "[params]"]
    lines += [f"{name} = {_toml_value(value)}" for name, value in config.params.items()]
    return "\n".join(lines) + "\n"


@app.command()
def best(
    study: Annotated[str, typer.Argument(help="A study in the database.")],
    db: Db = None,
    format_: Annotated[str, typer.Option("--format", help="toml (a study file fixing every parameter: "
                                                          "`train --study-file FILE` trains it) or json (the train "
                                                          "settings).")] = "toml",
    trial: Annotated[Optional[int], typer.Option(help="This trial instead of the best one.")] = None,
    pick: Pick = DEFAULT_PICK,
) -> None:
    """Print a study's best configuration for reuse.

    Every parameter is included."""
    from pipeline.compare.evaluate import pareto_note, study_and_trial, trial_config
    from pipeline.store import Store

    chosen_format(format_, ("toml", "json"))
    store = Store(db, create=False)
    record, chosen = study_and_trial(store, study, trial, pick)
    if trial is None and (note := pareto_note(store, record, chosen.trial_index)):
        print_line(stderr, f"note: {note}", markup=False, highlight=False)
    config = trial_config(record, chosen)
    if format_ == "json":
        print(json.dumps({"study": record.name, "trial_index": chosen.trial_index,
                          "objective": record.study.objective, "objectives": list(record.study.all_objectives),
                          "constraints": list(record.study.constraints), "metrics": chosen.metrics,
                          "train": {k: v for k, v in config.to_dict().items() if k != "device"}}, indent=2))
    else:
        print_file_text(_study_toml(record, chosen, config))
