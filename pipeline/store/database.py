"""The Store: the tool's records of studies, trials and evaluations in any SQLAlchemy database (SQLite by
default, PostgreSQL for a shared server), read and written as typed records.

A study's row and Ax's experiment are created in one transaction, and deleted in one. A trial's row is
written when it starts (so a crash leaves it visibly `running`) and completed in one transaction when it
ends. The writes of a study's lock holder take its `lock`: each is then committed only while the holder
still holds it (LockLost otherwise, and nothing written). Writers open the database at this version's
schema (upgrading one written by an earlier version); readers never change it. On a server, a read or write that lost
its connection (a restart) is made again once the server answers (reconnect.py).
"""
from __future__ import annotations


import datetime as dt
import functools
from dataclasses import replace
import json
import re
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Concatenate, ContextManager, Iterator, ParamSpec, TypeVar

import sqlalchemy as sa

from pipeline.errors import DatabaseBusy, ServerLost, UserError
from pipeline.output_file import make_folder
from pipeline.store import lock as lock_module
from pipeline.store.health import check_intact, damaged_now, fault_in, opened, readable, watch
from pipeline.store.lock import StudyLock, busy_error, is_busy, now, take_campaign_lock, take_lock
from pipeline.store.reconnect import Reconnected, Reconnecting, database_server
from pipeline.config import DEFAULT_DB, RunSettings
from pipeline.params import Range
from pipeline.store.records import (CampaignRecord, EpochRecord, EvaluationRecord, ImportanceRecord, ParameterShare,
                                    StoredMetrics, StudyRecord, TrialRecord, TrialStatus, Widening, seed_runs_read)
from pipeline.store.schema import campaigns, epochs, evaluations, importance, studies, trials, widenings
from pipeline.store.upgrade import check_readable, upgrade_schema
from pipeline.spec.study_config import StudyConfig

if TYPE_CHECKING:
    from pipeline.spec.campaign_config import CampaignConfig, TaskChanges
    from pipeline.training.result import RunResult



def database_url(db: str | None, create: bool = True) -> str:
    """A SQLAlchemy URL for `db`: a plain path means a SQLite file, and postgresql:// means PostgreSQL
    through psycopg (the `postgres` extra). With `create` a SQLite file's folder is made; without it
    a SQLite file that does not exist is a UserError and nothing is created."""
    db = db or DEFAULT_DB
    is_path = not _is_url(db)
    if is_path and "://" in db:  # a URL without its dialect, not a file name
        raise UserError(f"malformed database URL {db!r}: expected dialect://..., e.g. sqlite:///runs/x.db")
    try:
        url = sa.engine.make_url(f"sqlite:///{db}" if is_path else db)
    except sa.exc.ArgumentError:
        raise UserError(f"malformed database URL {db!r}: expected dialect://..., e.g. sqlite:///runs/x.db "
                        "(a file whose name has a ':' is written ./NAME)") from None
    if is_path and url.database != db:
        raise UserError(f"database path {db!r} cannot be written as a SQLite URL; rename it without '?' or '#'")
    file = sqlite_file(url)
    if file is None and url.get_backend_name() == "sqlite":
        raise UserError(f"database URL {db!r} names an in-memory SQLite database, which keeps nothing; "
                        "name a file, e.g. sqlite:///runs/x.db")
    if file is not None and not create and not file.is_file():
        raise UserError(f"no database at {file}; run a study first, or name one with --db")
    if file is not None and create:
        make_folder(file.parent, "--db", file)
    if url.drivername in ("postgresql", "postgres"):  # SQLAlchemy's default driver is psycopg2; ours is psycopg 3
        return url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return f"sqlite:///{db}" if is_path else db


def _is_url(db: str) -> bool:
    """Whether `db` is written as a URL (dialect:...), not a file path; a one-letter scheme is a Windows drive."""
    return bool(re.match(r"[A-Za-z][A-Za-z0-9+.-]+:", db))


def shown_database(db: str) -> str:
    """`db` as the user gave it (a path or a URL), a URL's password hidden: for the commands a message suggests."""
    if not _is_url(db):
        return db
    try:
        return sa.engine.make_url(db).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return db


def sqlite_file(url: str | sa.engine.URL) -> Path | None:
    """The file of a SQLite URL; None for an in-memory SQLite database or another database server."""
    url = sa.engine.make_url(url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database)


