"""The study loop: ask Ax for parameters, have a runner train them, record how each trial ended, resume.

`run_study` never prints (events go to a callback) and never imports Dask: the trials run in the
runner it is given (pipeline/search/trial.py: this process; pipeline/search/parallel.py: Dask workers).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from pipeline.config import DEFAULT_THREADS, resolve_device
from pipeline.spec.epochs import StopRule, objective_curve, prefix_epochs, stop_percentile
from pipeline.errors import ServerLost, UserError
from pipeline.faults import kill_point
from pipeline.library_logs import quiet_libraries
from pipeline.training.models import check_weights
from pipeline.methods import parse_method
from pipeline.store import (DatabaseBusy, SchemaUpgraded, Store, StudyLock, StudyRecord, TrialRecord, TrialStatus,
                            Widening, best_trial, trial_budget, trials_ran)
from pipeline.store.records import EpochRecord
from pipeline.search.bounds import searched_ranges, widenings
from pipeline.spec.study_config import StudyConfig
from pipeline.search.trial import InProcessRunner, OnEvent, Outcome, TrialJob, TrialRunner, dataset_for

if TYPE_CHECKING:  # Ax is imported only once the libraries' output goes to the log (run_study)
    from pipeline.search.ax import Searcher

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
    study: str = ""  # the trial's study (several run at once in a campaign on workers)


@dataclass(frozen=True)
class TrialEnded:
    trial_index: int
    status: TrialStatus  # completed, early-stopped, failed, or interrupted (its parameters run again first)
    objective: float | None
    error: str | None
    best: tuple[float, int, dict[str, Any]] | None  # best objective so far, its trial, its parameters
    prefixes: int = 0  # epoch prefixes of this trial told to Ax as observations of their own
    stopped_at: int | None = None  # the epoch early stopping ended it at
    study: str = ""


@dataclass(frozen=True)
class RangesWidened:
    """The study widened one or more of its ranges: its best trial sat on their soft ends."""

    widenings: tuple[Widening, ...]
    budget: int  # the study's budget now (with budget.widen_trials once it has widened)
    study: str = ""


@dataclass
class StudySummary:
    """How a `run_study` call went, with where its time went."""

    name: str
    completed: int  # trials completed (or stopped early) by this call
    failed: int  # trials that raised in this call
    budget: int
    best: tuple[float, int, dict[str, Any]] | None = None
    stopped: str | None = None  # why the study stopped before its budget, if it did
    seconds: float = 0.0
    proposal_seconds: float = 0.0  # Ax proposing trials
    storage_seconds: float = 0.0  # writing trials to the database (ours and Ax's)
    log_file: str = ""
    new_trials: list[int] = field(default_factory=list)
    early_stopped: int = 0  # trials stopped early by this call (counted in `completed` too)
    prefixes: int = 0  # epoch prefixes told to Ax by this call
    spans: list[tuple[float, float]] = field(default_factory=list)  # when each trial of this call trained (time.time)

    def idle(self) -> tuple[float, float]:
        """Seconds in which no trial trained, between this call's first trial's start and its last one's end (the
        search's proposals and storage that did not overlap training, and the waits for them), and that interval."""
        if not self.spans:
            return 0.0, 0.0
        interval = max(end for _, end in self.spans) - min(start for start, _ in self.spans)
        return interval - busy_seconds(self.spans), interval


def busy_seconds(spans: list[tuple[float, float]]) -> float:
    """How long at least one of `spans` (start, end) was running: the length of their union."""
    busy, reached = 0.0, float("-inf")
    for start, end in sorted(spans):
        busy, reached = busy + max(0.0, end - max(start, reached)), max(reached, end)
    return busy


def _refuse_other_study(study: StudyConfig, differing: list[str]) -> None:
    raise UserError(f"a different study named {study.name!r} is already stored (differs in: "
                    f"{', '.join(differing) or 'details'}); give this study another name, nothing was changed")


class StudyInterrupted(KeyboardInterrupt):
    """Ctrl-C during trials: they are stored as interrupted and will run again first."""

    def __init__(self, study: str, trial_indices: list[int]) -> None:
        super().__init__(f"trial(s) {', '.join(map(str, trial_indices))} of study {study} were stopped")
        self.study, self.trial_indices = study, trial_indices


