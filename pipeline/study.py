"""The trial loop: ask Ax for parameters, train with the shared trainer, tell Ax, persist, resume.

`run_trial` is a pure, picklable function of (study config, parameters, seed), so trials could
later be sent to parallel workers; `run_study` drives it and never prints (events go to a callback).
"""
from __future__ import annotations

import functools
import json
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
from pipeline.report import best_trial
from pipeline.store import Store, StudyRecord
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
class TrialEnded:
    trial_index: int
    status: str  # completed | failed
    objective: float | None
    error: str | None
    best: tuple[float, int, dict[str, Any]] | None  # best objective so far, its trial, its parameters


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


@functools.lru_cache(maxsize=2)
def _dataset(data: DataConfig, device: str) -> Dataset:
    """Decode and move a data set once per process; every trial of a study indexes the same tensors."""
    return load_dataset(data, resolve_device(device))


def run_trial(study: StudyConfig, parameters: dict[str, Any], seed: int, device: str = "auto",
              progress: Progress | None = None) -> dict[str, Any]:
    """Train one proposed configuration; the same code path as `robust-tune train`."""
    config = study.train_config(parameters, seed, device)
    return train(config, _dataset(config.data, str(resolve_device(device))), progress).to_dict()


def _differences(new: Any, old: Any, path: str = "") -> list[str]:
    """Dotted paths where two JSON-like values differ."""
    if isinstance(new, dict) and isinstance(old, dict):
        return [d for key in sorted(set(new) | set(old))
                for d in _differences(new.get(key), old.get(key), f"{path}.{key}" if path else key)]
    return [] if new == old else [path]


def _refuse_other_study(study: StudyConfig, stored_config: dict[str, Any]) -> None:
    identity = {k: v for k, v in _jsonish(study.to_dict()).items() if k not in ("budget", "description")}
    differing = _differences(identity, {k: stored_config.get(k) for k in identity})
    raise UserError(f"a different study named {study.name!r} is already stored (differs in: "
                    f"{', '.join(differing) or 'details'}); give this study another name, nothing was changed")


def _jsonish(value: Any) -> Any:
    """`value` as the database's JSON columns give it back (tuples become lists and so on)."""
    return json.loads(json.dumps(value, default=str))


def _kill_point(name: str) -> None:
    """Fault-injection hook for tests: with ROBUST_TUNE_KILL_AT=name in the environment, the process
    kills itself (SIGKILL) here, so a test can stop a study between two of its writes."""
    if os.environ.get("ROBUST_TUNE_KILL_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


class StudyInterrupted(KeyboardInterrupt):
    """Ctrl-C during a trial: the trial is stored as interrupted and will run again first."""

    def __init__(self, study: str, trial_index: int) -> None:
        super().__init__(f"trial {trial_index} of study {study} was stopped")
        self.study, self.trial_index = study, trial_index


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


def run_study(study: StudyConfig, db: str | None = None, device: str = "auto", trials: int | None = None,
              log_file: str | Path = "runs/robust-tune.log",
              on_event: Callable[[Any], None] = lambda event: None) -> StudySummary:
    """Run (or resume) `study` until `trials` (default: its budget) trials have run.

    The budget counts trials that ran to an end, completed or failed; a trial interrupted by a
    killed process does not count and its parameters run again first. One process at a time runs
    a study; another gets a UserError naming it.
    """
    start = time.perf_counter()
    budget = trials or study.budget.trials
    data = study.train_config({}, study.seed).data  # as trials will load it (normalisation resolved)
    _dataset(data, str(resolve_device(device)))  # bad data fails here, before the database is touched
    check_weights(study.backbone, study.weights, _dataset(data, str(resolve_device(device))).in_channels)
    store = Store(db)
    stored = store.study(study.name) or store.create_study(study.name, study.fingerprint(),
                                                           _jsonish(study.to_dict()))
    if stored.fingerprint != study.fingerprint():
        _refuse_other_study(study, stored.config)
    _kill_point("after-study-row")
    with store.lock_study(stored):
        log_path = quiet_libraries(log_file)
        from pipeline.search import Searcher  # after quiet_libraries: importing Ax prints otherwise

        summary = StudySummary(study.name, 0, 0, budget, log_file=str(log_path))
        searcher = Searcher(study, store.url)  # new, or stored (also after a crash right after creating it)
        requeued = reconcile(store, stored.id, searcher)
        ran = sum(t.status in ("completed", "failed") for t in store.trials(stored.id))
        on_event(StudyStarted(study.name, ran, budget, ran > 0 or bool(requeued), requeued))
        consecutive_failures = 0
        while ran < budget:
            tick = time.perf_counter()
            if requeued:  # an interrupted configuration runs again before anything new is proposed
                parameters = requeued.pop(0)
                index = searcher.attach(parameters)
            elif (asked := searcher.ask()) is not None:
                index, parameters = asked
            else:
                summary.stopped = "Ax can propose no parameters that were not tried already (search space exhausted)"
                break
            _kill_point("after-ask")
            summary.proposal_seconds += (proposal_seconds := time.perf_counter() - tick)
            tick = time.perf_counter()
            row = store.start_trial(stored.id, index, parameters, study.seed, proposal_seconds)
            try:
                summary.storage_seconds += time.perf_counter() - tick
                summary.new_trials.append(index)
                on_event(TrialStarted(index, ran + 1, budget, parameters))
                result = run_trial(study, parameters, study.seed, device, on_event)
            except (UserError, KeyboardInterrupt) as stop:  # the user's problem or wish: stop, run it again later
                # Ax is not told: the trial stays pending there, so the next run requeues it (see reconcile).
                store.interrupt_running_trials(stored.id, f"{INTERRUPTED} ({type(stop).__name__}: {stop})")
                if isinstance(stop, KeyboardInterrupt):
                    raise StudyInterrupted(study.name, index) from None
                raise
            except Exception as error:  # diverged, out of memory, a bad combination: record it, go on
                message = f"{type(error).__name__}: {error}"
                tick = time.perf_counter()
                store.fail_trial(row, message + "\n" + traceback.format_exc(limit=-3))
                searcher.fail(index)
                summary.storage_seconds += time.perf_counter() - tick
                ran, summary.failed, consecutive_failures = ran + 1, summary.failed + 1, consecutive_failures + 1
                on_event(TrialEnded(index, "failed", None, message, _best(store, stored)))
                if consecutive_failures >= study.budget.max_failures:
                    summary.stopped = (f"{consecutive_failures} trials failed in a row (budget.max_failures); "
                                       f"last error: {message}")
                    break
                continue
            tick = time.perf_counter()
            store.complete_trial(row, result)
            _kill_point("after-record")
            searcher.complete(index, result)
            summary.storage_seconds += time.perf_counter() - tick
            ran, summary.completed, consecutive_failures = ran + 1, summary.completed + 1, 0
            on_event(TrialEnded(index, "completed", result[study.objective], None, _best(store, stored)))
    summary.best = _best(store, stored)
    summary.seconds = time.perf_counter() - start
    return summary


def _best(store: Store, stored: StudyRecord) -> tuple[float, int, dict[str, Any]] | None:
    """The best completed trial so far by the report's rule: (objective, trial index, parameters)."""
    top = best_trial(stored, store.trials(stored.id))
    return None if top is None else (top.metrics[stored.config["objective"]], top.trial_index, top.parameters)
