"""Typed records of what the store holds, and the rules read from them (which trial is best).

Every reader (report, plots, evaluate, the CLI) gets these, never rows or JSON: a stored study carries
its StudyConfig, a trial or an evaluation the RunSettings it trained with. Records stored by an
earlier version read the same way; what they lack gets the value that reproduces what they did.
"""
from __future__ import annotations

import datetime as dt
from enum import StrEnum
from dataclasses import dataclass
from typing import Any, Mapping

from pipeline.spec.campaign_config import Evaluation, pair_of
from pipeline.config import RunSettings
from pipeline.params import Range, Value
from pipeline.spec.study_config import DEFAULT_PICK, StudyConfig
from pipeline.training.result import RUN_FACTS, SeedRun, ValTest, metrics_column


@dataclass(frozen=True)
class StoredMetrics:
    """A stored `metrics` column (training.result.metrics_column) parted: the run's metrics, how many images each
    split's rest on, and the mean distinct examples per training batch (None where not measured)."""

    metrics: dict[str, float] | None
    examples: dict[str, int] | None
    distinct_per_batch: float | None

    @classmethod
    def part(cls, stored: dict[str, float] | None) -> StoredMetrics:
        if stored is None:
            return cls(None, None, None)
        examples = {split: int(stored[f"{split}_examples"]) for split in ("val", "test")
                    if f"{split}_examples" in stored}
        return cls({k: v for k, v in stored.items() if k not in RUN_FACTS}, examples or None,
                   stored.get("distinct_per_batch"))


def seed_runs_read(stored: list[dict[str, Any]] | None) -> tuple[SeedRun, ...] | None:
    """A trial's stored seed_runs as typed records; None for a trial trained on one seed."""
    if not stored:
        return None
    return tuple(SeedRun(run["seed"], run["train_seconds"],
                         StoredMetrics.part({k: v for k, v in run.items() if k != "seed"}).metrics or {})
                 for run in stored)


@dataclass(frozen=True)
class StudyRecord:
    """A stored study: its row and the study it is."""

    id: int
    name: str
    fingerprint: str
    study: StudyConfig
    created_at: dt.datetime


@dataclass(frozen=True)
class Widening:
    """One end of a study's searched range moved outward because its best trial sat on it (pipeline/search/bounds.py),
    as stored in rt_widenings."""

    parameter: str
    side: str  # "lower" or "upper"
    before: Range
    after: Range
    after_trial: int  # the trials that had run when it widened
    best_trial: int  # Ax's index of the best trial, which sat on the end
    value: float  # that trial's value of the parameter

    def text(self) -> str:
        """The sentence reports show: `lr_head widened from [0.01, 0.2] to [0.01, 0.8] after 6 trials: ...`."""
        return (f"{self.parameter} widened from {span(self.before)} to {span(self.after)} after {self.after_trial} "
                f"trials: the best, trial {self.best_trial}, sat on the {self.side} bound ({self.value:.4g})")

    def to_dict(self) -> dict[str, object]:
        """In the JSON reports: the ranges as [low, high]."""
        return {"parameter": self.parameter, "side": self.side, "after_trial": self.after_trial,
                "best_trial": self.best_trial, "value": self.value,
                "before": [self.before.low, self.before.high], "after": [self.after.low, self.after.high],
                "log": self.after.log}


def span(space: Range) -> str:
    """A range as reports write it: [0.01, 0.2]."""
    return f"[{space.low:g}, {space.high:g}]"


