"""`robust-tune compare`: tune every method of a campaign with the same budget, re-train each one's best
configuration on the same seeds as ERM's, and take the verdict (pipeline/compare/verdict.py).

Everything is an ordinary study or evaluation in the store, so `compare` runs only what is missing: a
second call trains nothing, a killed one resumes where it stopped (run_study and run_evaluation resume
exactly what they stored). Pairs come in rounds planned for power (pipeline/compare/decision.py): after each
round the decisions are taken again from what is stored, and only methods with a primary cell still open get
the next round (ERM gets every round any method gets).
"""
from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from pipeline.spec.campaign_config import APART, REFERENCE, CampaignConfig
from pipeline.spec.study_config import StudyConfig
from pipeline.config import DataConfig
from pipeline.errors import UserError
from pipeline.store import (CampaignRecord, SchemaUpgraded, Store, TrialStatus, campaign_pick, trial_budget,
                            trials_ran)
from pipeline.search.ax_tables import pending_in_ax
from pipeline.search.trial import InProcessRunner, OnEvent, Outcome, TrialJob, TrialRunner

if TYPE_CHECKING:
    from pipeline.compare.evaluate import Plan
    from pipeline.search.study import StudySummary

RunnerFactory = Callable[[], TrialRunner | None]  # a fresh runner for each study (None: in this process)


@dataclass(frozen=True)
class CampaignStarted:
    name: str
    methods: tuple[str, ...]
    budget: int  # trials per method and search replicate
    replicates: int
    seeds: int  # the first round's pairs
    max_seeds: int  # the most pairs the rounds may reach
    resplit: bool = False  # confirmation runs draw the split again with each seed
    split_seed: int = 0  # the campaign's split seed (the base of each pair's with resplit)
    replicate_seeds: str = APART  # how search replicates take their seeds (CampaignConfig.replicate_seeds)
    # a line each: classes with too few validation or test examples to measure (Dataset.thin_classes), a resplit
    # that varies nothing (MedMNIST without drawn rare examples)
    warning: str | None = None
    data: DataConfig = field(default_factory=DataConfig)  # ERM's study's data (every study's but the split seed)
    task: str | None = None  # with several tasks: the one starting, the `number`-th of `tasks`
    number: int = 1
    tasks: int = 1
    max_replicates: int = 1  # more than `replicates`: rounds of searches up to it


@dataclass(frozen=True)
class TasksAdded:
    """A stored campaign of tasks grows: `added` run now, `kept` (stored) keep their studies, runs and verdicts."""

    name: str
    added: tuple[str, ...]
    kept: tuple[str, ...]


@dataclass(frozen=True)
class CampaignStage:
    """The campaign moves on to searching one method's study, or re-training runs up to `seeds` seeds."""

    stage: str  # "search" | "re-train"
    method: str
    study: str
    number: int  # 1-based among the stage's steps
    total: int
    seeds: int = 0


@dataclass(frozen=True)
class CampaignTogether:
    """On workers: the campaign searches `studies` at once (`done` others were searched already), or re-trains
    them at once up to `seeds` seeds, every task's together."""

    stage: str  # "search" | "re-train"
    studies: tuple[str, ...]
    done: int = 0
    seeds: int = 0


@dataclass(frozen=True)
class CampaignRound:
    """The next round, as the decisions plan it: `methods` (ERM first) searched `searches` times each and every
    search re-trained up to `pairs` pairs: `new_searches` searches and `runs` runs in all, about `seconds` of
    training (None: nothing to go by yet)."""

    campaign: str  # the task's campaign name
    pairs: int
    methods: tuple[str, ...]
    runs: int
    seconds: float | None
    number: int  # the look it leads to, 1-based (the first round is look 1)
    searches: int = 1  # searches per method the round reaches
    new_searches: int = 0  # the searches it runs (every method's)


@dataclass(frozen=True)
class MethodSetAside:
    """A method that cannot be compared: its study stopped without a completed trial."""

    method: str
    reason: str


@dataclass
class CampaignSummary:
    name: str
    search_seconds: float = 0.0
    retrain_seconds: float = 0.0
    trials_run: int = 0  # trials this call ran
    runs_trained: int = 0  # re-training runs this call trained
    set_aside: dict[str, str] = field(default_factory=dict)