def _open_error(error: Exception, shown: str) -> str:
    """One line saying why the database at `shown` cannot be opened."""
    if isinstance(error, ImportError):
        driver = getattr(error, "name", None) or str(error)
        if driver == "psycopg":
            return (f"cannot open database {shown}: PostgreSQL's driver is not installed; "
                    "install it with: pip install 'robust-tune[postgres]'")
        return (f"cannot open database {shown}: the driver {driver} is not installed (for PostgreSQL write "
                "postgresql://... and pip install 'robust-tune[postgres]')")
    if isinstance(error, Exception) and is_busy(error):  # a writer stopped while committing keeps readers out too
        return (f"cannot open database {shown}: another process keeps it locked in the middle of a write (one "
                "paused with Ctrl-Z, perhaps); resume or stop that process, then try again; nothing was changed")
    cause = getattr(error, "orig", None) or error  # the driver's own message, without SQLAlchemy's wrapping
    return f"cannot open database {shown}: {' '.join(str(cause).split()) or type(cause).__name__}"


P = ParamSpec("P")
T = TypeVar("T")


def _again_after_loss(method: Callable[Concatenate[Store, P], T]) -> Callable[Concatenate[Store, P], T]:
    """A Store method that reads or writes in transactions of its own, made again from the start once the server
    answers when it lost its connection (pipeline/store/reconnect.py)."""
    @functools.wraps(method)
    def again(self: Store, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.reconnecting.run(lambda: method(self, *args, **kwargs))
    return again


def _started_at(started: float | None) -> dict[str, dt.datetime]:
    """The started_at column's new value, as UTC like every stored time, or no change."""
    if started is None:
        return {}
    return {"started_at": dt.datetime.fromtimestamp(started, dt.timezone.utc).replace(tzinfo=None)}


class Store:
    """Studies, trials and evaluations in one database; every write is its own transaction."""

    def __init__(self, db: str | None = None, create: bool = True, write: bool | None = None,
                 on_upgrade: Callable[[str], None] | None = None,
                 on_reconnect: Callable[[Reconnected], None] | None = None) -> None:
        """Open the database. A writer (`write`, by default `create`) brings it to this version's schema:
        with `create` a new file and its tables are made; a database written by an earlier version is
        upgraded in place (`upgraded` then holds the one line saying so, also given to `on_upgrade`).
        A reader (create=False) creates and changes nothing: a missing database, one without the tool's
        tables, or one written by a newer version is a UserError. On a server, each read or write that lost its
        connection is made again once the server answers, and `on_reconnect` told (reconnect.py)."""
        self.url = database_url(db, create)
        self.shown = sa.engine.make_url(self.url).render_as_string(hide_password=True)  # for messages
        self.upgraded: str | None = None
        self.readable: dict[int, bool] = {}  # in a damaged file, whether each study's records can be read
        write = create if write is None else write
        try:
            url = sa.engine.make_url(self.url)
            # a server's connections are tested before each use, so a restart between two uses passes unseen
            self.engine = sa.create_engine(url, pool_pre_ping=url.get_backend_name() != "sqlite",
                                           connect_args=lock_module.connect_args(url))
            self.reconnecting = Reconnecting.of(self.engine)  # an operation that lost its connection, made again
            if on_reconnect is not None:
                self.reconnecting.notify = on_reconnect
            opened(self.engine.url)
            watch(self.engine)
            if (file := sqlite_file(self.url)) is not None:
                check_intact(self.engine, file, write)  # a damaged file is never written to, and readers say so
            if not create and not sa.inspect(self.engine).has_table(studies.name):
                raise UserError(f"{self.shown} holds no robust-tune studies; run a study first, or name one with --db")
            if write:
                self.upgraded = upgrade_schema(self.engine, self.shown, file)
            else:
                check_readable(self.engine, self.shown)
        except (sa.exc.SQLAlchemyError, ImportError, ValueError, OSError) as error:
            busy = is_busy(error)  # the environment, as a fault of the file is: exit code 1
            raise (fault_in(error, sa.engine.make_url(self.url))
                   or (DatabaseBusy if busy else UserError)(_open_error(error, self.shown))) from None
        if self.upgraded is not None and on_upgrade is not None:
            on_upgrade(self.upgraded)

    @contextmanager
    def reporting_loss(self, doing: str = "go on") -> Iterator[None]:
        """Within the block, a fault of the file or its disk (full, read-only, damaged) is DatabaseFault; a database
        error that lost the connection, or that came while the database no longer answers, is ServerLost naming its
        server: one line each, not a traceback; a write that gave up waiting for another process's lock is
        DatabaseBusy, saying what could not `doing`. Other errors pass unchanged."""
        try:
            yield
        except Exception as error:
            if (fault := fault_in(error, self.engine.url)) is not None:  # a full disk, a read-only or damaged file
                raise fault from None
            if not isinstance(error, (sa.exc.OperationalError, sa.exc.InterfaceError)):
                raise
            if is_busy(error):
                raise busy_error(self.engine, f"could not {doing}", kept="what was stored before is kept") from None
            if not error.connection_invalidated and self.answers():
                raise
            reason = str(getattr(error, "orig", None) or error).strip().split("\n", 1)[0]
            raise ServerLost(f"lost {database_server(self.engine.url)} ({reason})") from None

    def answers(self) -> bool:
        """Whether the database takes a connection and a query now."""
        try:
            with self.engine.connect() as connection:
                connection.execute(sa.text("select 1"))
        except sa.exc.DBAPIError:
            return False
        return True

    @_again_after_loss
    def study(self, name: str) -> StudyRecord | None:
        """The stored study `name`, or None."""
        with self.engine.connect() as connection:
            row = connection.execute(sa.select(studies).where(studies.c.name == name)).first()
        return None if row is None else _study_record(row)

    @_again_after_loss
    def all_studies(self) -> list[StudyRecord]:
        """Every stored study, in the order they were stored; in a damaged file (a reader's), those whose records can
        all be read: the others are left out, and named in the reader's warning (health.damage_found)."""
        with self.engine.connect() as connection:
            rows = connection.execute(sa.select(studies).order_by(studies.c.id)).all()
        found = [_study_record(row) for row in rows]
        if damaged_now() and sqlite_file(self.url) is not None:
            for study in found:
                if study.id not in self.readable:  # read once
                    self.readable[study.id] = readable(lambda: self._read_all(study), study.name, self.engine.url)
            return [study for study in found if self.readable[study.id]]
        return found

    def _read_all(self, study: StudyRecord) -> None:
        """Read every record of `study`: its trials with their curves, runs, widenings and importance."""
        self.trials(study.id)
        self.evaluations(study.id)
        self.widenings(study.id)
        self.importance(study.id)

    def require_study(self, name: str) -> StudyRecord:
        """The stored study `name`; a UserError naming the studies there are when there is none."""
        study = self.study(name)
        if study is None:
            known = ", ".join(sorted(s.name for s in self.all_studies())) or "none"
            raise UserError(f"no study named {name!r} in {self.shown}; known: {known}")
        return study

    @_again_after_loss
    def create_study(self, study: StudyConfig, also: Callable[[sa.Connection], None] | None = None) -> StudyRecord:
        """Store a new study, or return the one another process stored first under its name (the unique
        name decides the race); the caller compares them. `also` writes the study's other records (Ax's)
        through the same connection: all of it is committed together, or none."""
        config = json.loads(json.dumps(study.to_dict(), default=str))  # as the JSON column gives it back
        try:
            with self.engine.begin() as connection:
                try:
                    connection.execute(studies.insert().values(name=study.name, fingerprint=study.fingerprint(),
                                                               config=config, created_at=now()))
                except sa.exc.IntegrityError:
                    raise _AlreadyStored from None
                if also is not None:
                    also(connection)
        except _AlreadyStored:
            pass
        return self.study(study.name)  # type: ignore[return-value]

    def lock_study(self, study: StudyRecord) -> StudyLock:
        """Become the one process running `study`, taking over a stale lock; UserError while another holds it."""
        return take_lock(self.engine, study.id, study.name)

    def _writing(self, lock: StudyLock | None) -> ContextManager[sa.Connection]:
        """A write transaction; with the study's lock, one that commits only while this process holds it."""
        return self.engine.begin() if lock is None else lock.fenced()

    @_again_after_loss
    def start_trial(self, study_id: int, trial_index: int, parameters: dict[str, Any], seed: int,
                    proposal_seconds: float, lock: StudyLock | None = None) -> int:
        """Store a trial as running, before it trains; returns its row's id."""
        with self._writing(lock) as connection:
            result = connection.execute(trials.insert().values(
                study_id=study_id, trial_index=trial_index, status=TrialStatus.RUNNING, parameters=parameters,
                seed=seed, proposal_seconds=proposal_seconds, started_at=now()))
        return int(result.inserted_primary_key[0])  # type: ignore[index]  # an insert always has its key

    @_again_after_loss
    def complete_trial(self, trial_id: int, result: RunResult, started: float | None = None,
                       lock: StudyLock | None = None) -> None:
        """Record a finished trial: metrics, per-class accuracy, curves and timings, all at once; early-stopped
        when its result says where it stopped. `started` (a time.time()) replaces the start time by when training
        really began (on a worker)."""
        with self._writing(lock) as connection:
            connection.execute(trials.update().where(trials.c.id == trial_id).values(
                status=TrialStatus.EARLY_STOPPED if result.stopped_at else TrialStatus.COMPLETED,
                metrics=result.stored_metrics(), settings=result.settings.to_dict(),
                seed_runs=[run.to_dict() for run in result.seed_runs] or None, per_class=result.per_class,
                train_seconds=result.train_seconds, ended_at=now(), **_started_at(started)))
            connection.execute(epochs.insert(), [
                {"trial_id": trial_id, "epoch": e.epoch, "train_loss": e.train_loss, "val_accuracy": e.val.accuracy,
                 **e.splits.to_dict()} for e in result.epochs])

    @staticmethod
    def add_prefix(connection: sa.Connection, study_id: int, trial_index: int, source: TrialRecord,
                   epoch: EpochRecord) -> None:
        """Store epoch `epoch.epoch` of trained trial `source` as a completed trial of its own (Ax's index
        `trial_index`): its parameters at that epoch count, its metrics then, settings that reproduce it. In the
        caller's transaction, which tells Ax of it too (Searcher.tell_prefixes)."""
        settings = source.settings.to_dict() if source.settings is not None else None
        if settings is not None:
            settings["params"] = {**settings["params"], "epochs": epoch.epoch}
        connection.execute(trials.insert().values(
            study_id=study_id, trial_index=trial_index, status=TrialStatus.COMPLETED,
            parameters={**source.parameters, "epochs": epoch.epoch}, seed=source.seed,
            metrics=epoch.splits.metrics_and_examples() if epoch.splits else {}, settings=settings,
            per_class=epoch.splits.per_class() if epoch.splits else {"val": None, "test": None},
            started_at=now(), ended_at=now(), prefix_of=source.trial_index))

    @staticmethod
    def add_widenings(connection: sa.Connection, study_id: int, moved: list[Widening]) -> None:
        """Store the ends of a study's ranges that widened, in the caller's transaction, which widens Ax's search
        space too (Searcher.widen)."""
        connection.execute(widenings.insert(), [
            {"study_id": study_id, "parameter": w.parameter, "side": w.side, "low_before": w.before.low,
             "high_before": w.before.high, "low_after": w.after.low, "high_after": w.after.high, "log": w.after.log,
             "after_trial": w.after_trial, "best_trial": w.best_trial, "value": w.value, "created_at": now()}
            for w in moved])

    @_again_after_loss
    def widenings(self, study_id: int) -> list[Widening]:
        """The ends of the study's ranges that widened, in order; none in a database from before widening."""
        if not sa.inspect(self.engine).has_table(widenings.name):  # readers create no table
            return []
        with self.engine.connect() as connection:
            rows = connection.execute(sa.select(widenings).where(widenings.c.study_id == study_id)
                                      .order_by(widenings.c.id)).all()
        return [Widening(r.parameter, r.side, Range(r.low_before, r.high_before, r.log),
                         Range(r.low_after, r.high_after, r.log), r.after_trial, r.best_trial, r.value) for r in rows]

    @_again_after_loss
    def save_predictions(self, study_id: int, predictions: dict[int, dict[str, float]],
                         lock: StudyLock | None = None) -> None:
        """Store the study's GP's prediction for each completed trial (by Ax index), replacing earlier ones: a
        prediction is the model's view of every trial at once, remade when a run of the study ends."""
        with self._writing(lock) as connection:
            connection.execute(trials.update().where(trials.c.study_id == study_id).values(predicted=None))
            for index, predicted in predictions.items():
                connection.execute(trials.update().where(trials.c.study_id == study_id,
                                                         trials.c.trial_index == index).values(predicted=predicted))

    @_again_after_loss
    def save_importance(self, study_id: int, view: dict[str, Any], lock: StudyLock | None = None) -> None:
        """Store the study's parameter importance (surrogate.parameter_importance), replacing the one before: like
        the predictions, it is the model's view of every trial, remade when a run of the study ends."""
        with self._writing(lock) as connection:
            connection.execute(importance.delete().where(importance.c.study_id == study_id))
            connection.execute(importance.insert().values(
                study_id=study_id, objective=view["objective"], fitted_on=view["fitted_on"], minimum=view["minimum"],
                parameters=view["parameters"], note=view.get("note"), computed_at=now()))

    @_again_after_loss
    def importance(self, study_id: int) -> ImportanceRecord | None:
        """The study's stored parameter importance; None when none was made (or in a database from before it)."""
        if not sa.inspect(self.engine).has_table(importance.name):  # readers create no table
            return None
        with self.engine.connect() as connection:
            row = connection.execute(sa.select(importance).where(importance.c.study_id == study_id)).first()
        if row is None:
            return None
        return ImportanceRecord(row.objective, row.fitted_on, row.minimum,
                                [ParameterShare(**share) for share in row.parameters], row.note)

    @_again_after_loss
    def fail_trial(self, trial_id: int, error: str, started: float | None = None,
                   lock: StudyLock | None = None) -> None:
        """Record a trial that raised, with its error."""
        with self._writing(lock) as connection:
            connection.execute(trials.update().where(trials.c.id == trial_id).values(
                status=TrialStatus.FAILED, error=error, ended_at=now(), **_started_at(started)))

    @_again_after_loss
    def interrupt_trial(self, trial_id: int, reason: str, lock: StudyLock | None = None) -> None:
        """One trial stopped before its end (its worker died); its parameters run again as a new trial."""
        with self._writing(lock) as connection:
            connection.execute(trials.update().where(trials.c.id == trial_id).values(
                status=TrialStatus.INTERRUPTED, error=reason, ended_at=now()))

    @_again_after_loss
    def interrupt_running_trials(self, study_id: int, reason: str, lock: StudyLock | None = None) -> list[int]:
        """Mark trials a killed process left `running` as interrupted; returns their Ax indices."""
        with self._writing(lock) as connection:
            running = connection.execute(sa.select(trials.c.trial_index).where(
                trials.c.study_id == study_id, trials.c.status == TrialStatus.RUNNING)).scalars().all()
            connection.execute(trials.update().where(trials.c.study_id == study_id,
                                                     trials.c.status == TrialStatus.RUNNING)
                               .values(status=TrialStatus.INTERRUPTED, error=reason, ended_at=now()))
        return list(running)

    @_again_after_loss
    def trials(self, study_id: int) -> list[TrialRecord]:
        with self.engine.connect() as connection:
            present = {column["name"] for column in sa.inspect(connection).get_columns(trials.name)}
            columns = [c for c in trials.columns if c.name in present]  # an old database, read as it is
            rows = connection.execute(sa.select(*columns).where(trials.c.study_id == study_id)
                                      .order_by(trials.c.trial_index)).all()
            curves: dict[int, list] = {}
            present = {column["name"] for column in sa.inspect(connection).get_columns(epochs.name)}
            for e in connection.execute(sa.select(*[c for c in epochs.columns if c.name in present]).join(trials)
                                        .where(trials.c.study_id == study_id)
                                        .order_by(epochs.c.trial_id, epochs.c.epoch)):
                curves.setdefault(e.trial_id, []).append(e)
        return [_trial_record(r, curves.get(r.id, [])) for r in rows]

    def add_evaluation(self, study_id: int, variant: str, seed: int, trial_index: int, config: dict[str, Any],
                       result: RunResult, train_class_counts: dict[str, int],
                       lock: StudyLock | None = None, split_counts: dict[str, dict[str, int]] | None = None) -> bool:
        """Store one finished evaluation run; False (and nothing written) when (study, variant, seed) is
        already stored: a stored run is never replaced. `split_counts` ({"val": {class: n}, "test": ...}, from
        0.7.0) goes into per_class under "counts": how many images each class's accuracies rest on."""
        per_class = result.per_class
        return self._insert_evaluation(
            lock, study_id=study_id, variant=variant, seed=seed, trial_index=trial_index, config=config,
            metrics=result.stored_metrics(),
            per_class={**per_class, "counts": split_counts} if split_counts else per_class,
            train_class_counts=train_class_counts, settings=result.settings.to_dict(),
            train_seconds=result.train_seconds, epochs=[epoch.to_dict() for epoch in result.epochs] or None)

    def copy_evaluation(self, study_id: int, variant: str, trial_index: int, run: EvaluationRecord,
                        lock: StudyLock | None = None) -> bool:
        """Store a run stored before (for another study or variant, planned alike on the same seed) as this
        study's variant: what it measured, its settings and its training time as stored, so a run is trained
        once. False (nothing written) when (study, variant, seed) is already stored."""
        return self._insert_evaluation(
            lock, study_id=study_id, variant=variant, seed=run.seed, trial_index=trial_index, config=run.config,
            metrics=run.stored_metrics(), per_class=run.per_class, train_class_counts=run.train_class_counts,
            settings=run.settings.to_dict(), train_seconds=run.train_seconds,
            epochs=[epoch.to_dict() for epoch in run.epochs] or None)

    @_again_after_loss
    def _insert_evaluation(self, lock: StudyLock | None, **values: Any) -> bool:
        """One rt_evaluations row in its own transaction (fenced by `lock`, when given); False when its
        (study, variant, seed) is taken."""
        try:
            with self._writing(lock) as connection:
                connection.execute(evaluations.insert().values(**values, created_at=now()))
        except sa.exc.IntegrityError:
            return False
        return True

    @_again_after_loss
    def matching_evaluation(self, config: dict[str, Any], seed: int, study_id: int, variant: str,
                            fits: Callable[[EvaluationRecord], bool] = lambda run: True
                            ) -> tuple[str, EvaluationRecord] | None:
        """The earliest stored run of any study planned as `config` on `seed` that `fits` (e.g. trained with the
        same thread count), other than (study_id, variant) itself, with its study's name; None when there is none."""
        if not sa.inspect(self.engine).has_table(evaluations.name):
            return None
        with self.engine.connect() as connection:
            rows = connection.execute(
                sa.select(*_present(connection, evaluations), studies.c.name.label("study_name")).join(studies)
                .where(evaluations.c.seed == seed).order_by(evaluations.c.id)).all()
        for row in rows:
            if row.config == config and (row.study_id, row.variant) != (study_id, variant):
                if fits(run := _evaluation_record(row)):
                    return row.study_name, run
        return None

    @_again_after_loss
    def delete_evaluations(self, study_id: int, variant: str) -> int:
        """Remove one variant's stored runs of a study in one transaction; how many there were. The caller
        holds the study's lock. Copies of them stored for other studies are theirs and stay."""
        with self.engine.begin() as connection:
            return connection.execute(evaluations.delete().where(
                evaluations.c.study_id == study_id, evaluations.c.variant == variant)).rowcount

    @_again_after_loss
    def evaluations(self, study_id: int) -> list[EvaluationRecord]:
        """A study's evaluation runs in the order they were stored; none in a database from before them."""
        if not sa.inspect(self.engine).has_table(evaluations.name):  # readers create no table
            return []
        with self.engine.connect() as connection:
            rows = connection.execute(sa.select(*_present(connection, evaluations))
                                      .where(evaluations.c.study_id == study_id)
                                      .order_by(evaluations.c.id)).all()
        return [_evaluation_record(r) for r in rows]

    @_again_after_loss
    def delete_study(self, name: str, lock: StudyLock, also: Callable[[sa.Connection], None] | None = None) -> bool:
        """Remove one study's rows (its per-epoch curves, trials, evaluations, lock and record) in one transaction,
        with what `also` deletes through the same connection (Ax's records); False when there is no such
        study. Other studies are not touched. The transaction is fenced by the study's `lock`, which it
        releases: LockLost, and nothing deleted, when another process has taken the study over."""
        with lock.fenced(removing_study=True) as connection:
            study_id = connection.execute(sa.select(studies.c.id).where(studies.c.name == name)).scalar()
            if study_id is None:
                return False
            if also is not None:
                also(connection)
            its_trials = sa.select(trials.c.id).where(trials.c.study_id == study_id)
            connection.execute(epochs.delete().where(epochs.c.trial_id.in_(its_trials)))
            if sa.inspect(connection).has_table(importance.name):  # a database from before importance has none
                connection.execute(importance.delete().where(importance.c.study_id == study_id))
            if sa.inspect(connection).has_table(widenings.name):  # nor one from before widening
                connection.execute(widenings.delete().where(widenings.c.study_id == study_id))
            if sa.inspect(connection).has_table(evaluations.name):  # a database from before evaluations has none
                connection.execute(evaluations.delete().where(evaluations.c.study_id == study_id))
            connection.execute(trials.delete().where(trials.c.study_id == study_id))
            connection.execute(studies.delete().where(studies.c.id == study_id))
        return True

    @_again_after_loss
    def campaign(self, name: str) -> CampaignRecord | None:
        """The stored campaign `name`, or None (also in a database from before campaigns)."""
        if not sa.inspect(self.engine).has_table(campaigns.name):  # readers create no table
            return None
        with self.engine.connect() as connection:
            row = connection.execute(sa.select(campaigns).where(campaigns.c.name == name)).first()
        return None if row is None else _campaign_record(row)

    @_again_after_loss
    def all_campaigns(self) -> list[CampaignRecord]:
        """Every stored campaign, in the order they were stored; none in a database from before campaigns."""
        if not sa.inspect(self.engine).has_table(campaigns.name):
            return []
        with self.engine.connect() as connection:
            rows = connection.execute(sa.select(campaigns).order_by(campaigns.c.id)).all()
        return [_campaign_record(row) for row in rows]

    def lock_campaign(self, campaign: CampaignRecord) -> StudyLock:
        """Become the one process running `campaign`; UserError while another `compare` of it runs."""
        return take_campaign_lock(self.engine, campaign.id, campaign.name)

    @_again_after_loss
    def require_campaign(self, name: str) -> CampaignRecord:
        """The stored campaign `name`; a UserError naming the campaigns there are when there is none."""
        campaign = self.campaign(name)
        if campaign is None:
            known = []
            if sa.inspect(self.engine).has_table(campaigns.name):
                with self.engine.connect() as connection:
                    known = sorted(connection.execute(sa.select(campaigns.c.name)).scalars())
            raise UserError(f"no campaign named {name!r} in {self.shown}; known: {', '.join(known) or 'none'} "
                            "(run one with `robust-tune compare CAMPAIGN.toml`)")
        return campaign

    @_again_after_loss
    def save_campaign(self, campaign: CampaignConfig) -> CampaignRecord:
        """Store a new campaign, or bring a stored one of the same identity up to date in what may change
        (seeds, replicates, budget, description), or with tasks added (CampaignConfig.task_changes: its stored
        tasks kept as they are); a different campaign stored under the name is a UserError."""
        config = json.loads(json.dumps(campaign.to_dict(), default=str))
        with self.engine.begin() as connection:
            row = connection.execute(sa.select(campaigns).where(campaigns.c.name == campaign.name)).first()
            if row is None:
                try:
                    connection.execute(campaigns.insert().values(name=campaign.name, fingerprint=campaign.fingerprint(),
                                                                 config=config, created_at=now()))
                except sa.exc.IntegrityError:  # another process stored it first: compare with that one
                    return self.save_campaign(campaign)
            elif (row.fingerprint != campaign.fingerprint() and (changes := campaign.task_changes(row.config))
                  and (changes.added or changes.removed or changes.changed)):
                _check_task_changes(campaign.name, changes)  # only tasks added: the campaign grows, its tasks kept
                connection.execute(campaigns.update().where(campaigns.c.id == row.id).values(
                    fingerprint=campaign.fingerprint(), config=config))
            elif row.fingerprint != campaign.fingerprint():
                identity, stored = campaign.identity(), row.config
                stored_resplit = bool(stored.get("evaluation", {}).get("resplit"))
                differing = sorted(k for k in identity if k != "resplit" and stored.get(k) != identity[k])
                differing += ["resplit"] if stored_resplit != bool(identity.get("resplit")) else []
                if differing == ["resplit"]:
                    was = "draw the split again" if stored_resplit else "use the search's one split"
                    raise UserError(f"campaign {campaign.name!r} is stored with confirmation runs that {was} "
                                    f"([evaluate] resplit = {'true' if stored_resplit else 'false'} goes on "
                                    "with it); its runs and this file's would not pair: set resplit so, or give this "
                                    "campaign another name; nothing was changed")
                if set(differing) <= {"studies", "tasks"} and bool(stored.get("tasks")) != bool(campaign.tasks):
                    raise UserError(_tasks_or_none(campaign.name, bool(campaign.tasks)))
                raise UserError(f"a different campaign named {campaign.name!r} is already stored (differs in: "
                                f"{', '.join(differing) or 'details'}); give this campaign another name, nothing "
                                "was changed")
            elif row.config != config:
                connection.execute(campaigns.update().where(campaigns.c.id == row.id).values(config=config))
        return self.campaign(campaign.name)  # type: ignore[return-value]


def _check_task_changes(name: str, changes: TaskChanges) -> None:
    """A campaign of tasks may gain tasks; a stored task it lacks or changes is refused in one line (its studies,
    runs and verdict belong to the stored campaign)."""
    if changes.removed:
        tasks = ", ".join(changes.removed)
        raise UserError(f"campaign {name!r} is stored with task{'s' if len(changes.removed) > 1 else ''} {tasks}, "
                        "which this file lacks: a stored task stays part of its campaign; put it back, or give this "
                        "campaign another name; nothing was changed")
    if changes.changed:
        task, fields = next(iter(changes.changed.items()))
        raise UserError(f"campaign {name!r}: task {task} is stored with other settings (differs in: "
                        f"{', '.join(fields) or 'details'}); a changed task is another task: keep {task} as stored "
                        "and add this one under a new name, or give this campaign another name; nothing was changed")


def _tasks_or_none(name: str, tasks: bool) -> str:
    """Why a file with [tasks] cannot continue a campaign stored without them, or the other way round: a campaign
    without tasks is one unnamed task whose studies are NAME.METHOD, a task's are NAME.TASK.METHOD."""
    if tasks:
        return (f"campaign {name!r} is stored without [tasks] (its studies are {name}.METHOD): tasks can be added "
                "only to a campaign of tasks; give this campaign another name to compare it on several tasks, nothing "
                "was changed")
    return (f"campaign {name!r} is stored with [tasks], which this file lacks: a stored task stays part of its "
            "campaign; put them back, or give this campaign another name; nothing was changed")


def _campaign_record(row: sa.Row) -> CampaignRecord:
    from pipeline.spec.campaign_config import Evaluation
    from pipeline.spec.study_config import EARLIER_PICK

    config = row.config
    # stored before 0.7.0: one split; before the pick was recorded: the best observed
    evaluation = Evaluation(**{"resplit": False, "pick": EARLIER_PICK, **config["evaluation"]})
    if evaluation.primary is not None:  # stored as a JSON list
        evaluation = replace(evaluation, primary=tuple(evaluation.primary))
    return CampaignRecord(row.id, row.name, tuple(config["methods"]), evaluation,
                          config.get("replicates", 1), config.get("budget", {}), config)


def _present(connection: sa.Connection, table: sa.Table) -> list[sa.Column]:
    """The table's columns the database has: a database from before a column is read as it is, never altered."""
    present = {column["name"] for column in sa.inspect(connection).get_columns(table.name)}
    return [column for column in table.columns if column.name in present]


def _trial_record(r: sa.Row, curve: list[sa.Row]) -> TrialRecord:
    """A trials row and its epochs rows as a record (columns an old database lacks read as None)."""
    stored = StoredMetrics.part(r.metrics)
    return TrialRecord(r.id, r.trial_index, TrialStatus(r.status), r.parameters, r.seed, stored.metrics, r.per_class,
                       r.train_seconds, r.proposal_seconds, r.error,
                       None if r.settings is None else RunSettings.from_dict(r.settings),
                       seed_runs_read(getattr(r, "seed_runs", None)), getattr(r, "predicted", None),
                       tuple(EpochRecord.read(e.epoch, e.train_loss, getattr(e, "val", None), getattr(e, "test", None),
                                              e.val_accuracy) for e in curve),
                       getattr(r, "prefix_of", None), stored.examples, stored.distinct_per_batch)


def _evaluation_record(row: sa.Row) -> EvaluationRecord:
    stored = StoredMetrics.part(row.metrics)
    return EvaluationRecord(row.variant, row.seed, row.trial_index, row.config, stored.metrics or {}, row.per_class,
                            row.train_class_counts, RunSettings.from_dict(row.settings), row.train_seconds,
                            tuple(EpochRecord.read(e["epoch"], e["train_loss"], e["val"], e["test"])
                                  for e in getattr(row, "epochs", None) or []), stored.examples,
                            stored.distinct_per_batch)


def _study_record(row: sa.Row) -> StudyRecord:
    return StudyRecord(row.id, row.name, row.fingerprint, StudyConfig.from_dict(row.config), row.created_at)


class _AlreadyStored(Exception):
    """Another process stored a study under the name first."""
