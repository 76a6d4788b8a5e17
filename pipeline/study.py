"""The trial loop: ask Ax for parameters, train with the shared trainer, tell Ax, persist, resume.

`run_trial` is a pure, picklable function of (study config, parameters, seed); `run_study` runs it in
slots (this process, or Dask workers: pipeline/parallel.py) and never prints (events go to a callback).
"""
from __future__ import annotations

import functools
import os
import signal
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pipeline.config import DataConfig, resolve_device
from pipeline.data import Dataset, load_dataset
from pipeline.errors import UserError
from pipeline.library_logs import quiet_libraries
from pipeline.models import check_weights
from pipeline.store import LockLost, SchemaUpgraded, Store, StudyRecord, best_trial
from pipeline.study_config import StudyConfig
from pipeline.trainer import Progress, train

INTERRUPTED = "interrupted: the process running this trial stopped before it ended"


@dataclass(frozen=True)
class StudyStarted:
    name: str
    ran: int  # trials that already ran to an end (completed or failed)
    budget: int
    resumed: bool
    requeued: list[dict[str, Any]]  # parameters of interrupted trials that will run again


@dataclass(frozen=True)
class TrialStarted:
    trial_index: int
    number: int  # 1-based position in the budget
    budget: int
    parameters: dict[str, Any]


@dataclass(frozen=True)
class TrialRunning:
    """A worker started a trial (parallel studies only)."""

    trial_index: int
    worker: str


@dataclass(frozen=True)
class TrialEpoch:
    """A trial on a worker finished an epoch (parallel studies only)."""

    trial_index: int
    epoch: int
    epochs: int


@dataclass(frozen=True)
class TrialEnded:
    trial_index: int
    status: str  # completed | failed | interrupted (its worker died; its parameters run again)
    objective: float | None
    error: str | None
    best: tuple[float, int, dict[str, Any]] | None  # best objective so far, its trial, its parameters


@dataclass(frozen=True)
class Outcome:
    """How one trial ended in its slot: a result (completed), an error (raised) or lost (its worker died)."""

    trial_index: int
    result: dict[str, Any] | None = None
    error: str | None = None  # "Type: message"
    details: str = ""  # the traceback's last frames
    lost: str | None = None  # why the trial stopped without an end
    started: float | None = None  # time.time() when training started


@dataclass
class StudySummary:
    """How a `run_study` call went, with where its time went."""

    name: str
    completed: int  # trials completed by this call
    failed: int  # trials that raised in this call
    budget: int
    best: tuple[float, int, dict[str, Any]] | None = None
    stopped: str | None = None  # why the study stopped before its budget, if it did
    seconds: float = 0.0
    proposal_seconds: float = 0.0  # Ax proposing trials
    storage_seconds: float = 0.0  # writing trials to the database (ours and Ax's)
    log_file: str = ""
    new_trials: list[int] = field(default_factory=list)
    start_delays: list[float] = field(default_factory=list)  # seconds from a trial's row to its training


@functools.lru_cache(maxsize=2)
def _dataset(data: DataConfig, device: str) -> Dataset:
    """Decode and move a data set once per process; every trial of a study indexes the same tensors."""
    return load_dataset(data, resolve_device(device))


def run_trial(study: StudyConfig, parameters: dict[str, Any], seed: int, device: str = "auto",
              progress: Progress | None = None, precision: str = "auto") -> dict[str, Any]:
    """Train one proposed configuration; the same code path as `robust-tune train`."""
    config = study.train_config(parameters, seed, device, precision)
    return train(config, _dataset(config.data, str(resolve_device(device))), progress).to_dict()


def trial_outcome(study: StudyConfig, trial_index: int, parameters: dict[str, Any], seed: int, device: str,
                  progress: Progress | None = None, precision: str = "auto") -> Outcome:
    """Train one trial and say how it ended, here or on a worker; a UserError or Ctrl-C propagates."""
    started = time.time()
    try:
        result = run_trial(study, parameters, seed, device, progress, precision)
    except (UserError, KeyboardInterrupt):
        raise
    except Exception as error:  # diverged, out of memory, a bad combination: recorded, the study goes on
        return Outcome(trial_index, error=f"{type(error).__name__}: {error}", details=traceback.format_exc(limit=-3),
                       started=started)
    return Outcome(trial_index, result=result, started=started)


def _refuse_other_study(study: StudyConfig, differing: list[str]) -> None:
    raise UserError(f"a different study named {study.name!r} is already stored (differs in: "
                    f"{', '.join(differing) or 'details'}); give this study another name, nothing was changed")