def run_campaign(campaign: CampaignConfig, db: str | None = None, device: str = "auto",
                 on_event: OnEvent = lambda event: None, runner: RunnerFactory = lambda: None,
                 precision: str = "auto", log_file: str | Path = "runs/robust-tune.log",
                 threads: int | None = None) -> CampaignSummary:
    """Run (or resume) every study of `campaign`, then the re-training rounds, until the verdict is settled
    or the seeds run out; with several tasks, each task in turn as a one-task campaign would. `threads` (torch's
    CPU threads) goes to every study, which refuses it when stored with another count; the re-training runs train
    with their best trial's."""
    from pipeline.compare.workload import campaign_work
    from pipeline.search.study import check_can_train, reading_store, settle_threads

    reader = reading_store(db)
    known = None if reader is None else reader.campaign(campaign.name)  # read only: nothing is created yet
    campaign = campaign.settled(None if known is None else known.config)  # before the data is checked
    if threads is not None:
        campaign = campaign.with_threads(threads)
    tasks = campaign.task_campaigns()
    # a bad data set of any task: before any write
    warnings = {task: _warnings(check_can_train(config.studies[REFERENCE], device, precision), config)
                for task, config in tasks}
    store = Store(db, on_upgrade=lambda message: on_event(SchemaUpgraded(message)), on_reconnect=on_event)
    for study in campaign.all_studies():
        settle_threads(study, store.study(study.name))  # another thread count is refused before anything runs
    with store.reporting_loss(f"run campaign {campaign.name}"):  # a busy database: one line
        record = store.save_campaign(campaign)
    if known is not None and known.tasks and (added := tuple(t for t in record.tasks if t not in known.tasks)):
        on_event(TasksAdded(campaign.name, added, known.tasks))
    summary = CampaignSummary(campaign.name)
    # a lost or busy database: one line; the runner (a Dask cluster), started when first needed, closed at the end
    with store.reporting_loss(f"run campaign {campaign.name}"), store.lock_campaign(record), ExitStack() as stack:
        shared = _Shared(runner() or InProcessRunner(), stack)
        on_event(campaign_work(store, campaign, 1 if shared.one_slot else shared.capacity))
        numbered = [(number, task, config) for number, (task, config) in enumerate(tasks, start=1)]
        # on workers every task at once; with one slot each task in turn, as a one-task campaign would run
        for batch in ([[one] for one in numbered] if shared.one_slot else [numbered]):
            _run_tasks(store, record, campaign, batch, len(tasks), warnings, summary, db, device, on_event, shared,
                       precision, log_file)
    return summary


def _started(campaign: CampaignConfig, config: CampaignConfig, task: str | None, number: int, tasks: int,
             warning: str | None) -> CampaignStarted:
    """The event that task `task` (the `number`-th of `tasks`; `config`: it as a one-task campaign) starts."""
    reference = config.studies[REFERENCE]
    return CampaignStarted(campaign.name, campaign.methods, reference.budget.trials, campaign.replicates,
                           campaign.evaluation.seeds, campaign.evaluation.max_seeds or campaign.evaluation.seeds,
                           bool(campaign.evaluation.resplit), reference.data.split_seed,
                           campaign.replicate_seeds or APART, warning, reference.data, task, number, tasks,
                           campaign.most_searches)


def _warnings(thin: str | None, config: CampaignConfig) -> str | None:
    """What a task warns of when it starts, a line each: classes too thin to measure (`thin`), and a resplit that
    varies nothing."""
    lines = [line for line in (thin, _resplit_varies_nothing(config)) if line]
    return "\n".join(lines) or None


def _resplit_varies_nothing(config: CampaignConfig) -> str | None:
    """One line where the campaign resplits a data set whose splits are its own (MedMNIST) and draws no rare-class
    examples from the split seed: its pairs then differ in the training seed only."""
    from pipeline.compare.verdict import FIXED_SPLITS

    data = config.studies[REFERENCE].data
    if not config.evaluation.resplit or data.name not in FIXED_SPLITS or data.rare_drawn:
        return None
    kept = "" if data.imbalance_class is None else " and keeps the first rare-class examples (rare_kept = \"first\")"
    return (f"warning: resplit varies nothing here: {data.name} has its own fixed train, validation and test splits"
            f"{kept}, so the pairs differ in the training seed only")


def _label(summary: CampaignSummary, config: CampaignConfig, method: str) -> str:
    """`method` as the summary names it: alone in a one-task campaign, after its task's campaign otherwise."""
    return method if config.name == summary.name else f"{config.name}: {method}"