@dataclass(frozen=True)
class CampaignRecord:
    """A stored campaign: its methods, how they are re-trained, and where its studies are."""

    id: int
    name: str
    methods: tuple[str, ...]  # the reference (ERM) first
    evaluation: Evaluation
    replicates: int
    budget: dict[str, int]
    config: dict[str, Any]  # CampaignConfig.to_dict() as stored

    @property
    def max_replicates(self) -> int:
        """The most searches per method the campaign may run: its `replicates` where they are fixed (every campaign
        stored before 0.14.0), else the cap its rounds of searches stop at."""
        return int(self.config.get("max_replicates") or self.replicates)

    def study_names(self, method: str) -> list[str]:
        """The studies that may tune `method`, one per search replicate up to max_replicates (CampaignConfig.study's
        names; a round of searches not run yet has none stored); with several tasks, every task's."""
        if self.tasks:
            return [name for task in self.tasks for name in self.task(task).study_names(method)]
        base = f"{self.name}.{method}"
        return [base] + [f"{base}.r{r}" for r in range(1, self.max_replicates)]

    def pair(self, replicate: int, seed: int) -> int | None:
        """Which confirmation pair of search replicate `replicate` its run on training seed `seed` is, by the seed
        layout the campaign is stored with (CampaignConfig.replicate_seeds; none stored: "shared", its pair k on
        seed k); None for a run outside the replicate's seeds."""
        return pair_of(replicate, seed, self.config.get("replicate_seeds"))

    @property
    def tasks(self) -> tuple[str, ...]:
        """The campaign's tasks in its file's order; none for a one-task campaign (every campaign before 0.8)."""
        return tuple(self.config.get("tasks") or ())

    def task(self, task: str) -> CampaignRecord:
        """Task `task` as a one-task campaign named `<campaign>.<task>`: its studies, its verdict (CampaignConfig.
        task_campaigns' twin, read from what is stored)."""
        config = {k: v for k, v in self.config.items() if k != "tasks"}
        config |= {"name": f"{self.name}.{task}", "studies": self.config["tasks"][task]["studies"]}
        return CampaignRecord(self.id, config["name"], self.methods, self.evaluation, self.replicates, self.budget,
                              config)

    def task_records(self) -> list[tuple[str | None, CampaignRecord]]:
        """Each task as a one-task campaign, or the campaign itself (None) when it has no tasks."""
        return [(t, self.task(t)) for t in self.tasks] or [(None, self)]


@dataclass(frozen=True)
class EpochRecord:
    """One epoch of a stored run: its training loss, its validation accuracy (every version stored it), and its
    validation and test metrics (`splits`; None when stored before 0.5.0)."""

    epoch: int
    train_loss: float
    val_accuracy: float | None  # None where the run had no validation split
    splits: ValTest | None = None

    @classmethod
    def read(cls, epoch: int, train_loss: float, val: Mapping[str, Any] | None, test: Mapping[str, Any] | None,
             val_accuracy: float | None = None) -> EpochRecord:
        """An epoch as stored, its "val" and "test" laid out as ValTest.to_dict: a trial's epoch row, which gives its
        val_accuracy column, or an evaluation's `epochs` item, whose validation accuracy is its val's."""
        splits = ValTest.read(val, test)
        if splits is not None and val_accuracy is None:
            val_accuracy = splits.val.accuracy
        return cls(epoch, train_loss, val_accuracy, splits)

    @property
    def metrics(self) -> dict[str, float]:
        """The epoch's metrics by their names in study files (val_accuracy, ...); none when stored before 0.5.0."""
        return {} if self.splits is None else self.splits.metrics()

    def to_dict(self) -> dict[str, Any]:
        """As an evaluation run's `epochs` keeps it (EpochMetrics.to_dict's layout), to store it again."""
        stored = {"val": None, "test": None} if self.splits is None else self.splits.to_dict()
        return {"epoch": self.epoch, "train_loss": self.train_loss, **stored}


class TrialStatus(StrEnum):
    """Where a stored trial stands; the database holds the value (a StrEnum: it equals its text)."""

    RUNNING = "running"
    COMPLETED = "completed"
    EARLY_STOPPED = "early_stopped"  # an early-stopping rule ended it; its result is the epoch it stopped at
    FAILED = "failed"  # training raised (diverged, a bad combination); counted, never best
    INTERRUPTED = "interrupted"  # its process or worker stopped; its parameters run again first, it does not count


# How a trained trial may end and count toward its study's budget (an interrupted one runs again and does not).
RAN = (TrialStatus.COMPLETED, TrialStatus.EARLY_STOPPED, TrialStatus.FAILED)


