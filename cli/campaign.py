"""`robust-tune compare`: every method of a campaign tuned on equal footing, re-trained over seeds, and the
verdict against tuned ERM."""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.text import Text

from cli.app import app
from cli.evaluate import EvaluationView
from cli.interrupts import CtrlC, ctrl_c_kept, print_resume, resume_command
from cli.options import (DEFAULT_LOG_FILE, chosen_workers, Db, Device, LogFile, Mlflow, new_database, plan_workers,
                         Precision, Scheduler, Threads, TrialsPerGpu, Wide, Workers, chosen_format, TABLE_FORMATS,
                         TablesFormat)
from cli.render import print_image_line, print_plan, print_progress, print_tables, print_upgrade, stderr, stdout, \
    terminal_width
from cli.study import StudyView, clock, live_export
from pipeline.spec.campaign_config import APART, REFERENCE, SEED_STRIDE
from pipeline.config import DEFAULT_TRIALS_PER_GPU
from pipeline.errors import ServerLost
from pipeline.library_logs import log_file_for


def round_line(event: Any) -> str:
    """`round 2: erm, cb up to 20 pairs (30 runs, about 4:00 of training)`, or with rounds of searches `round 2:
    erm, cb: 5 searches of 7 pairs (4 new searches, 38 runs, about 4:00 of training)`: what the next round
    trains, and how long that takes by the trials and runs so far."""
    took = "" if event.seconds is None else f", about {clock(event.seconds)} of training"
    task = "" if "." not in event.campaign else f"{event.campaign}: "
    runs = f"{event.runs} run{'' if event.runs == 1 else 's'}"
    if event.new_searches or event.searches > 1:
        new = f"{event.new_searches} new search{'' if event.new_searches == 1 else 'es'}, " if event.new_searches \
            else ""
        return (f"{task}round {event.number + 1}: {', '.join(event.methods)}: {event.searches} "
                f"search{'' if event.searches == 1 else 'es'} of {event.pairs} pairs ({new}{runs}{took})")
    return f"{task}round {event.number + 1}: {', '.join(event.methods)} up to {event.pairs} pairs ({runs}{took})"


def _pairs(event: Any) -> str:
    """How a campaign's confirmation runs take their seeds and splits (a CampaignStarted), in words."""
    base, block = event.split_seed, f"{SEED_STRIDE} r + " if event.replicate_seeds == APART else ""
    one_split = f"every run on the search's split (split seed {base})"
    if event.replicates == 1:
        return f"seed k on split seed {base} + k" if event.resplit else one_split
    if not event.resplit:
        return f"{one_split}, search r's pair k on seed {block}k"
    if event.replicate_seeds == APART:
        return f"search r's pair k on seed {block}k and split seed {base} + {block}k"
    return f"search r's seed k on split seed {base} + r + k"


def _design(event: Any) -> str:
    """A campaign's searches and pairs (a CampaignStarted), in words."""
    searches = f" x {event.replicates} searches" if event.replicates > 1 else ""
    if event.max_replicates > event.replicates:
        return (f"{event.budget} trials each{searches}, each search re-trained on {event.seeds} pairs (up to "
                f"{event.max_seeds}, as the first searches plan); more searches in rounds planned for power, up to "
                f"{event.max_replicates}")
    rounds = f", more in rounds planned for power up to {event.max_seeds}" if event.max_seeds > event.seeds else ""
    return f"{event.budget} trials each{searches}, then {event.seeds} pairs each{rounds}"


def work_lines(work: Any) -> list[str]:
    """What a campaign has left to train and about how long it takes (a CampaignWork), before it starts: a line
    each, short enough for 80 columns."""
    if not (work.trials or work.runs or work.more_runs):
        return []
    counts = [f"{work.trials} trial{'' if work.trials == 1 else 's'}" if work.trials else "",
              f"{work.runs} re-training run{'' if work.runs == 1 else 's'}" if work.runs else ""]
    more = [f"{work.more_trials} more trials" if work.more_trials else "",
            f"{work.more_runs} more runs" if work.more_runs else ""]
    lines = ["left to train: " + (", ".join(c for c in counts if c) or "no trial, no first-round run")
             + (f"; later rounds up to {' and '.join(m for m in more if m)}" if any(more) else "")]
    if (seconds := work.seconds()) is None:
        return [*lines, "expected time: known once the first trials end (none is stored yet)"]
    workers = f"{work.workers} worker{'' if work.workers == 1 else 's'}"
    stored = f"{work.measured} stored trial{'' if work.measured == 1 else 's'} and runs" if work.measured else ""
    probe = "a timing probe of each method" if work.probed else ""
    sources = " and ".join(source for source in (stored, probe) if source)
    lines.append(f"expected time: about {clock(seconds)} on {workers}, from {sources}")
    if work.more_runs and (most := work.most_seconds()) is not None:
        lines.append(f"at most {clock(most)} if every later round runs" + (" up to max_replicates searches and"
                                                                           if work.more_trials else "")
                     + " up to its max_seeds pairs")
    return lines