def _searches_ended(summary: CampaignSummary, config: CampaignConfig, set_aside: dict[str, str]) -> None:
    """Note the methods of task `config` whose study has no completed trial; a UserError when ERM's has none."""
    summary.set_aside |= {_label(summary, config, method): why for method, why in set_aside.items()}
    if REFERENCE in set_aside:
        raise UserError(f"campaign {config.name}: ERM's study has no completed trial "
                        f"({set_aside[REFERENCE]}); nothing can be compared with it")


def _next_round(store: Store, record: CampaignRecord, config: CampaignConfig, set_aside: dict[str, str],
                workers: int = 1) -> CampaignRound | None:
    """The round task `config` (stored as `record`) runs next, as its decisions plan it from what is stored
    (pipeline/compare/decision.py): the searches it needs and the pairs each is re-trained on; None once every
    primary cell is decided or the budget is spent."""
    from pipeline.compare.verdict import campaign_decisions

    decisions = campaign_decisions(store, record, list(set_aside))
    if decisions.next_pairs is None:
        return None
    seconds = None if decisions.round_seconds is None else decisions.round_seconds / max(1, workers)
    return CampaignRound(config.name, decisions.next_pairs, (REFERENCE, *decisions.needing), decisions.round_runs,
                         seconds, len(decisions.looks), decisions.next_searches, decisions.round_searches)


def _plan(store: Store, config: CampaignConfig, method: str, replicate: int, seeds: int) -> Plan:
    """The re-training of `method`'s study of search replicate `replicate` up to `seeds` pairs: pair k on training
    seed offset + k and, with resplit, split seed (the study's split seed) + k, the replicate's own seeds
    (CampaignConfig.replicate_seeds), the same for every method."""
    from pipeline.compare.evaluate import plan_evaluation

    name = config.study(method, replicate).name
    offset = config.seed_offset(replicate)
    study = store.require_study(name)
    picked = campaign_pick(study, store.trials(study.id), config.evaluation.pick)
    plan = plan_evaluation(store, name, seeds, trial=None if picked is None else picked.trial_index,
                           resplit=bool(config.evaluation.resplit), split_base=study.study.data.split_seed - offset)
    return replace(plan, seeds=[offset + seed for seed in plan.seeds])  # the split follows: split_base + seed


def _searched(store: Store, study: StudyConfig) -> bool:
    """Whether `study` is stored with its whole budget run (with the allowance of a study that widened a range), a
    completed trial to re-train, and Ax told of every trial and epoch prefix (else run_study reconciles Ax with the
    table first, and tells the prefixes). Asked without loading Ax: a compare with nothing left to do answers at
    once."""
    from pipeline.search.study import untold_prefixes

    stored = store.study(study.name)
    if stored is None:
        return False
    trials = store.trials(stored.id)
    if (trials_ran(trials) < trial_budget(study, bool(store.widenings(stored.id)))
            or not any(t.status == TrialStatus.COMPLETED for t in trials)
            or any(untold_prefixes(study, trial, trials) for trial in trials)):
        return False
    return not pending_in_ax(store, study.name)


class _Shared:
    """One runner for the whole campaign (one Dask cluster, or this process): started when a stage first enters it,
    closed with `stack` (the campaign's end); each stage's `with` leaves it running. In this process it has one
    slot: the campaign's studies and runs go one after another, each its own stage."""

    def __init__(self, runner: TrialRunner, stack: ExitStack) -> None:
        self.runner, self.stack = runner, stack
        self.one_slot = isinstance(runner, InProcessRunner)
        self.entered = False

    @property
    def capacity(self) -> int:
        return self.runner.capacity  # a scheduler's is known once connected

    @property
    def ahead(self) -> int:
        return self.runner.ahead

    def __enter__(self) -> _Shared:
        if not self.entered:
            self.stack.enter_context(self.runner)
            self.entered = True
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def submit(self, job: TrialJob) -> None:
        self.runner.submit(job)

    def wait(self, on_event: OnEvent) -> list[Outcome]:
        return self.runner.wait(on_event)