def reconcile(store: Store, study_id: int, searcher: Searcher, lock: StudyLock) -> list[int]:
    """Make the tool's table and Ax agree after a process stopped between any two writes; returns
    Ax's indices of the interrupted trials, to run again before anything new.

    Our rows are written before Ax is told, so a trial still pending in Ax is: completed or failed
    in our table (killed before Ax was told: tell Ax from the stored record), or running,
    interrupted or absent there (killed during the trial, or before its row: run it again). An interrupted trial
    that an earlier run stopped before running it again (no later trial has its parameters) runs again too."""
    store.interrupt_running_trials(study_id, INTERRUPTED, lock=lock)
    rows = {t.trial_index: t for t in store.trials(study_id)}
    requeued = []
    for index in searcher.pending():
        row = rows.get(index)
        if row is not None and row.status == TrialStatus.COMPLETED and row.metrics is not None:
            searcher.complete(index, row.metrics, [run.metrics for run in row.seed_runs or ()])
        elif row is not None and row.status == TrialStatus.EARLY_STOPPED and row.metrics is not None:
            searcher.early_stop(index, row.metrics)
        elif row is not None and row.status == TrialStatus.FAILED:
            searcher.abandon(index)
        else:
            searcher.mark_failed(index, INTERRUPTED)
            requeued.append(index)
    again = [searcher.parameters(index) for index in requeued]
    for row in sorted(rows.values(), key=lambda row: row.trial_index):
        if (row.status == TrialStatus.INTERRUPTED and row.trial_index not in requeued and row.parameters not in again
                and not any(later.trial_index > row.trial_index and later.parameters == row.parameters
                            for later in rows.values())):
            requeued.append(row.trial_index)
            again.append(row.parameters)
    return sorted(requeued)


def untold_prefixes(study: StudyConfig, trial: TrialRecord, trials: list[TrialRecord]) -> list[EpochRecord]:
    """With search.epoch_prefixes, the epochs of trained trial `trial` that Ax is still to be told as prefixes of their
    own (StudyLoop.tell_prefixes): every searched epoch count below the one it trained to (and, stopped early, the
    count it stopped at), none once they were told (one transaction tells them all, or none)."""
    if not study.epoch_prefixes or trial.prefix_of is not None or trial.status not in (TrialStatus.COMPLETED,
                                                                                       TrialStatus.EARLY_STOPPED):
        return []
    if any(t.prefix_of == trial.trial_index for t in trials):
        return []
    counts = prefix_epochs(study.search, len(trial.epochs), trial.status == TrialStatus.COMPLETED)
    return [e for e in trial.epochs if e.epoch in counts and e.splits is not None]


def trailing_failures(trials: list[TrialRecord]) -> tuple[int, str | None]:
    """How many of the last trials, in trial order, failed in a row, and the last one's error line: the
    failure policy counts across runs of a study, not from zero at each. Interrupted trials, which run
    again, and epoch prefixes neither count nor break the run."""
    ended = [t for t in trials if t.ran]
    count = 0
    for trial in reversed(ended):
        if trial.status != TrialStatus.FAILED:
            break
        count += 1
    return count, (ended[-1].error or "").split("\n", 1)[0] if count else None


def too_many_failures(count: int, error: str | None) -> str:
    """Why the failure policy stopped the study, and how to go on: the budget may change without making
    the study another one."""
    return (f"{count} trials failed in a row (budget.max_failures); last error: {error}; to go on once the cause "
            f"is fixed, raise budget.max_failures above {count} (in the study file, or with --set "
            f"budget.max_failures=N)")


def create_study(store: Store, study: StudyConfig) -> StudyRecord:
    """Store a new study: its row and Ax's experiment in one transaction, so a failure or a kill while
    creating it leaves nothing; or return the study another process stored first under its name."""
    from pipeline.search.ax import ax_writes_through, has_experiment, new_client, use_database

    use_database(store.url)  # Ax's tables, if missing

    def create_ax_experiment(connection: Any) -> None:
        with ax_writes_through(connection):
            if has_experiment(study.name):
                raise UserError(f"the database already holds an Ax experiment named {study.name!r} that is no "
                                "robust-tune study; give the study another name, nothing was changed")
            new_client(study, store.url)
        kill_point("in-study-creation")

    return store.create_study(study, also=create_ax_experiment)