@dataclass(frozen=True)
class TrialRecord:
    """One trial of a study as stored: proposed, then completed, early-stopped, failed or interrupted; or an epoch
    prefix of another trial (`prefix_of`), completed when that trial was stored."""

    id: int
    trial_index: int  # Ax's index of the trial
    status: TrialStatus
    parameters: dict[str, Value]  # the proposed values
    seed: int
    metrics: dict[str, float] | None  # val_accuracy, test_worst_class_accuracy, ...: the metrics alone
    per_class: dict[str, dict[str, float]] | None  # {"val": {class: accuracy}, "test": {...}}
    train_seconds: float | None
    proposal_seconds: float | None
    error: str | None
    settings: RunSettings | None = None  # what it trained with; None until it completed
    # trained on several seeds (budget.seeds_per_trial): each seed's metrics, and `metrics` their mean
    seed_runs: tuple[SeedRun, ...] | None = None
    # the study's GP's posterior of the objective here ({"mean", "sd", "fitted_on"}), when a run of the study ended
    predicted: dict[str, float] | None = None
    epochs: tuple[EpochRecord, ...] = ()  # every epoch's loss and metrics, in order
    prefix_of: int | None = None  # an epoch prefix: the index of the trial whose run holds this result
    examples: dict[str, int] | None = None  # {"val": n, "test": n}: the images its metrics rest on
    distinct_per_batch: float | None = None  # the mean distinct examples in a training batch (samplers)

    @property
    def ran(self) -> bool:
        """Whether this trial trained to an end and counts toward the budget (a prefix was not trained apart)."""
        return self.prefix_of is None and self.status in RAN

    @property
    def origin(self) -> str:
        """How the trial came to be, for reports: "" for a trained one, "prefix of trial K" for a prefix."""
        return "" if self.prefix_of is None else f"prefix of trial {self.prefix_of}"


def trial_budget(study: StudyConfig, widened: bool, trials: int | None = None) -> int:
    """The trials a study runs to: `trials` (a run's --trials) or its budget, plus budget.widen_trials once one of
    its ranges has widened."""
    return (trials or study.budget.trials) + (study.budget.widen_trials if widened else 0)


def trials_ran(trials: list[TrialRecord]) -> int:
    """How many trials trained to an end (completed, early-stopped or failed): what a study's budget counts."""
    return sum(t.ran for t in trials)


def trials_completed(trials: list[TrialRecord]) -> int:
    """How many trials trained and gave a result (completed or early-stopped; not failed, not an epoch prefix)."""
    return sum(t.ran and t.status != TrialStatus.FAILED for t in trials)


@dataclass(frozen=True)
class EvaluationRecord:
    """One run of `robust-tune evaluate`: a variant of a study's best trial, on one seed."""

    variant: str
    seed: int
    trial_index: int
    config: dict[str, Any]  # the run's identity as planned: TrainConfig.to_dict() less seed, device, precision
    metrics: dict[str, float]  # the metrics alone, as a trial's
    per_class: dict[str, dict[str, float]]
    train_class_counts: dict[str, int]
    settings: RunSettings
    train_seconds: float
    epochs: tuple[EpochRecord, ...] = ()  # every epoch's metrics, in order; none for a run stored before 0.5.0
    examples: dict[str, int] | None = None  # {"val": n, "test": n}: the images its metrics rest on
    distinct_per_batch: float | None = None  # the mean distinct examples in a training batch (samplers)

    def stored_metrics(self) -> dict[str, float]:
        """The `metrics` column this run was stored with (to store it again as another variant's: copy_evaluation)."""
        return metrics_column(self.metrics, self.examples, self.train_seconds, self.distinct_per_batch)


IMPORTANCE_MIN_TRIALS = 8


def importance_minimum(searched: int) -> int:
    """Completed trials below which parameter importance is refused: two per searched parameter, and never fewer
    than IMPORTANCE_MIN_TRIALS (a GP on fewer points mostly reports its prior)."""
    return max(IMPORTANCE_MIN_TRIALS, 2 * searched)