class CampaignClock:
    """The campaign's time left, on its live view: the work left when it started (a CampaignWork), counted down as
    trials and runs end and grown as rounds are planned and ranges widen, at the pace of this call so far (the
    stored trials' estimate until a trial or run of this call ends)."""

    def __init__(self, work: Any) -> None:
        self.work, self.started = work, time.monotonic()
        self.trials, self.runs = work.trials, work.runs  # left
        self.done = 0.0  # the weight of the trials and runs this call trained
        self.last = self.started  # when the last of them ended
        self.weights = work.unit_seconds() or (1.0, 1.0)  # a trial's and a run's estimated seconds
        self.budgets: dict[str, int] = {}  # study -> its budget, to count what a widening adds

    def on_event(self, event: Any, searching: str) -> None:
        from pipeline.compare.campaign import CampaignRound
        from pipeline.compare.evaluate import RunEnded
        from pipeline.search.study import RangesWidened, StudyStarted, TrialEnded
        from pipeline.store import TrialStatus

        if isinstance(event, StudyStarted):
            self.budgets[event.name] = event.budget
        elif isinstance(event, RangesWidened):
            study = event.study or searching
            self.trials += max(0, event.budget - self.budgets.get(study, event.budget))
            self.budgets[study] = event.budget
        elif isinstance(event, TrialEnded) and event.status != TrialStatus.INTERRUPTED:
            self.trials, self.done, self.last = max(0, self.trials - 1), self.done + self.weights[0], time.monotonic()
        elif isinstance(event, RunEnded):
            self.runs = max(0, self.runs - 1)
            if not event.shared_with:  # a copy takes no time
                self.done, self.last = self.done + self.weights[1], time.monotonic()
        elif isinstance(event, CampaignRound) and event.number > 0:  # a later round: the first ones are counted
            self.runs += event.runs
            self.trials += event.new_searches * max(self.budgets.values(), default=0)

    def line(self) -> Text:
        """`campaign NAME: 24 trials, 10 runs to go; 3:12 elapsed, about 5:40 left`, counting down between ends;
        the time left is left out until it is known."""
        now = time.monotonic()
        left = self.trials * self.weights[0] + self.runs * self.weights[1]
        if self.done:  # the pace up to the last end, less the time since
            eta = f", about {clock(max(0.0, (self.last - self.started) * left / self.done - (now - self.last)))} left"
        elif (seconds := self.work.seconds()) is not None:
            eta = f", about {clock(max(0.0, seconds - (now - self.started)))} left"
        else:
            eta = ""
        trials, runs = (f"{n} {what}{'' if n == 1 else 's'}" for n, what in ((self.trials, "trial"),
                                                                           (self.runs, "run")))
        return Text(f"campaign {self.work.name}: {trials}, {runs} to go; {clock(now - self.started)} elapsed{eta}")