def _run_tasks(store: Store, record: CampaignRecord, campaign: CampaignConfig,
               tasks: list[tuple[int, str | None, CampaignConfig]], count: int, warnings: dict[str | None, str | None],
               summary: CampaignSummary, db: str | None, device: str, on_event: OnEvent, runner: _Shared,
               precision: str, log_file: str | Path) -> None:
    """Tasks `tasks` (each numbered among `count`, as a one-task campaign) in rounds: at each, every task whose
    verdict is still open runs the searches its decisions ask for (ERM's and each open method's), then re-trains
    every one of those searches up to the round's pairs; a task's decisions are taken again from what is stored
    after each round, and a task settled gets no later one. The first round is the pilot (or, with fixed searches,
    every search and the first pairs)."""
    for number, task, config in tasks:
        on_event(_started(campaign, config, task, number, count, warnings[task]))
    records = [(record if task is None else record.task(task), config) for _, task, config in tasks]
    set_aside: dict[str, dict[str, str]] = {config.name: {} for _, config in records}
    last: list[CampaignRound] = []
    while True:
        rounds = [(config, round_) for task_record, config in records
                  if (round_ := _next_round(store, task_record, config, set_aside[config.name], runner.capacity))]
        if not rounds or [r for _, r in rounds] == last:
            return  # every task decided or out of budget; or nothing was added last time (every run failed)
        last = [r for _, r in rounds]
        for _, round_ in rounds:
            on_event(round_)
        studies = [(config, method, config.study(method, replicate)) for config, round_ in rounds
                   for method in round_.methods for replicate in range(round_.searches)]
        start = time.perf_counter()
        newly_aside = False
        for (config, method, _), result in _search(store, studies, runner, db, device, on_event, precision, log_file):
            summary.trials_run += result.completed + result.failed
            if result.best is None and method not in set_aside[config.name]:
                why = set_aside[config.name][method] = result.stopped or "no completed trial"
                on_event(MethodSetAside(_label(summary, config, method), why))
                newly_aside = True
        summary.search_seconds += time.perf_counter() - start
        for config, _ in rounds:
            _searches_ended(summary, config, set_aside[config.name])
        if newly_aside:
            last = []
            continue  # the round is planned again without the methods set aside
        start = time.perf_counter()
        _retrain(store, rounds, summary, device, precision, on_event, runner)
        summary.retrain_seconds += time.perf_counter() - start


SearchStep = tuple[CampaignConfig, str, StudyConfig]  # a study of a task's campaign, and its method


def _search(store: Store, studies: list[SearchStep], runner: _Shared, db: str | None, device: str, on_event: OnEvent,
            precision: str, log_file: str | Path) -> list[tuple[SearchStep, StudySummary]]:
    """Run every study of `studies` not searched yet: with one slot one after another, a stage each; on workers all
    at once. Returns each study run, with how it went."""
    from pipeline.search.studies import run_studies
    from pipeline.search.study import run_study

    pending = [step for step in studies if not _searched(store, step[2])]
    if not pending:
        return []
    if runner.one_slot:
        done = []
        for number, step in enumerate(pending, start=1):
            on_event(CampaignStage("search", step[1], step[2].name, number, len(pending)))
            done.append((step, run_study(step[2], db, device, None, log_file, on_event, runner, precision)))
        return done
    on_event(CampaignTogether("search", tuple(study.name for _, _, study in pending), len(studies) - len(pending)))
    return list(zip(pending, run_studies([study for _, _, study in pending], runner, db, device, log_file, on_event,
                                         precision)))


def _retrain(store: Store, rounds: list[tuple[CampaignConfig, CampaignRound]], summary: CampaignSummary, device: str,
             precision: str, on_event: OnEvent, runner: _Shared) -> None:
    """Re-train the round's runs: every search of ERM and of each open method up to the round's pairs, one after
    another with one slot, together on workers."""
    from pipeline.compare.evaluate import missing_runs, run_evaluation, run_evaluations

    steps = [(config, method, replicate, round_.pairs) for config, round_ in rounds
             for method in round_.methods for replicate in range(round_.searches)]
    plans = [(step, plan) for step in steps if missing_runs(store, plan := _plan(store, *step))]
    if runner.one_slot:
        for number, ((config, method, replicate, pairs), plan) in enumerate(plans, start=1):
            on_event(CampaignStage("re-train", method, plan.study.name, number, len(plans), pairs))
            summary.runs_trained += run_evaluation(store, plan, device, on_event, precision, runner)
        return
    if plans:
        on_event(CampaignTogether("re-train", tuple(plan.study.name for _, plan in plans),
                                  seeds=max(r.pairs for _, r in rounds)))
        summary.runs_trained += run_evaluations(store, [plan for _, plan in plans], device, on_event, precision,
                                                runner)