def importance_refused(completed: int, searched: int) -> str | None:
    """Why parameter importance is refused for a study with `completed` trials over `searched` parameters; None
    when it has enough."""
    minimum = importance_minimum(searched)
    if completed >= minimum:
        return None
    return (f"{completed} completed trial(s); it needs at least {minimum} (2 per searched parameter, at least "
            f"{IMPORTANCE_MIN_TRIALS})")


@dataclass(frozen=True)
class ParameterShare:
    """The share of the objective's variance one searched parameter explains alone, with a 90% interval."""

    name: str
    share: float
    low: float
    high: float


@dataclass(frozen=True)
class ImportanceRecord:
    """Parameter importance under a study's GP, as made when a run of the study ended; `parameters` (largest
    share first) is empty, and `note` says why, when it had fewer than `minimum` completed trials."""

    objective: str
    fitted_on: int
    minimum: int
    parameters: list[ParameterShare]
    note: str | None = None


def feasible(study: StudyRecord, trial: TrialRecord) -> bool:
    """Whether a completed trial keeps every constraint of its study (any trial does in a study without any)."""
    return all(rule.holds(trial.metrics or {}) for rule in study.study.constraint_rules)


def _candidates(study: StudyRecord, trials: list[TrialRecord]) -> list[TrialRecord]:
    """The completed trials that have every objective and keep every constraint: those that may be best."""
    objectives = study.study.all_objectives
    return [t for t in trials if t.status == TrialStatus.COMPLETED and t.metrics
            and all(o in t.metrics for o in objectives) and feasible(study, t)]


def dominates(a: dict[str, float], b: dict[str, float], objectives: tuple[str, ...]) -> bool:
    """Whether metrics `a` are at least `b`'s on every objective and above on one (all are maximised)."""
    return all(a[o] >= b[o] for o in objectives) and any(a[o] > b[o] for o in objectives)


def pareto_set(study: StudyRecord, trials: list[TrialRecord]) -> list[TrialRecord]:
    """The completed, feasible trials no other such trial dominates on the study's objectives, in trial order:
    the trade-offs a multi-objective study found (for a single objective, its trials at the best value)."""
    candidates = _candidates(study, trials)
    objectives = study.study.all_objectives
    return [t for t in candidates
            if not any(dominates(u.metrics or {}, t.metrics or {}, objectives) for u in candidates)]


def best_trial(study: StudyRecord, trials: list[TrialRecord]) -> TrialRecord | None:
    """The completed trial keeping every constraint with the highest objective (the earliest on ties): the rule
    of every report, of evaluate and of the study loop's "best so far". For several objectives, the first one
    decides among the Pareto set (so the best trial is always one of it)."""
    objective = study.study.objective
    pool = pareto_set(study, trials) if study.study.multi_objective else _candidates(study, trials)
    return max(pool, key=lambda t: ((t.metrics or {})[objective], -t.trial_index), default=None)


def model_pick(study: StudyRecord, trials: list[TrialRecord]) -> TrialRecord | None:
    """The completed trial keeping every constraint that the study's Gaussian process predicts best (highest
    posterior mean of the objective, the earliest on ties): less lucky than the best observed, whose value is
    partly a favourable draw of noise. None when no prediction is stored (fewer than three completed trials, a
    study of several objectives, or a study run before 0.4.0)."""
    predicted = [t for t in _candidates(study, trials) if t.predicted is not None]
    return max(predicted, key=lambda t: ((t.predicted or {})["mean"], -t.trial_index), default=None)


def picked_trial(study: StudyRecord, trials: list[TrialRecord], pick: str = DEFAULT_PICK) -> TrialRecord | None:
    """The trial `pick` names: the best observed (best_trial), or the model's pick (model_pick)."""
    return model_pick(study, trials) if pick == "model" else best_trial(study, trials)


def campaign_pick(study: StudyRecord, trials: list[TrialRecord], pick: str | None) -> TrialRecord | None:
    """The trial a campaign re-trains: `pick`'s (None: the best observed), or the best observed where the study's
    model made no pick (fewer than three completed trials, several objectives), so a campaign goes on where
    `evaluate --pick model` stops."""
    return picked_trial(study, trials, pick or "observed") or best_trial(study, trials)