def check_can_train(study: StudyConfig, device: str, precision: str) -> str | None:
    """Load the data as trials will (normalisation resolved) and check the network's weights fit it: a bad
    precision, data set or weights file fails here, before the database is touched. Returns the data set's
    warning about classes too thin to measure (Dataset.thin_classes), if any."""
    data = study.train_config({}, study.seed, device, precision).data
    dataset = dataset_for(data, str(resolve_device(device)))
    check_weights(study.backbone, study.weights, dataset.in_channels)
    return dataset.thin_classes()


def settle_threads(study: StudyConfig, stored: StudyRecord | None, trials: Sequence[TrialRecord] = ()) -> StudyConfig:
    """`study` at the thread count its trials train with: the one stored with the study (another one given is
    refused: it would mix numbers summed in another order into the study), else the one given, else, for a
    study stored before the count was, the count its last trials recorded, else DEFAULT_THREADS."""
    kept = None if stored is None else stored.study.threads
    if kept is not None and study.threads not in (None, kept):
        raise UserError(f"study {study.name} trains every trial with {kept} torch thread(s), as stored when it was "
                        f"created; threads = {study.threads} would mix numbers summed in another order into it: "
                        "leave --threads (and the study file's threads) out to resume it, or give the study "
                        "another name; nothing was changed")
    recorded = [t.settings.threads for t in trials if t.settings is not None and t.settings.threads is not None]
    return replace(study, threads=kept or study.threads or (recorded[-1] if recorded else DEFAULT_THREADS))


def reading_store(db: str | None) -> Store | None:
    """The database opened for reading, creating and changing nothing; None where there is none to read (a
    database that cannot be opened is refused, with its reason, when the command opens it to write)."""
    try:
        return Store(db, create=False)
    except UserError:
        return None


def as_stored(study: StudyConfig, db: str | None) -> StudyConfig:
    """`study` with what its file leaves to the stored study (`settle_stored`) as the study stored under its name
    in `db` has it; a new study keeps the file's defaults. Changes nothing."""
    if (study.image_size_given and study.strategy_given and study.rare_kept_given and not study.defaulted
            or (store := reading_store(db)) is None):
        return study
    return settle_stored(study, store.study(study.name))


def settle_stored(study: StudyConfig, record: StudyRecord | None) -> StudyConfig:
    """`study` at what its file leaves to the study stored under its name (`record`; None: not stored): its image
    size (StudyConfig.settle_image_size), its search strategy (StudyConfig.settle_strategy), the rare-class
    examples it keeps (StudyConfig.settle_rare_kept), whether its ranges widen (StudyConfig.settle_widen) and the
    parameters it leaves to a default that has changed since (StudyConfig.settle_defaults)."""
    if record is None:
        return (study.settle_image_size(None).settle_strategy(None).settle_rare_kept(None).settle_widen(None)
                .settle_defaults(None))
    stored = record.study
    return (study.settle_image_size(stored.data.image_size).settle_strategy(stored.strategy)
            .settle_rare_kept(stored.data.rare_kept).settle_widen(stored.widen).settle_defaults(stored.fixed))


def open_study(store: Store, study: StudyConfig) -> tuple[StudyRecord, StudyConfig]:
    """The stored study of this name, created when new, and `study` at its image size and strategy (settle_stored) and
    thread count (settle_threads); a different study stored under the name, or another thread count, is refused."""
    known = store.study(study.name)
    study = settle_stored(study, known)
    stored = known or create_study(store, settle_threads(study, None))
    if differing := stored.study.differences(study):
        _refuse_other_study(study, differing)
    return stored, settle_threads(study, stored, store.trials(stored.id))


def run_study(study: StudyConfig, db: str | None = None, device: str = "auto", trials: int | None = None,
              log_file: str | Path = "runs/robust-tune.log", on_event: OnEvent = lambda event: None,
              runner: TrialRunner | None = None, precision: str = "auto") -> StudySummary:
    """Run (or resume) `study` until `trials` (default: its budget) trials have run.

    The budget counts trials that ran to an end, completed or failed; a trial interrupted by a
    killed process does not count and its parameters run again first. One process at a time runs
    a study; another gets a UserError naming it. `runner` trains the trials (default: in this process,
    one at a time); with Dask workers several run at once, and this process alone talks to Ax and
    writes the database, asking for one trial whenever a worker is free. A server lost mid-run (the
    database's, the Dask scheduler) stops it with ServerLost; the trials it was running run again first.
    """
    start = time.perf_counter()
    runner = runner or InProcessRunner()
    study = as_stored(study, db)  # the data is checked at the size the trials will train at
    check_can_train(study, device, precision)
    store = Store(db, on_upgrade=lambda message: on_event(SchemaUpgraded(message)), on_reconnect=on_event)
    with store.reporting_loss(f"run study {study.name}"):  # a lost or busy database: one line, not a traceback
        stored, study, log_path = prepare_study(store, study, log_file)
        with store.lock_study(stored) as lock, runner:
            loop = new_loop(store, stored, study, lock, trials, log_path, on_event, device, precision)
            loop.started()
            run_loops([loop], runner, on_event)
        loop.summary.best = loop.best()
    loop.summary.seconds = time.perf_counter() - start
    return loop.summary


