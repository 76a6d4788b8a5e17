"""The tool's own records of studies and trials, in any SQLAlchemy database (SQLite by default,
PostgreSQL for a shared server).

Ax keeps its experiment in the same database under its own tables; these tables (prefixed rt_)
hold what `report` needs without loading Ax. A study's row and Ax's experiment are created in one
transaction, and deleted in one. A trial's row is written when it starts (so a crash leaves it
visibly `running`) and completed in one transaction when it ends. One process at a time runs a
study: it holds the study's row in rt_study_locks and refreshes its heartbeat there.
"""
from __future__ import annotations

import datetime as dt
import os
import re
import socket
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import sqlalchemy as sa

from pipeline.errors import UserError

DEFAULT_DB = "runs/robust-tune.db"
# A lock whose holder has not refreshed it for this long is taken over (its holder died or hung).
LOCK_STALE_SECONDS = float(os.environ.get("ROBUST_TUNE_LOCK_STALE_SECONDS", "120"))

metadata = sa.MetaData()
studies = sa.Table(
    "rt_studies", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(200), unique=True, nullable=False),
    sa.Column("fingerprint", sa.String(32), nullable=False),
    sa.Column("config", sa.JSON, nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=False),
)
trials = sa.Table(
    "rt_trials", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("study_id", sa.ForeignKey("rt_studies.id"), nullable=False),
    sa.Column("trial_index", sa.Integer, nullable=False),  # Ax's index of the trial
    sa.Column("status", sa.String(16), nullable=False),  # running | completed | failed | interrupted
    sa.Column("parameters", sa.JSON, nullable=False),  # the proposed values
    sa.Column("seed", sa.Integer, nullable=False),
    sa.Column("metrics", sa.JSON),  # flat: val_accuracy, test_accuracy, test_worst_class_accuracy, ...
    sa.Column("per_class", sa.JSON),  # {"val": {class: accuracy}, "test": {...}}
    sa.Column("settings", sa.JSON),  # the fully resolved settings the trainer ran with
    sa.Column("train_seconds", sa.Float),
    sa.Column("proposal_seconds", sa.Float),  # time Ax took to propose this trial
    sa.Column("error", sa.Text),
    sa.Column("started_at", sa.DateTime, nullable=False),
    sa.Column("ended_at", sa.DateTime),
    sa.UniqueConstraint("study_id", "trial_index"),
)
epochs = sa.Table(
    "rt_trial_epochs", metadata,
    sa.Column("trial_id", sa.ForeignKey("rt_trials.id"), primary_key=True),
    sa.Column("epoch", sa.Integer, primary_key=True),
    sa.Column("train_loss", sa.Float),
    sa.Column("val_accuracy", sa.Float),
)

