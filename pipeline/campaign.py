"""`robust-tune compare`: tune every method of a campaign with the same budget, re-train each one's best
configuration on the same seeds as ERM's, and take the verdict (pipeline/verdict.py).

Everything is an ordinary study or evaluation in the store, so `compare` runs only what is missing: a
second call trains nothing, a killed one resumes where it stopped (run_study and run_evaluation resume
exactly what they stored). Seeds come in rounds: after each round the verdict is taken again, and only
methods with a comparison still open get the next round (ERM gets every round any method gets).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pipeline.campaign_config import REFERENCE, CampaignConfig
from pipeline.config import DataConfig
from pipeline.errors import UserError
from pipeline.store import CampaignRecord, SchemaUpgraded, Store, trials_ran
from pipeline.trial import OnEvent, TrialRunner

RunnerFactory = Callable[[], TrialRunner | None]  # a fresh runner for each study (None: in this process)


@dataclass(frozen=True)
class CampaignStarted:
    name: str
    methods: tuple[str, ...]
    budget: int  # trials per method and search replicate
    replicates: int
    looks: list[int]  # seed counts at which the verdict is taken
    resplit: bool = False  # confirmation runs draw the split again with each seed
    split_seed: int = 0  # the campaign's split seed (the base of each pair's with resplit)
    warning: str | None = None  # classes with too few validation or test examples to measure (Dataset.thin_classes)
    data: DataConfig = field(default_factory=DataConfig)  # ERM's study's data (every study's but the split seed)


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
    or the seeds run out. `threads` (torch's CPU threads) goes to every study, which refuses it when stored
    with another count; the re-training runs train with their best trial's."""
    from pipeline.study import check_can_train, reading_store, run_study, settle_threads

    known = (reader := reading_store(db)) and reader.campaign(campaign.name)  # read only: nothing is created yet
    campaign = campaign.settle_image_size(None if known is None else known.config)  # before the data is checked
    campaign = campaign.settle_strategy(None if known is None else known.config)
    campaign = campaign.settle_resplit(None if known is None else known.evaluation.resplit)
    if threads is not None:
        campaign = dataclasses.replace(campaign, studies={m: dataclasses.replace(s, threads=threads)
                                                          for m, s in campaign.studies.items()})
    warning = check_can_train(campaign.studies[REFERENCE], device, precision)  # a bad data set: before any write
    store = Store(db, on_upgrade=lambda message: on_event(SchemaUpgraded(message)))
    for method, replicate in ((m, r) for r in range(campaign.replicates) for m in campaign.methods):
        study = campaign.study(method, replicate)
        settle_threads(study, store.study(study.name))  # another thread count is refused before anything runs
    with store.reporting_loss(f"run campaign {campaign.name}"):  # a busy database: one line
        record = store.save_campaign(campaign)
    summary = CampaignSummary(campaign.name)
    looks = campaign.evaluation.looks()
    with store.reporting_loss(f"run campaign {campaign.name}"), store.lock_campaign(record):  # a lost or busy database: one line
        on_event(CampaignStarted(campaign.name, campaign.methods, campaign.studies[REFERENCE].budget.trials,
                                 campaign.replicates, looks, bool(campaign.evaluation.resplit),
                                 campaign.studies[REFERENCE].data.split_seed, warning,
                                 campaign.studies[REFERENCE].data))
        studies = [(m, r) for r in range(campaign.replicates) for m in campaign.methods]
        start = time.perf_counter()
        for number, (method, replicate) in enumerate(studies, start=1):
            study = campaign.study(method, replicate)
            on_event(CampaignStage("search", method, study.name, number, len(studies)))
            if _searched(store, study.name, study.budget.trials):
                continue  # nothing to run: Ax is not even loaded
            result = run_study(study, db, device, None, log_file, on_event, runner(), precision)
            summary.trials_run += result.completed + result.failed
            if result.best is None:
                summary.set_aside[method] = result.stopped or "no completed trial"
                on_event(MethodSetAside(method, summary.set_aside[method]))
        summary.search_seconds = time.perf_counter() - start
        if REFERENCE in summary.set_aside:
            raise UserError(f"campaign {campaign.name}: ERM's study has no completed trial "
                            f"({summary.set_aside[REFERENCE]}); nothing can be compared with it")
        start = time.perf_counter()
        _retrain(store, record, campaign, looks, summary, device, precision, on_event, runner)
        summary.retrain_seconds = time.perf_counter() - start
    return summary


def _searched(store: Store, name: str, budget: int) -> bool:
    """Whether study `name` is stored with its whole budget run and a completed trial to re-train."""
    stored = store.study(name)
    if stored is None:
        return False
    trials = store.trials(stored.id)
    return (trials_ran(trials) >= budget
            and any(t.status == "completed" for t in trials))


def _retrain(store: Store, record: CampaignRecord, campaign: CampaignConfig, looks: list[int],
             summary: CampaignSummary, device: str, precision: str, on_event: OnEvent, runner: RunnerFactory) -> None:
    """Re-train in rounds: each look's seeds for the methods whose verdict is still open, and for ERM."""
    from pipeline.evaluate import plan_evaluation, run_evaluation
    from pipeline.verdict import campaign_runs, methods_needing_seeds, run_values, sequential_comparisons

    compared = [m for m in campaign.methods if m not in summary.set_aside]
    for seeds in looks:
        comparisons = sequential_comparisons(run_values(campaign_runs(store, record)), compared, looks,
                                             campaign.replicates)
        needing = methods_needing_seeds(comparisons, compared)
        if not needing:
            break
        steps = [(m, r) for m in [REFERENCE, *needing] for r in range(campaign.replicates)]
        for number, (method, replicate) in enumerate(steps, start=1):
            name = campaign.study(method, replicate).name
            on_event(CampaignStage("re-train", method, name, number, len(steps), seeds))
            plan = plan_evaluation(store, name, seeds, pick=campaign.evaluation.pick,
                                   resplit=bool(campaign.evaluation.resplit),
                                   split_base=store.require_study(name).study.data.split_seed)
            summary.runs_trained += run_evaluation(store, plan, device, on_event, precision, runner())