def prepare_study(store: Store, study: StudyConfig, log_file: str | Path) -> tuple[StudyRecord, StudyConfig, Path]:
    """The stored study of `study`'s name, created when new (`open_study`), `study` as stored, and the library log
    the libraries' output now goes to; a different study stored under the name is refused before the log is made."""
    known = store.study(study.name)
    study = settle_stored(study, known)
    if known is not None and (differing := known.study.differences(study)):
        _refuse_other_study(study, differing)  # before the log file: a refusal creates nothing
    log_path = quiet_libraries(log_file)
    stored, study = open_study(store, study)
    return stored, study, log_path


def new_loop(store: Store, stored: StudyRecord, study: StudyConfig, lock: StudyLock, trials: int | None,
             log_path: Path, on_event: OnEvent, device: str, precision: str) -> StudyLoop:
    """A study's loop, its searcher loaded from the database and reconciled with our table (`reconcile`);
    `lock` must be held."""
    from pipeline.search.ax import Searcher  # after quiet_libraries: importing Ax prints otherwise

    return StudyLoop(study, store, stored, Searcher(study, store.url, lock), lock,
                     StudySummary(study.name, 0, 0, trials or study.budget.trials, log_file=str(log_path)),
                     on_event, device, precision)


class StudyLoop:
    """One run of a study's loop: ask for a trial whenever the runner has room, record each that ends.

    Only this loop writes: a trial's row is stored before Ax hears of its end, so `reconcile` can make
    the two agree after a kill between any two writes. Every write, ours and Ax's, is fenced by the study's
    lock: a loop that lost it (paused past the stale time and taken over) stops with LockLost at its next
    write or training step, and writes nothing more."""

    def __init__(self, study: StudyConfig, store: Store, stored: StudyRecord, searcher: Searcher, lock: StudyLock,
                 summary: StudySummary, on_event: OnEvent, device: str, precision: str) -> None:
        self.study, self.store, self.stored, self.searcher, self.lock = study, store, stored, searcher, lock
        self.summary, self.on_event, self.device, self.precision = summary, on_event, device, precision
        self.requeued = reconcile(store, stored.id, searcher, lock)  # interrupted trials, run again first
        stored_trials = store.trials(stored.id)
        for trial in stored_trials:  # trained, and stopped before its prefixes were told
            self.tell_prefixes(trial, stored_trials)
        self.ran = trials_ran(stored_trials)
        self.running: dict[int, int] = {}  # Ax's trial index -> our row
        self.widened = store.widenings(stored.id)
        summary.budget = trial_budget(study, bool(self.widened), summary.budget)  # with its allowance once widened
        self.search = searched_ranges(study.search, self.widened)  # the ranges searched now
        self.declared = parse_method(study.method).declared  # which ends of each range may widen
        self.widen(stored_trials)  # stopped after a trial was told and before its widening
        self.failures_in_a_row, last_error = trailing_failures(stored_trials)
        if self.failures_in_a_row >= study.budget.max_failures and self.ran < summary.budget:
            summary.stopped = too_many_failures(self.failures_in_a_row, last_error)  # an earlier run stopped here

    def started(self) -> None:
        self.on_event(StudyStarted(self.study.name, self.ran, self.summary.budget, self.ran > 0 or bool(self.requeued),
                                   [self.searcher.parameters(index)  # those the budget still has room for
                                    for index in self.requeued[:max(0, self.summary.budget - self.ran)]]))

    def has_room(self, runner: TrialRunner) -> bool:
        """Whether another trial may start: the budget not reached, the runner not full (its places and the trials
        that wait for one: `TrialRunner.ahead`), nothing stopped us."""
        return (not self.summary.stopped and self.ran + len(self.running) < self.summary.budget
                and len(self.running) < runner.capacity + runner.ahead)

    def ask(self) -> TrialJob | None:
        """The next trial, stored as running: an interrupted configuration first, else Ax's proposal;
        None while Ax waits for a running trial, or when it has nothing left to propose (the study stops)."""
        tick = time.perf_counter()
        if self.requeued:
            interrupted = self.requeued.pop(0)
            index, parameters = self.searcher.rerun(interrupted), self.searcher.parameters(interrupted)
        elif isinstance(asked := self.searcher.ask(waiting=bool(self.running)), str):
            return None  # "wait": Ax needs a running trial's result first (the Sobol trials are all out)
        elif asked is None:
            self.summary.stopped = "Ax can propose no parameters that were not tried already (search space exhausted)"
            return None
        else:
            index, parameters = asked
        kill_point("after-ask")
        self.summary.proposal_seconds += (proposal_seconds := time.perf_counter() - tick)
        tick = time.perf_counter()
        self.lock.check()
        row = self.store.start_trial(self.stored.id, index, parameters, self.study.seed, proposal_seconds,
                                     lock=self.lock)
        self.running[index] = row
        self.summary.storage_seconds += time.perf_counter() - tick
        self.summary.new_trials.append(index)
        self.on_event(TrialStarted(index, self.ran + len(self.running), self.summary.budget, parameters,
                                   self.study.name))
        return TrialJob(self.study, index, parameters, self.study.seed, self.device, self.precision, self.stop_rule())

    def stop_rule(self) -> StopRule | None:
        """Early stopping for the next trial (budget.early_stopping), against the curves of the study's objective of
        every trial trained before it; None when off."""
        budget = self.study.budget
        percentile = stop_percentile(budget.early_stopping, budget.early_stopping_percentile)
        if percentile is None:
            return None
        curves = tuple(objective_curve([e.metrics for e in t.epochs], self.study.objective)
                       for t in self.store.trials(self.stored.id) if t.ran and t.status != TrialStatus.FAILED)
        return StopRule(percentile, budget.early_stopping_min_epochs, tuple(c for c in curves if c))

    def record(self, outcome: Outcome) -> None:
        """Store how a trial ended, then tell Ax (in that order: see `reconcile`)."""
        row = self.running.pop(outcome.trial_index)
        if outcome.started is not None:
            self.summary.spans.append((outcome.started, time.time()))
        tick = time.perf_counter()
        self.lock.check()
        prefixes, stopped_at = 0, None  # epoch prefixes told, and where early stopping ended the trial
        if outcome.lost is not None:
            status, objective, error = TrialStatus.INTERRUPTED, None, outcome.lost
            self.requeue(outcome.trial_index, row, f"{INTERRUPTED} ({outcome.lost})")
        elif outcome.error is not None:
            status, objective, error = TrialStatus.FAILED, None, outcome.error
            self.store.fail_trial(row, outcome.error + "\n" + outcome.details, outcome.started, lock=self.lock)
            self.searcher.abandon(outcome.trial_index)
        else:
            result = outcome.result
            assert result is not None  # an outcome neither lost nor failed carries its run
            stopped_at = result.stopped_at
            status, error = TrialStatus.EARLY_STOPPED if stopped_at else TrialStatus.COMPLETED, None
            objective = result.metrics[self.study.objective]
            self.store.complete_trial(row, result, outcome.started, lock=self.lock)
            kill_point("after-record")
            if stopped_at:
                self.searcher.early_stop(outcome.trial_index, result.metrics)
                self.summary.early_stopped += 1
            else:
                self.searcher.complete(outcome.trial_index, result.metrics, [r.metrics for r in result.seed_runs])
            kill_point("after-tell")
            if self.study.epoch_prefixes:  # reads the study's trials: only where there are prefixes to tell
                trials = self.store.trials(self.stored.id)
                prefixes = self.tell_prefixes(next(t for t in trials if t.id == row), trials)
        if status != TrialStatus.INTERRUPTED:
            self.ran += 1
            self.count(status, error)
        self.summary.storage_seconds += time.perf_counter() - tick
        trials = self.store.trials(self.stored.id)
        self.on_event(TrialEnded(outcome.trial_index, status, objective, error, self.best(trials), prefixes,
                                 stopped_at, self.study.name))
        if status in (TrialStatus.COMPLETED, TrialStatus.EARLY_STOPPED):
            self.widen(trials)

    def widen(self, trials: list[TrialRecord]) -> None:
        """With [search] widen: each soft end of a range that the best trial so far sits on moves outward
        (pipeline/search/bounds.py), in Ax's search space and in our table in one transaction, and the study goes on
        over the wider range; the first widening adds budget.widen_trials to the budget. Not once the budget is spent
        (the report then says the range may cut the best off). Decided from stored trials alone, so a study stopped
        before a widening makes the same one when it resumes."""
        allowance = 0 if self.widened else self.study.budget.widen_trials
        if (not self.study.widen or self.study.multi_objective  # a Pareto front has no one best to follow
                or self.ran + len(self.running) + len(self.requeued) >= self.summary.budget + allowance):  # none left
            return
        top = best_trial(self.stored, trials)
        if top is None:
            return
        moved = widenings(self.search, self.declared, top.parameters, top.trial_index, self.ran)
        if not moved:
            return

        def store_them(connection: Any) -> None:
            self.store.add_widenings(connection, self.stored.id, moved)
            kill_point("in-widening")

        self.lock.check()
        self.searcher.widen({w.parameter: w.after for w in moved}, store_them)
        self.summary.budget += allowance
        self.widened += moved
        self.search = searched_ranges(self.search, moved)
        self.on_event(RangesWidened(tuple(moved), self.summary.budget, self.study.name))

    def tell_prefixes(self, trial: TrialRecord, trials: list[TrialRecord]) -> int:
        """With search.epoch_prefixes: tell Ax, and store, the exact result of every searched epoch count below the
        one `trial` trained to (and, stopped early, the count it stopped at), all in one transaction, unless they
        were told already (a resumed study: the transaction left all or none). Returns how many were told."""
        observed = untold_prefixes(self.study, trial, trials)
        if not observed:
            return 0
        observations = [({**trial.parameters, "epochs": e.epoch}, e.metrics)
                        for e in observed]

        def store_them(connection: Any, indices: list[int]) -> None:
            for index, epoch in zip(indices, observed):
                self.store.add_prefix(connection, self.stored.id, index, trial, epoch)

        self.searcher.tell_prefixes(observations, store_them)
        self.summary.prefixes += len(observed)
        return len(observed)

    def requeue(self, index: int, row: int, reason: str) -> None:
        """A trial that lost its worker: interrupted, as after a killed run, and its parameters run again."""
        self.store.interrupt_trial(row, reason, lock=self.lock)
        self.searcher.mark_failed(index, reason)
        self.requeued.append(index)

    def count(self, status: str, error: str | None) -> None:
        """The failure policy: budget.max_failures trials failing in a row stop the study, counted over
        every run of it (see `trailing_failures`)."""
        if status != TrialStatus.FAILED:
            self.summary.completed, self.failures_in_a_row = self.summary.completed + 1, 0
            return
        self.summary.failed, self.failures_in_a_row = self.summary.failed + 1, self.failures_in_a_row + 1
        if self.failures_in_a_row >= self.study.budget.max_failures and not self.summary.stopped:
            self.summary.stopped = too_many_failures(self.failures_in_a_row, error)

    def interrupt(self, stop: BaseException) -> None:
        """Store the running trials as interrupted, where this loop may still write: Ax is not told, so they stay
        pending there and the next run requeues them (see `reconcile`). A loop that lost the study's lock writes
        nothing more: the study is another process's now, or the database cannot be reached (its trials are left
        running, and the next run requeues them)."""
        if (self.lock.lost is None and not isinstance(stop, DatabaseBusy)  # a busy database would refuse it too
                and not (isinstance(stop, ServerLost) and not self.store.answers())):  # nor can a lost server
            self.store.interrupt_running_trials(self.stored.id, f"{INTERRUPTED} ({type(stop).__name__}: {stop})",
                                                lock=self.lock)

    def predict(self) -> None:
        """When trials completed in this run: the study's GP's prediction of every completed trial, stored (the
        model's pick, shown beside the best observed trial), and the importance of each searched parameter for
        its (first) objective. The study's own GP judges them (the default GP for Sobol and random), whatever
        proposed each trial."""
        if not self.summary.completed:
            return
        from pipeline.search.surrogate import judge_study

        tick = time.perf_counter()
        predictions, importance = judge_study(self.searcher.experiment, self.study.objective,
                                              strategy=self.study.strategy)
        if predictions and not self.study.multi_objective:  # a Pareto set has no one best to predict
            self.store.save_predictions(self.stored.id, predictions, lock=self.lock)
        if importance is not None:
            self.store.save_importance(self.stored.id, importance, lock=self.lock)
        self.summary.proposal_seconds += time.perf_counter() - tick

    def best(self, trials: list[TrialRecord] | None = None) -> tuple[float, int, dict[str, Any]] | None:
        """The best completed trial so far by the report's rule, among `trials` (the study's, read when not given):
        (objective, trial index, parameters)."""
        top = best_trial(self.stored, self.store.trials(self.stored.id) if trials is None else trials)
        return None if top is None or top.metrics is None else (top.metrics[self.study.objective], top.trial_index,
                                                                top.parameters)