class CampaignView:
    """A line for each stage of the campaign, the running study's live view under it on a terminal; plain
    lines in a log."""

    def __init__(self, ctrl_c: CtrlC, live: Any = None, estimate: Any = None) -> None:
        self.ctrl_c = ctrl_c
        self.live = live  # with MLflow: each trial's run logged once the trial is stored
        # a CampaignWork timed by a probe before the campaign started: its estimate where nothing stored says one
        self.estimate = estimate
        self.searching = ""  # the study being searched
        self.header = Text("")
        self.study: StudyView | None = None
        self.together: dict[str, StudyView] = {}  # on workers: each study searched at once, by name
        self.searched_together = 0  # of those, the ones that finished
        self.clock: CampaignClock | None = None  # the campaign's time left, once it says its work
        self.retraining = False  # re-training in this process: the runs' bars show under the header
        self.bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[status]}"), console=stderr)
        self.evaluation = EvaluationView(self.bars, ctrl_c)

    def __rich__(self) -> Group:
        top = [self.clock.line()] if self.clock is not None else []
        if self.together:
            return Group(*top, self.together_line(), *[line for view in self.together.values()
                                                       if (line := self.study_line(view)) is not None])
        below = [self.study] if self.study is not None else [self.bars] if self.retraining else []
        return Group(*top, self.header, *below)

    def together_line(self) -> Text:
        running = sum(len(view.running) for view in self.together.values())
        left = len(self.together) - self.searched_together
        return Text(f"searching {left} stud{'y' if left == 1 else 'ies'} at once ({running} running "
                    f"trial{'' if running == 1 else 's'})", no_wrap=True, overflow="ellipsis")

    @staticmethod
    def study_line(view: StudyView) -> Text | None:
        """A study searched beside others: one line, while it runs trials."""
        if not view.running:
            return None
        trials = ", ".join(f"{index}" + (f" epoch {trial['epoch']}/{trial['epochs']}" if trial["epoch"] else "")
                           for index, trial in sorted(view.running.items()))
        best = f"; {view.best.split(' (')[0]}" if view.best else ""
        return Text(f"  {view.name}: {view.ran}/{view.budget} ran; trial {trials}{best}", no_wrap=True,
                    overflow="ellipsis")

    def on_event(self, event: Any) -> None:
        from pipeline.compare.campaign import (CampaignRound, CampaignStage, CampaignStarted, CampaignTogether,
                                               MethodSetAside, TasksAdded)
        from pipeline.compare.workload import CampaignWork
        from pipeline.compare.evaluate import EvaluationStarted, RunEnded
        from pipeline.store import Reconnected, SchemaUpgraded
        from pipeline.search.studies import StudiesStarted, StudyFinished
        from pipeline.search.study import StudyStarted, TrialEnded
        from pipeline.store import TrialStatus

        self.ctrl_c.check()
        if self.live is not None and isinstance(event, TrialEnded) and event.status != TrialStatus.INTERRUPTED:
            self.live.study(event.study or self.searching)
        if self.clock is not None:
            self.clock.on_event(event, self.searching)
        if isinstance(event, CampaignWork):
            if event.seconds() is None and self.estimate is not None and (event.trials, event.runs) == (
                    self.estimate.trials, self.estimate.runs):  # the live estimate starts from the probe
                event = replace(self.estimate, workers=event.workers, more_runs=event.more_runs)
            self.clock = CampaignClock(event)
            for work in work_lines(event):
                print_progress(stderr, work, markup=False, highlight=False)
        elif isinstance(event, CampaignTogether):
            self.header, self.study, self.together, self.searched_together = Text(""), None, {}, 0
            self.retraining = False
            if event.stage == "search":
                done = f" ({event.done} searched already)" if event.done else ""
                line = f"search {len(event.studies)} studies at once{done}: {', '.join(event.studies)}"
                self.together = {name: StudyView(None) for name in event.studies}
            else:
                line = (f"re-train {len(event.studies)} studies at once on seeds 0-{event.seeds - 1}: "
                        f"{', '.join(event.studies)}")
            self.evaluation.name_study = True
            print_progress(stderr, line, markup=False, highlight=False)
        elif isinstance(event, StudiesStarted):
            for waiting in self.together.values():
                waiting.slots = max(1, event.capacity)
            print_progress(stderr, f"{len(event.studies)} studies share {event.capacity} worker(s)", markup=False,
                       highlight=False)
        elif isinstance(event, StudyFinished):
            self.searched_together += 1
        elif self.together and (view := self.together.get(event.name if isinstance(event, StudyStarted)
                                                          else getattr(event, "study", ""))) is not None:
            said = view.on_event(event)
            if said and not isinstance(event, StudyStarted):  # each line names its study (widenings come several)
                said = "\n".join(f"{view.name}: {part}" for part in said.splitlines())
            if said:
                print_progress(stderr, said, markup=False, highlight=False)
        elif isinstance(event, SchemaUpgraded):
            print_upgrade(event.message)
        elif isinstance(event, Reconnected):
            print_progress(stderr, event.message, markup=False, highlight=False)
        elif isinstance(event, TasksAdded):
            added, kept = ", ".join(event.added), ", ".join(event.kept)
            kept_as = f"tasks {kept} kept as they are" if len(event.kept) > 1 else f"task {kept} kept as it is"
            print_progress(stderr, f"campaign {event.name} grows: task{'s' if len(event.added) > 1 else ''} {added} "
                       f"added; stored {kept_as}", markup=False, highlight=False)
        elif isinstance(event, CampaignStarted):
            task = "" if event.task is None else f", task {event.task} ({event.number}/{event.tasks})"
            print_progress(stderr, f"campaign {event.name}{task}: {len(event.methods)} methods "
                           f"({', '.join(event.methods)}), {_design(event)}", highlight=False)
            print_progress(stderr, f"confirmation runs: {_pairs(event)}", highlight=False)
            if event.warning:
                print_progress(stderr, event.warning, markup=False, highlight=False)
            print_image_line(event.data)
        elif isinstance(event, CampaignStage):
            if event.stage == "search":
                self.searching = event.study
                line = f"[{event.number}/{event.total}] search {event.method} ({event.study})"
                self.study, self.retraining = StudyView(None), False
            else:
                line = f"[{event.number}/{event.total}] re-train {event.method} on seeds 0-{event.seeds - 1}"
                self.study, self.retraining = None, True
            self.header = Text(line)
            print_progress(stderr, line, markup=False, highlight=False)
        elif isinstance(event, CampaignRound):
            print_progress(stderr, round_line(event), markup=False, highlight=False)
        elif isinstance(event, MethodSetAside):
            print_progress(stderr, f"{event.method} is set aside: {event.reason}", highlight=False)
        elif isinstance(event, EvaluationStarted):
            if event.stored < event.runs:
                self.evaluation.on_event(event)
        elif isinstance(event, RunEnded) or self.retraining or self.evaluation.name_study:
            self.evaluation.on_event(event)  # runs, epochs and batches (bars only for runs in this process)
        elif self.study is not None:
            said = self.study.on_event(event)
            if said:  # above the live view on a terminal, the log's line otherwise
                print_progress(stderr, said, markup=False, highlight=False)


