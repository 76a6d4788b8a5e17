"""One trial: what it trains (a TrialJob), how it ended (an Outcome), and the runners that train trials,
here or elsewhere, behind one small protocol the study loop drives.

`run_trial` is a pure, picklable function of (study config, parameters, seed): the same code path as
`robust-tune train`, in this process or on a Dask worker (pipeline/search/parallel.py).
"""
from __future__ import annotations

import functools
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from pipeline.config import DataConfig, resolve_device
from pipeline.data import Dataset, load_dataset
from pipeline.spec.epochs import StopRule, objective_curve
from pipeline.errors import ServerLost, UserError
from pipeline.spec.study_config import StudyConfig
from pipeline.training.result import EpochMetrics, RunResult, over_seeds
from pipeline.training.trainer import Progress, StopEarly, train

OnEvent = Callable[[Any], None]


@dataclass(frozen=True)
class TrialJob:
    """One trial to train: the study's settings, Ax's index and parameters, where and how it computes."""

    study: StudyConfig
    trial_index: int
    parameters: dict[str, Any]
    seed: int
    device: str = "auto"
    precision: str = "auto"
    stop_rule: StopRule | None = None  # early stopping on the study's objective (budget.early_stopping)


@dataclass(frozen=True)
class Outcome:
    """How one trial ended in its runner: a result (completed), an error (raised) or lost (its worker died)."""

    trial_index: int
    result: RunResult | None = None
    error: str | None = None  # "Type: message"
    details: str = ""  # the traceback's last frames
    lost: str | None = None  # why the trial stopped without an end
    started: float | None = None  # time.time() when training started
    study: str = ""  # the job's study's name: with several studies on one runner, the loop it goes back to


@dataclass(frozen=True)
class TrialRunning:
    """A worker started a trial (parallel studies only)."""

    trial_index: int
    worker: str
    study: str = ""  # the trial's study (several may share the workers: a campaign)


@dataclass(frozen=True)
class TrialEpoch:
    """A trial on a worker finished an epoch (parallel studies only)."""

    trial_index: int
    epoch: int
    epochs: int
    study: str = ""


@dataclass(frozen=True)
class TrialHandedBack:
    """A trial started again on another worker: the one it trained on (`worker`) left the cluster (stopped, or lost),
    and the scheduler sent the trial to `to`, where it trains from its start; not interrupted, nothing stored
    (parallel studies on an existing scheduler)."""

    trial_index: int
    worker: str
    to: str
    study: str = ""


@functools.lru_cache(maxsize=2)
def dataset_for(data: DataConfig, device: str) -> Dataset:
    """Decode and move a data set once per process; every trial or run on it indexes the same tensors."""
    return load_dataset(data, resolve_device(device))


def run_trial(study: StudyConfig, parameters: dict[str, Any], seed: int, device: str = "auto",
              progress: Progress | None = None, precision: str = "auto",
              stop_rule: StopRule | None = None) -> RunResult:
    """Train one proposed configuration, the same code path as `robust-tune train`: once, or on each of
    the study's budget.seeds_per_trial seeds (seed, seed + 1, ...), the results averaged (`over_seeds`), without
    the network (it stays where it trained). With `stop_rule` (one seed only: the study file refuses it with
    several), the run may stop early."""
    runs = []
    stop = stopping(stop_rule, study.objective) if study.budget.seeds_per_trial == 1 else None
    for run_seed in range(seed, seed + study.budget.seeds_per_trial):
        config = study.train_config(parameters, run_seed, device, precision)
        dataset = dataset_for(config.data, str(resolve_device(device)))
        runs.append(train(config, dataset, progress, stop).without_model())
    return over_seeds(runs)


def stopping(rule: StopRule | None, objective: str) -> StopEarly | None:
    """The trainer's early-stopping question for `rule` on the study's objective; None without a rule."""
    if rule is None:
        return None

    def stop(epochs: list[EpochMetrics]) -> bool:
        return rule.should_stop(objective_curve([epoch.metrics for epoch in epochs], objective))

    return stop


def trial_outcome(job: TrialJob, progress: Progress | None = None) -> Outcome:
    """Train one trial and say how it ended, here or on a worker; a UserError, a lost server or Ctrl-C (raised by
    `progress`) propagates."""
    started = time.time()
    try:
        result = run_trial(job.study, job.parameters, job.seed, job.device, progress, job.precision, job.stop_rule)
    except (UserError, ServerLost, KeyboardInterrupt):
        raise
    except Exception as error:  # diverged, out of memory, a bad combination: recorded, the study goes on
        return Outcome(job.trial_index, error=f"{type(error).__name__}: {error}",
                       details=traceback.format_exc(limit=-3), started=started, study=job.study.name)
    return Outcome(job.trial_index, result=result, started=started, study=job.study.name)


class TrialRunner(Protocol):
    """Where a study's trials train: up to `capacity` at once, and `ahead` more submitted to wait for the first
    free place (proposed while the others train); `submit` hands one over, `wait` returns the outcomes of those
    that ended (at least one; none when the capacity grew, a worker having joined), passing progress events on
    meanwhile. Several studies may share one runner (a campaign's, pipeline/search/studies.py): each outcome and
    progress event names its job's study."""

    @property
    def capacity(self) -> int: ...

    @property
    def ahead(self) -> int: ...

    def __enter__(self) -> TrialRunner: ...

    def __exit__(self, *exc: object) -> None: ...

    def submit(self, job: TrialJob) -> None: ...

    def wait(self, on_event: OnEvent) -> list[Outcome]: ...


class InProcessRunner:
    """One trial at a time, trained in this process when the study loop waits for it."""

    capacity, ahead = 1, 0

    def __init__(self) -> None:
        self.queued: TrialJob | None = None

    def __enter__(self) -> InProcessRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def submit(self, job: TrialJob) -> None:
        self.queued = job

    def wait(self, on_event: OnEvent) -> list[Outcome]:
        """Train the submitted trial; a UserError or Ctrl-C propagates (the loop stops the study)."""
        job, self.queued = self.queued, None
        assert job is not None, "wait() before submit()"
        return [trial_outcome(job, on_event)]