def _kill_point(name: str) -> None:
    """Fault-injection hook for tests: with ROBUST_TUNE_KILL_AT=name in the environment, the process
    kills itself (SIGKILL) here, so a test can stop a study between two of its writes."""
    if os.environ.get("ROBUST_TUNE_KILL_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


class StudyInterrupted(KeyboardInterrupt):
    """Ctrl-C during trials: they are stored as interrupted and will run again first."""

    def __init__(self, study: str, trial_indices: list[int]) -> None:
        super().__init__(f"trial(s) {', '.join(map(str, trial_indices))} of study {study} were stopped")
        self.study, self.trial_indices = study, trial_indices


class InProcessSlot:
    """One trial at a time, trained in this process when the study loop waits for it."""

    capacity = 1

    def __init__(self, study: StudyConfig, device: str, on_event: Callable[[Any], None],
                 precision: str = "auto") -> None:
        self.study, self.device, self.on_event, self.precision = study, device, on_event, precision
        self.queued: tuple[int, dict[str, Any], int] | None = None

    def __enter__(self) -> InProcessSlot:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def submit(self, trial_index: int, parameters: dict[str, Any], seed: int) -> None:
        self.queued = (trial_index, parameters, seed)

    def wait(self) -> list[Outcome]:
        """Train the submitted trial; a UserError or Ctrl-C propagates (the loop stops the study)."""
        (index, parameters, seed), self.queued = self.queued, None
        return [trial_outcome(self.study, index, parameters, seed, self.device, self.on_event, self.precision)]


def reconcile(store: Store, study_id: int, searcher: Any) -> list[dict[str, Any]]:
    """Make the tool's table and Ax agree after a process stopped between any two writes; returns
    the parameters of interrupted trials, to run again before anything new.

    Our rows are written before Ax is told, so a trial still pending in Ax is: completed or failed
    in our table (killed before Ax was told: tell Ax from the stored record), or running,
    interrupted or absent there (killed during the trial, or before its row: run it again)."""
    store.interrupt_running_trials(study_id, INTERRUPTED)
    rows = {t.trial_index: t for t in store.trials(study_id)}
    requeued = []
    for index in searcher.pending():
        row = rows.get(index)
        if row is not None and row.status == "completed":
            searcher.complete(index, row.metrics)
        elif row is not None and row.status == "failed":
            searcher.fail(index)
        else:
            searcher.interrupt(index, INTERRUPTED)
            requeued.append(searcher.parameters(index))
    return requeued


def create_study(store: Store, study: StudyConfig) -> StudyRecord:
    """Store a new study: its row and Ax's experiment in one transaction, so a failure or a kill while
    creating it leaves nothing; or return the study another process stored first under its name."""
    from pipeline.search import ax_writes_through, has_experiment, new_client, use_database

    use_database(store.url)  # Ax's tables, if missing

    def create_ax_experiment(connection: Any) -> None:
        with ax_writes_through(connection):
            if has_experiment(study.name):
                raise UserError(f"the database already holds an Ax experiment named {study.name!r} that is no "
                                "robust-tune study; give the study another name, nothing was changed")
            new_client(study, store.url)
        _kill_point("in-study-creation")

    return store.create_study(study, also=create_ax_experiment)


def run_study(study: StudyConfig, db: str | None = None, device: str = "auto", trials: int | None = None,
              log_file: str | Path = "runs/robust-tune.log",
              on_event: Callable[[Any], None] = lambda event: None,
              workers: int | None = None, scheduler: str | None = None, trials_per_gpu: int = 1,
              precision: str = "auto") -> StudySummary:
    """Run (or resume) `study` until `trials` (default: its budget) trials have run.

    The budget counts trials that ran to an end, completed or failed; a trial interrupted by a
    killed process does not count and its parameters run again first. One process at a time runs
    a study; another gets a UserError naming it. With `workers` (a Dask cluster on this machine) or
    `scheduler` (an existing Dask cluster) several trials run at once; this process alone talks to Ax
    and writes the database, asking for one trial whenever a worker is free.
    """
    start = time.perf_counter()
    budget = trials or study.budget.trials
    parallel = workers is not None or scheduler is not None
    if parallel:
        from pipeline.parallel import check_options

        check_options(workers, scheduler, trials_per_gpu)
    # As trials will load the data (normalisation resolved); a bad precision or bad data fails here,
    # before the database is touched.
    data = study.train_config({}, study.seed, device, precision).data
    check_weights(study.backbone, study.weights, _dataset(data, str(resolve_device(device))).in_channels)
    store = Store(db, on_upgrade=lambda message: on_event(SchemaUpgraded(message)))
    log_path = quiet_libraries(log_file)
    stored = store.study(study.name) or create_study(store, study)
    if differing := stored.study.differences(study):
        _refuse_other_study(study, differing)
    if parallel:
        from pipeline.parallel import DaskSlots

        slots: Any = DaskSlots(study, device, on_event, str(log_path), workers, scheduler, trials_per_gpu,
                               precision)
    else:
        slots = InProcessSlot(study, device, on_event, precision)
    with store.lock_study(stored) as lock, slots:
        from pipeline.search import Searcher  # after quiet_libraries: importing Ax prints otherwise

        summary = StudySummary(study.name, 0, 0, budget, log_file=str(log_path))
        searcher = Searcher(study, store.url)
        requeued = reconcile(store, stored.id, searcher)
        ran = sum(t.status in ("completed", "failed") for t in store.trials(stored.id))
        on_event(StudyStarted(study.name, ran, budget, ran > 0 or bool(requeued), requeued))
        running: dict[int, tuple[int, float]] = {}  # Ax's trial index -> (our row, when it was stored)
        consecutive_failures = 0
        try:
            while True:
                while not summary.stopped and ran + len(running) < budget and len(running) < slots.capacity:
                    tick = time.perf_counter()
                    if requeued:  # an interrupted configuration runs again before anything new is proposed
                        parameters = requeued.pop(0)
                        index = searcher.attach(parameters)
                    elif (asked := searcher.ask(waiting=bool(running))) == "wait":
                        break  # Ax needs a running trial's result first (the Sobol trials are all out)
                    elif asked is not None:
                        index, parameters = asked
                    else:
                        summary.stopped = ("Ax can propose no parameters that were not tried already "
                                           "(search space exhausted)")
                        break
                    _kill_point("after-ask")
                    summary.proposal_seconds += (proposal_seconds := time.perf_counter() - tick)
                    tick = time.perf_counter()
                    lock.check()
                    running[index] = (store.start_trial(stored.id, index, parameters, study.seed, proposal_seconds),
                                      time.time())
                    summary.storage_seconds += time.perf_counter() - tick
                    summary.new_trials.append(index)
                    on_event(TrialStarted(index, ran + len(running), budget, parameters))
                    slots.submit(index, parameters, study.seed)
                if not running:
                    break
                for outcome in slots.wait():  # stops while trials run: the stopped ones end first
                    index = outcome.trial_index
                    row, stored_at = running.pop(index)
                    if outcome.started is not None:
                        summary.start_delays.append(max(0.0, outcome.started - stored_at))
                    tick = time.perf_counter()
                    lock.check()
                    if outcome.lost is not None:  # like a killed run: interrupted, its parameters run again
                        reason = f"{INTERRUPTED} ({outcome.lost})"
                        store.interrupt_trial(row, reason)
                        searcher.interrupt(index, reason)
                        requeued.append(searcher.parameters(index))
                        summary.storage_seconds += time.perf_counter() - tick
                        on_event(TrialEnded(index, "interrupted", None, outcome.lost, _best(store, stored)))
                    elif outcome.error is not None:
                        store.fail_trial(row, outcome.error + "\n" + outcome.details, outcome.started)
                        searcher.fail(index)
                        summary.storage_seconds += time.perf_counter() - tick
                        ran, summary.failed = ran + 1, summary.failed + 1
                        consecutive_failures += 1
                        on_event(TrialEnded(index, "failed", None, outcome.error, _best(store, stored)))
                        if consecutive_failures >= study.budget.max_failures and not summary.stopped:
                            summary.stopped = (f"{consecutive_failures} trials failed in a row (budget.max_failures); "
                                               f"last error: {outcome.error}")
                    else:
                        store.complete_trial(row, outcome.result, outcome.started)
                        _kill_point("after-record")
                        searcher.complete(index, outcome.result)
                        summary.storage_seconds += time.perf_counter() - tick
                        ran, summary.completed, consecutive_failures = ran + 1, summary.completed + 1, 0
                        on_event(TrialEnded(index, "completed", outcome.result[study.objective], None,
                                            _best(store, stored)))
        except (UserError, KeyboardInterrupt) as stop:  # the user's problem or wish: stop, run them again later
            # Ax is not told: the trials stay pending there, so the next run requeues them (see reconcile).
            if not isinstance(stop, LockLost):  # the study's trials are the new holder's to mark now
                store.interrupt_running_trials(stored.id, f"{INTERRUPTED} ({type(stop).__name__}: {stop})")
            if isinstance(stop, KeyboardInterrupt) and running:
                raise StudyInterrupted(study.name, sorted(running)) from None
            raise
    summary.best = _best(store, stored)
    summary.seconds = time.perf_counter() - start
    return summary


def _best(store: Store, stored: StudyRecord) -> tuple[float, int, dict[str, Any]] | None:
    """The best completed trial so far by the report's rule: (objective, trial index, parameters)."""
    top = best_trial(stored, store.trials(stored.id))
    return None if top is None else (top.metrics[stored.study.objective], top.trial_index, top.parameters)