@app.command()
def compare(
    ctx: typer.Context,
    campaign_file: Annotated[Path, typer.Argument(help="A campaign file (TOML), e.g. studies/digits-campaign.toml.")],
    db: Db = None,
    device: Device = "auto",
    precision: Precision = "auto",
    threads: Threads = None,
    replicates: Annotated[Optional[int], typer.Option(
        help="Fix each method's whole searches at this many search seeds, as the file's `replicates` (1: one "
             "search each, a verdict about those configurations); default: the file's, else a pilot of 3 and "
             "rounds of more up to `max_replicates` (10).")] = None,
    workers: Workers = None,
    scheduler: Scheduler = None,
    trials_per_gpu: TrialsPerGpu = DEFAULT_TRIALS_PER_GPU,
    mlflow: Mlflow = None,
    log_file: LogFile = DEFAULT_LOG_FILE,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", metavar="KEY=VALUE",
        help="Override a campaign field, e.g. --set budget.trials=4 --set evaluate.seeds=3 (repeat).")] = None,
    wide: Wide = False,
    format_: TablesFormat = "table",
    plan: Annotated[bool, typer.Option(
        "--plan", help="Say what the campaign would train (each method's searches, trials and pairs, what later "
                       "rounds may add, the searches or pairs its smallest effects may need) and about how long "
                       "that takes here, from what is stored and a short timing probe of each method; train and "
                       "store nothing.")] = False,
) -> None:
    """Tune and compare every method of a campaign.

    Tune every method of a campaign with the same budget, re-train each best on the same (seed, split) pairs
    as a tuned ERM, and print the verdict; only what is missing runs, so a second call trains nothing.

    The verdict decides on the primary metrics ([evaluate] primary: by default the test counterpart of the
    objective and the rare class): each method ends better, worse, equivalent (within the smallest effect,
    [evaluate] smallest_effect) or undecided against ERM. By default every method is searched several times
    (a pilot of 3 searches, then rounds planned for 80% power up to 10), each search re-trained on a few pairs,
    and the search is the unit of the test: the verdict is about the methods, not about one search's luck.
    Each round says what it trains and about how long it takes."""
    from pipeline.compare.across_tasks import take_across_tasks
    from pipeline.compare.campaign import run_campaign
    from pipeline.spec.campaign_config import load_campaign
    from pipeline.spec.study_config import naming_source
    from pipeline.config import check_precision
    from pipeline.search.parallel import check_options, check_scheduler_reachable, trial_runner
    from pipeline.store import Store, shown_database
    from pipeline.compare.verdict import take_verdict
    from pipeline.report.verdict_report import across_tables, verdict_tables

    fmt = chosen_format(format_, TABLE_FORMATS)
    log_file = log_file_for(log_file, db)  # checked: its folder can hold it
    campaign = load_campaign(campaign_file, replicates, list(set_ or []))
    check_precision(precision)
    workers = chosen_workers(ctx, workers, scheduler)
    if workers is not None or scheduler is not None:
        check_options(workers, scheduler, trials_per_gpu, device)  # bad options: exit 2 before anything is stored
    if plan:
        with naming_source(str(campaign_file), set_ or []):  # a class or folder the data lacks: the file's field
            return _print_plan(campaign, db, device, precision, threads, workers, scheduler, trials_per_gpu)
    if scheduler:
        check_scheduler_reachable(scheduler)
    live = live_export(db, mlflow or campaign.studies[REFERENCE].mlflow)
    with naming_source(str(campaign_file), set_ or []):
        estimate = _probed_estimate(campaign, db, device, precision, threads)

    def runner() -> Any:
        return trial_runner(workers, scheduler, trials_per_gpu, device, str(log_file))

    resume = resume_command(ctx, {"db": shown_database})
    try:
        with new_database(db), ctrl_c_kept() as ctrl_c:
            view = CampaignView(ctrl_c, live, estimate)
            named = naming_source(str(campaign_file), set_ or [])  # a class or folder the data lacks: its field
            if stderr.is_terminal:
                with Live(view, console=stderr, refresh_per_second=4, transient=True), named:
                    summary = run_campaign(campaign, db, device, view.on_event, runner, precision, log_file, threads)
            else:
                with named:
                    summary = run_campaign(campaign, db, device, view.on_event, runner, precision, log_file, threads)
    except KeyboardInterrupt:
        print_resume(stderr, f"interrupted: campaign {campaign.name} stopped; what it stored is kept; resume with",
                     resume)
        raise typer.Exit(130)
    except ServerLost as lost:  # cli/main.py prints it in one line, exit code 1
        raise ServerLost(f"{lost}; campaign {campaign.name} stopped; what it stored is kept; resume with {resume} "
                         "once it is back") from None
    print_progress(stderr, f"campaign {campaign.name}: {summary.trials_run} trial(s) and {summary.runs_trained} "
               f"re-training run(s) now; search {summary.search_seconds:.0f} s, re-training "
               f"{summary.retrain_seconds:.0f} s"
               + ("" if summary.trials_run or summary.runs_trained else "; nothing was missing, nothing changed"),
               highlight=False)
    if live is not None:
        live.campaign(campaign.name)
        if not live.failed:
            print_progress(stderr, f"MLflow: campaign {campaign.name}'s studies, trials and verdict at {live.uri}",
                       highlight=False)
    store = Store(db, create=False)
    record = store.require_campaign(campaign.name)
    print_tables(across_tables(take_across_tasks(store, record)) if record.tasks
                 else verdict_tables(take_verdict(store, record)), fmt, None, wide=wide)