def run_loops(loops: list[StudyLoop], runner: TrialRunner, on_event: OnEvent,
              finished: Callable[[StudyLoop], None] = lambda loop: None) -> None:
    """Drive every loop of `loops` on `runner` until each ran its budget or stopped: the one submit-and-wait loop of
    a study run alone and of several run at once. Whenever the runner has room, the study running the fewest trials
    (the one asked longest ago among equals, so that none starves) is asked for the next one; each outcome goes
    back to the study that asked for it (an Outcome names its job's study). A study that ends is judged (`predict`)
    and handed to `finished`. A stop (a UserError, a lost server, Ctrl-C) stores every study's running trials as
    interrupted, to run again first, and propagates (Ctrl-C in a study run alone as StudyInterrupted)."""
    _Together(loops, runner, on_event, finished).run()


class _Together:
    """The loop over the study loops sharing one runner."""

    def __init__(self, loops: list[StudyLoop], runner: TrialRunner, on_event: OnEvent,
                 finished: Callable[[StudyLoop], None]) -> None:
        self.loops, self.runner, self.on_event, self.finished = loops, runner, on_event, finished
        self.by_name = {loop.study.name: loop for loop in loops}
        self.turns = {loop.study.name: number for number, loop in enumerate(loops)}  # lower: asked first
        self.next_turn = len(loops)

    def run(self) -> None:
        active = list(self.loops)
        try:
            while active:
                waiting = self.fill(active)
                for loop in [loop for loop in active if not loop.running]:  # nothing running, nothing more to ask
                    if loop.study.name in waiting or not loop.has_room(self.runner):
                        active.remove(loop)
                        loop.predict()
                        self.finished(loop)
                if not active:
                    return
                for outcome in self.runner.wait(self.progress):  # stops while trials run: the stopped ones end first
                    # a runner that does not name the study trains one study's trials
                    self.by_name.get(outcome.study, self.loops[0]).record(outcome)
        except (UserError, ServerLost, KeyboardInterrupt) as stop:  # stop every study, run them again later
            for loop in active:
                loop.interrupt(stop)
            if isinstance(stop, KeyboardInterrupt) and len(self.loops) == 1 and self.loops[0].running:
                raise StudyInterrupted(self.loops[0].study.name, sorted(self.loops[0].running)) from None
            raise

    def fill(self, active: list[StudyLoop]) -> set[str]:
        """Submit trials while the runner has room, each time from the study with the fewest running (then the one
        whose turn came longest ago) that may start one; returns the studies whose searcher waits for a result."""
        waiting: set[str] = set()
        while sum(len(loop.running) for loop in active) < self.runner.capacity + self.runner.ahead:
            ready = [loop for loop in active if loop.study.name not in waiting and loop.has_room(self.runner)]
            if not ready:
                break
            loop = min(ready, key=lambda loop: (len(loop.running), self.turns[loop.study.name]))
            job = loop.ask()
            if job is None:  # Ax waits for a running trial, or the study stopped (has_room says so next)
                waiting.add(loop.study.name)
                continue
            self.runner.submit(job)
            self.turns[loop.study.name], self.next_turn = self.next_turn, self.next_turn + 1
        return waiting

    def progress(self, event: Any) -> None:
        """A running trial's progress, passed on through its study's loop; every study's lock is checked on the way,
        so a lost lock stops the trials here, without waiting for their end."""
        for loop in self.loops:
            loop.lock.stop_if_lost()
        found = self.by_name.get(getattr(event, "study", ""))
        (found.on_event if found is not None else self.on_event)(event)