# A study's best configuration re-trained over seeds, against baselines or with one parameter moved
# (`robust-tune evaluate`). A row is written once, when its run has ended; (study, variant, seed) is unique,
# so a repeated or resumed evaluate never stores a run twice and never replaces one.
evaluations = sa.Table(
    "rt_evaluations", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("study_id", sa.ForeignKey("rt_studies.id"), nullable=False),
    sa.Column("variant", sa.String(200), nullable=False),  # tuned | a baseline method | NAME=VALUE
    sa.Column("seed", sa.Integer, nullable=False),  # the training seed (and split seed with --resplit)
    sa.Column("trial_index", sa.Integer, nullable=False),  # the best trial the variant derives from
    sa.Column("config", sa.JSON, nullable=False),  # the TrainConfig as planned, less seed and device
    sa.Column("metrics", sa.JSON, nullable=False),  # flat, as a trial's
    sa.Column("per_class", sa.JSON, nullable=False),  # {"val": {class: accuracy}, "test": {...}}
    sa.Column("train_class_counts", sa.JSON, nullable=False),  # {class: training examples}
    sa.Column("settings", sa.JSON, nullable=False),  # the fully resolved settings the trainer ran with
    sa.Column("train_seconds", sa.Float, nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.UniqueConstraint("study_id", "variant", "seed"),
)

study_locks = sa.Table(
    "rt_study_locks", metadata,
    sa.Column("study_id", sa.ForeignKey("rt_studies.id"), primary_key=True),  # one holder per study
    sa.Column("token", sa.String(32), nullable=False),  # the holder's own random id
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("heartbeat_at", sa.DateTime, nullable=False),
)


@dataclass(frozen=True)
class StudyRecord:
    id: int
    name: str
    fingerprint: str
    config: dict[str, Any]
    created_at: dt.datetime


@dataclass(frozen=True)
class TrialRecord:
    id: int
    trial_index: int
    status: str
    parameters: dict[str, Any]
    seed: int
    metrics: dict[str, float] | None
    per_class: dict[str, dict[str, float]] | None
    train_seconds: float | None
    proposal_seconds: float | None
    error: str | None
    epoch_train_loss: list[float]
    epoch_val_accuracy: list[float]


@dataclass(frozen=True)
class EvaluationRecord:
    variant: str
    seed: int
    trial_index: int
    config: dict[str, Any]
    metrics: dict[str, float]
    per_class: dict[str, dict[str, float]]
    train_class_counts: dict[str, int]
    settings: dict[str, Any]
    train_seconds: float


def database_url(db: str | None, create: bool = True) -> str:
    """A SQLAlchemy URL for `db`: a plain path means a SQLite file, and postgresql:// means PostgreSQL
    through psycopg (the `postgres` extra). With `create` a SQLite file's folder is made; without it
    a SQLite file that does not exist is a UserError and nothing is created."""
    db = db or DEFAULT_DB
    is_path = not re.match(r"[A-Za-z][A-Za-z0-9+.-]+:", db)  # a one-letter scheme is a Windows drive
    try:
        url = sa.engine.make_url(f"sqlite:///{db}" if is_path else db)
    except sa.exc.ArgumentError:
        raise UserError(f"malformed database URL {db!r}: expected dialect://..., e.g. sqlite:///runs/x.db "
                        "(a file whose name has a ':' is written ./NAME)") from None
    if is_path and url.database != db:
        raise UserError(f"database path {db!r} cannot be written as a SQLite URL; rename it without '?' or '#'")
    file = sqlite_file(url)
    if file is not None and not create and not file.is_file():
        raise UserError(f"no database at {file}; run a study first, or name one with --db")
    if file is not None and create:
        file.parent.mkdir(parents=True, exist_ok=True)
    if url.drivername in ("postgresql", "postgres"):  # SQLAlchemy's default driver is psycopg2; ours is psycopg 3
        return url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return f"sqlite:///{db}" if is_path else db


def sqlite_file(url: str | sa.engine.URL) -> Path | None:
    """The file of a SQLite URL; None for an in-memory SQLite database or another database server."""
    url = sa.engine.make_url(url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database)


def already_exists(error: sa.exc.DatabaseError) -> bool:
    """Whether creating a table failed because another process created it (or its type) just before."""
    return "already exists" in str(error) or isinstance(error, sa.exc.IntegrityError)


def create_missing_tables(create_all: Callable[[sa.Engine], None], engine: sa.Engine) -> None:
    """Run `create_all` (the tool's tables, or Ax's). Two processes opening a new database at once may
    both see a table missing; the one that creates it second retries and then finds it made."""
    for attempt in range(5):
        try:
            create_all(engine)
            return
        except sa.exc.DatabaseError as error:
            if not already_exists(error) or attempt == 4:
                raise


def _open_error(error: Exception, shown: str) -> str:
    """One line saying why the database at `shown` cannot be opened."""
    if isinstance(error, ImportError):
        driver = getattr(error, "name", None) or str(error)
        if driver == "psycopg":
            return (f"cannot open database {shown}: PostgreSQL's driver is not installed; "
                    "install it with: pip install 'robust-tune[postgres]'")
        return (f"cannot open database {shown}: the driver {driver} is not installed (for PostgreSQL write "
                "postgresql://... and pip install 'robust-tune[postgres]')")
    cause = getattr(error, "orig", None) or error  # the driver's own message, without SQLAlchemy's wrapping
    return f"cannot open database {shown}: {' '.join(str(cause).split()) or type(cause).__name__}"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def _started_at(started: float | None) -> dict[str, dt.datetime]:
    """The started_at column's new value, as UTC like every stored time, or no change."""
    if started is None:
        return {}
    return {"started_at": dt.datetime.fromtimestamp(started, dt.timezone.utc).replace(tzinfo=None)}


class Store:
    """Studies and trials in one database; every write is its own transaction."""

    def __init__(self, db: str | None = None, create: bool = True) -> None:
        """Open (or, when `create`, create) the database. Readers pass create=False: then nothing is
        created, neither a file nor a table, and a database without the tool's tables is a UserError."""
        self.url = database_url(db, create)
        self.shown = sa.engine.make_url(self.url).render_as_string(hide_password=True)  # for messages
        try:
            self.engine = sa.create_engine(self.url)
            if create:
                create_missing_tables(metadata.create_all, self.engine)
            elif not sa.inspect(self.engine).has_table(studies.name):
                raise UserError(f"{self.shown} holds no robust-tune studies; run a study first, or name one with --db")
        except (sa.exc.SQLAlchemyError, ImportError, ValueError) as error:
            raise UserError(_open_error(error, self.shown)) from None

    def study(self, name: str) -> StudyRecord | None:
        with self.engine.connect() as connection:
            row = connection.execute(sa.select(studies).where(studies.c.name == name)).first()
        return StudyRecord(row.id, row.name, row.fingerprint, row.config, row.created_at) if row else None

    def all_studies(self) -> list[StudyRecord]:
        with self.engine.connect() as connection:
            rows = connection.execute(sa.select(studies).order_by(studies.c.id)).all()
        return [StudyRecord(r.id, r.name, r.fingerprint, r.config, r.created_at) for r in rows]

    def create_study(self, name: str, fingerprint: str, config: dict[str, Any],
                     also: Callable[[sa.Connection], None] | None = None) -> StudyRecord:
        """Store a new study, or return the one another process stored first under `name` (the
        unique name decides the race); the caller compares fingerprints. `also` writes the study's
        other records (Ax's) through the same connection: all of it is committed together, or none."""
        try:
            with self.engine.begin() as connection:
                try:
                    connection.execute(studies.insert().values(name=name, fingerprint=fingerprint, config=config,
                                                               created_at=_now()))
                except sa.exc.IntegrityError:
                    raise _AlreadyStored from None
                if also is not None:
                    also(connection)
        except _AlreadyStored:
            pass
        return self.study(name)  # type: ignore[return-value]

    def lock_study(self, study: StudyRecord) -> StudyLock:
        """Become the one process running `study`, taking over a stale lock; UserError while another holds it."""
        token, host = uuid.uuid4().hex, socket.gethostname()
        mine = dict(token=token, pid=os.getpid(), host=host, heartbeat_at=_now())
        try:
            with self.engine.begin() as connection:
                connection.execute(study_locks.insert().values(study_id=study.id, **mine))
            return StudyLock(self, study.id, token)
        except sa.exc.IntegrityError:
            pass
        with self.engine.connect() as connection:
            holder = connection.execute(sa.select(study_locks).where(study_locks.c.study_id == study.id)).first()
        if holder is None:  # released in the meantime: try again
            return self.lock_study(study)
        seen = (_now() - holder.heartbeat_at).total_seconds()
        if seen < LOCK_STALE_SECONDS and not (holder.host == host and not _alive(holder.pid)):
            raise UserError(f"study {study.name} is being run by process {holder.pid} on host {holder.host} "
                            f"(last seen {seen:.0f} s ago); wait for it or stop it")
        with self.engine.begin() as connection:  # take over, unless another process just did
            taken = connection.execute(study_locks.update().where(
                study_locks.c.study_id == study.id,
                study_locks.c.token == holder.token).values(**mine)).rowcount
        if not taken:
            raise UserError(f"study {study.name} was just taken over by another process; wait for it or stop it")
        return StudyLock(self, study.id, token)

    def start_trial(self, study_id: int, trial_index: int, parameters: dict[str, Any], seed: int,
                    proposal_seconds: float) -> int:
        with self.engine.begin() as connection:
            result = connection.execute(trials.insert().values(
                study_id=study_id, trial_index=trial_index, status="running", parameters=parameters, seed=seed,
                proposal_seconds=proposal_seconds, started_at=_now()))
        return result.inserted_primary_key[0]

    def complete_trial(self, trial_id: int, result: dict[str, Any], started: float | None = None) -> None:
        """Record a finished trial: metrics, per-class accuracy, curves and timings, all at once;
        `started` (a time.time()) replaces the start time by when training really began (on a worker)."""
        metrics = {k: v for k, v in result.items() if isinstance(v, (int, float)) and k != "seed"}
        with self.engine.begin() as connection:
            connection.execute(trials.update().where(trials.c.id == trial_id).values(
                status="completed", metrics=metrics, settings=result["settings"],
                per_class={"val": result["val_per_class_accuracy"], "test": result["test_per_class_accuracy"]},
                train_seconds=result["train_seconds"], ended_at=_now(), **_started_at(started)))
            connection.execute(epochs.insert(), [
                {"trial_id": trial_id, "epoch": i + 1, "train_loss": loss, "val_accuracy": accuracy}
                for i, (loss, accuracy) in enumerate(zip(result["epoch_train_loss"], result["epoch_val_accuracy"]))])

    def fail_trial(self, trial_id: int, error: str, started: float | None = None) -> None:
        with self.engine.begin() as connection:
            connection.execute(trials.update().where(trials.c.id == trial_id).values(
                status="failed", error=error, ended_at=_now(), **_started_at(started)))

    def interrupt_trial(self, trial_id: int, reason: str) -> None:
        """One trial stopped before its end (its worker died); its parameters run again as a new trial."""
        with self.engine.begin() as connection:
            connection.execute(trials.update().where(trials.c.id == trial_id).values(
                status="interrupted", error=reason, ended_at=_now()))

    def interrupt_running_trials(self, study_id: int, reason: str) -> list[int]:
        """Mark trials a killed process left `running` as interrupted; returns their Ax indices."""
        with self.engine.begin() as connection:
            running = connection.execute(sa.select(trials.c.trial_index).where(
                trials.c.study_id == study_id, trials.c.status == "running")).scalars().all()
            connection.execute(trials.update().where(trials.c.study_id == study_id, trials.c.status == "running")
                               .values(status="interrupted", error=reason, ended_at=_now()))
        return list(running)

    def trials(self, study_id: int) -> list[TrialRecord]:
        with self.engine.connect() as connection:
            rows = connection.execute(sa.select(trials).where(trials.c.study_id == study_id)
                                      .order_by(trials.c.trial_index)).all()
            curves: dict[int, list] = {}
            for e in connection.execute(sa.select(epochs).join(trials).where(trials.c.study_id == study_id)
                                        .order_by(epochs.c.trial_id, epochs.c.epoch)):
                curves.setdefault(e.trial_id, []).append(e)
        return [TrialRecord(r.id, r.trial_index, r.status, r.parameters, r.seed, r.metrics, r.per_class,
                            r.train_seconds, r.proposal_seconds, r.error,
                            [e.train_loss for e in curves.get(r.id, [])],
                            [e.val_accuracy for e in curves.get(r.id, [])]) for r in rows]

    def add_evaluation(self, study_id: int, variant: str, seed: int, trial_index: int, config: dict[str, Any],
                       result: dict[str, Any], train_class_counts: dict[str, int]) -> bool:
        """Store one finished evaluation run; False (and nothing written) when (study, variant, seed) is
        already stored: a stored run is never replaced."""
        metrics = {k: v for k, v in result.items() if isinstance(v, (int, float)) and k != "seed"}
        try:
            with self.engine.begin() as connection:
                connection.execute(evaluations.insert().values(
                    study_id=study_id, variant=variant, seed=seed, trial_index=trial_index, config=config,
                    metrics=metrics, per_class={"val": result["val_per_class_accuracy"],
                                                "test": result["test_per_class_accuracy"]},
                    train_class_counts=train_class_counts, settings=result["settings"],
                    train_seconds=result["train_seconds"], created_at=_now()))
        except sa.exc.IntegrityError:
            return False
        return True

    def evaluations(self, study_id: int) -> list[EvaluationRecord]:
        """A study's evaluation runs in the order they were stored; none in a database from before them."""
        if not sa.inspect(self.engine).has_table(evaluations.name):  # readers create no table
            return []
        with self.engine.connect() as connection:
            rows = connection.execute(sa.select(evaluations).where(evaluations.c.study_id == study_id)
                                      .order_by(evaluations.c.id)).all()
        return [EvaluationRecord(r.variant, r.seed, r.trial_index, r.config, r.metrics, r.per_class,
                                 r.train_class_counts, r.settings, r.train_seconds) for r in rows]

    def delete_study(self, name: str, also: Callable[[sa.Connection], None] | None = None) -> bool:
        """Remove one study's rows (its per-epoch curves, trials, evaluations and record) in one transaction,
        with what `also` deletes through the same connection (Ax's records); False when there is no such
        study. Other studies are not touched."""
        with self.engine.begin() as connection:
            study_id = connection.execute(sa.select(studies.c.id).where(studies.c.name == name)).scalar()
            if study_id is None:
                return False
            if also is not None:
                also(connection)
            its_trials = sa.select(trials.c.id).where(trials.c.study_id == study_id)
            connection.execute(epochs.delete().where(epochs.c.trial_id.in_(its_trials)))
            if sa.inspect(connection).has_table(evaluations.name):  # a database from before evaluations has none
                connection.execute(evaluations.delete().where(evaluations.c.study_id == study_id))
            connection.execute(trials.delete().where(trials.c.study_id == study_id))
            connection.execute(study_locks.delete().where(study_locks.c.study_id == study_id))
            connection.execute(studies.delete().where(studies.c.id == study_id))
        return True


class _AlreadyStored(Exception):
    """Another process stored a study under the name first."""


def _alive(pid: int) -> bool:
    """Whether a process with this id exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class StudyLock:
    """A held study lock; a background thread refreshes its heartbeat until `release`."""

    def __init__(self, store: Store, study_id: int, token: str) -> None:
        self.store, self.study_id, self.token = store, study_id, token
        self.lost: str | None = None  # why the lock is no longer ours, once the heartbeat finds out
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat_until_released, daemon=True, name="study-heartbeat")
        self._thread.start()

    def beat(self) -> bool:
        """Refresh the heartbeat; False when another process has taken the study over."""
        with self.store.engine.begin() as connection:
            return connection.execute(study_locks.update().where(
                study_locks.c.study_id == self.study_id, study_locks.c.token == self.token)
                .values(heartbeat_at=_now())).rowcount == 1

    def _beat_until_released(self) -> None:
        while not self._stop.wait(LOCK_STALE_SECONDS / 6):
            try:
                if not self.beat():
                    self.lost = "another process took the study over"
                    return
            except sa.exc.OperationalError:  # the database was busy for too long: try at the next beat
                pass

    def check(self) -> None:
        """Refresh the heartbeat before a write; a UserError when the lock was taken over (this process was
        paused past the stale time, say): it must stop writing."""
        if self.lost is None and not self.beat():
            self.lost = "another process took the study over"
        if self.lost is not None:
            raise UserError(f"lost the lock of study {self.study_id}: {self.lost}; stopped")

    def release(self) -> None:
        """Stop the heartbeat and delete the lock row, if it is still ours."""
        self._stop.set()
        self._thread.join()
        with self.store.engine.begin() as connection:
            connection.execute(study_locks.delete().where(
                study_locks.c.study_id == self.study_id, study_locks.c.token == self.token))

    def __enter__(self) -> StudyLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