def _settled(campaign: Any, db: str | None, threads: int | None) -> tuple[Any, Any]:
    """The campaign as `compare` would run it against the database (settled as stored, at --threads), and the
    database opened to read (None where there is none yet)."""
    from pipeline.search.study import reading_store

    store = reading_store(db)
    known = None if store is None else store.campaign(campaign.name)
    ready = campaign.settled(None if known is None else known.config)
    return (ready if threads is None else ready.with_threads(threads)), store


def _probed_estimate(campaign: Any, db: str | None, device: str, precision: str, threads: int | None) -> Any:
    """Where nothing stored says how long the campaign's trials take, its work timed by a probe of each method
    (pipeline/compare/plan.py), for the live estimate to start from; None where what is stored says it."""
    from pipeline.compare.plan import campaign_probes, guesses
    from pipeline.compare.workload import campaign_work

    ready, store = _settled(campaign, db, threads)
    work = campaign_work(store, ready)
    if work.seconds() is not None or not (work.trials or work.runs):
        return None
    with stderr.status("timing a few batches of each method"):
        return campaign_work(store, ready, 1, guesses(ready, campaign_probes(ready, device, precision)))


def _print_plan(campaign: Any, db: str | None, device: str, precision: str, threads: int | None,
                workers: int | None, scheduler: str | None, trials_per_gpu: int) -> None:
    """`compare --plan`: what the campaign would train and about how long it takes; nothing trained or stored."""
    from pipeline.compare.plan import plan_campaign

    ready, store = _settled(campaign, db, threads)
    count, where = plan_workers(workers, scheduler, device, trials_per_gpu)
    with stderr.status("timing a few batches of each method"):
        found = plan_campaign(ready, store, count, device, precision)
    print_plan(campaign_plan_lines(found, where))


def campaign_plan_lines(plan: Any, workers: str) -> list[str]:
    """A campaign's plan (CampaignPlan) in lines for the terminal, each wrapped to its width."""
    from pipeline.compare.decision import Axis
    from pipeline.compare.plan import ACCURACIES

    design, work = plan.design, plan.work
    searching = design.axis is Axis.SEARCHES
    tasks = f" on each of {plan.tasks} tasks" if plan.tasks > 1 else ""
    near = " or ".join(f"{100 * a:.0f}%" for a in ACCURACIES)
    lines = [f"plan of campaign {plan.name} (a timing probe trained, nothing stored)",
             f"methods: {', '.join(plan.methods)}{tasks}: {_design(plan)}"]
    if searching:
        lines.append(f"each method{' on each task' if tasks else ''}, ERM too: the pilot {design.searches} x "
                     f"({plan.budget} trials + {design.seeds} runs), at most {design.max_searches} x "
                     f"({plan.budget} trials + {design.max_seeds} runs)")
    lines += ["data" + (" (the first task's)" if plan.tasks > 1 else "") + ", as its trials load it:",
              *(f"  {line}" for line in plan.dataset.split_summary(terminal_width(stdout) - 2, plan.rare)),
              (f"decides on (what 80% power may need after the pilot where runs score near {near}):" if searching
               else f"decides on (the pairs 80% power may need where runs score near {near}):")]
    lines += [_need_line(need, design, searching) for need in plan.needs]
    lines.append("  (as much as its test images let a run vary: " + (
        "a search's luck and training add to it; the pilot's spread plans the pairs per search and the rounds)"
        if searching else "training adds to it; the first round's spread plans the next rounds)"))
    lines.append("a trial at the middle of its ranges, timed here: " + ", ".join(
        f"{p.method} {clock(p.trial_seconds)}" for p in plan.probes))
    lines += work_lines(work) or ["nothing left to train: every trial and run is stored"]
    lines.append(f"workers: {workers}")
    return lines


def _need_line(need: Any, design: Any, searching: bool) -> str:
    """What one primary metric may need (a plan's Need), in a line: the pairs, or the searches of so many pairs,
    at each accuracy, and where that passes what the campaign may train."""
    from pipeline.compare.decision import MOST_PAIRS, MOST_SEARCHES
    from pipeline.compare.plan import ACCURACIES
    from pipeline.compare.verdict import METRIC_LABELS

    counts = need.searches if searching else need.pairs
    most = MOST_SEARCHES if searching else MOST_PAIRS
    cap, name = (design.max_searches, "max_replicates") if searching else (design.max_seeds, "max_seeds")
    said = [f"{n}" if n is not None else f"more than {most:,}" for n in counts]
    if searching and len(set(need.pairs)) == 1:
        said = [f"{' or '.join(said)} searches of {need.pairs[0]} pairs"]
    elif searching:
        said = [f"{n} searches of {pairs} pairs" for n, pairs in zip(said, need.pairs)]
    past = [n is None or n > cap for n in counts]
    beyond = ("" if not any(past) else f"; past {name} = {cap}: "
              + ("it may end undecided" if all(past) else f"at {100 * ACCURACIES[past.index(True)]:.0f}% it may "
                                                          "end undecided"))
    return (f"  {METRIC_LABELS[need.metric]} ±{100 * need.smallest:g} point{'' if need.smallest == 0.01 else 's'} "
            f"({need.images} test images): about {' or '.join(said)}{beyond}")
