"""The tool's own records of studies and trials, in any SQLAlchemy database (SQLite by default).

Ax keeps its experiment in the same database under its own tables; these tables (prefixed rt_)
hold what `report` needs without loading Ax. A trial's row is written when it starts (so a crash
leaves it visibly `running`) and completed in one transaction when it ends.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from pipeline.errors import UserError

DEFAULT_DB = "runs/robust-tune.db"

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


def database_url(db: str | None, create: bool = True) -> str:
    """A SQLAlchemy URL; a plain path means a SQLite file (created with its folder when `create`)."""
    db = db or DEFAULT_DB
    if "://" in db:
        return db
    if not create and not Path(db).is_file():
        raise UserError(f"no database at {db}; run a study first, or name one with --db")
    Path(db).parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{db}"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


class Store:
    """Studies and trials in one database; every write is its own transaction."""

    def __init__(self, db: str | None = None, create: bool = True) -> None:
        """Open (or, when `create`, create) the database; readers pass create=False."""
        self.url = database_url(db, create)
        try:
            self.engine = sa.create_engine(self.url)
            metadata.create_all(self.engine)
        except (sa.exc.SQLAlchemyError, ImportError, ValueError) as error:
            raise UserError(f"cannot open database {self.url}: {str(error).splitlines()[0]}") from None

    def study(self, name: str) -> StudyRecord | None:
        with self.engine.connect() as connection:
            row = connection.execute(sa.select(studies).where(studies.c.name == name)).first()
        return StudyRecord(row.id, row.name, row.fingerprint, row.config, row.created_at) if row else None

    def all_studies(self) -> list[StudyRecord]:
        with self.engine.connect() as connection:
            rows = connection.execute(sa.select(studies).order_by(studies.c.id)).all()
        return [StudyRecord(r.id, r.name, r.fingerprint, r.config, r.created_at) for r in rows]

    def create_study(self, name: str, fingerprint: str, config: dict[str, Any]) -> StudyRecord:
        with self.engine.begin() as connection:
            connection.execute(studies.insert().values(name=name, fingerprint=fingerprint, config=config,
                                                       created_at=_now()))
        return self.study(name)  # type: ignore[return-value]

    def start_trial(self, study_id: int, trial_index: int, parameters: dict[str, Any], seed: int,
                    proposal_seconds: float) -> int:
        with self.engine.begin() as connection:
            result = connection.execute(trials.insert().values(
                study_id=study_id, trial_index=trial_index, status="running", parameters=parameters, seed=seed,
                proposal_seconds=proposal_seconds, started_at=_now()))
        return result.inserted_primary_key[0]

    def complete_trial(self, trial_id: int, result: dict[str, Any]) -> None:
        """Record a finished trial: metrics, per-class accuracy, curves and timings, all at once."""
        metrics = {k: v for k, v in result.items() if isinstance(v, (int, float)) and k != "seed"}
        with self.engine.begin() as connection:
            connection.execute(trials.update().where(trials.c.id == trial_id).values(
                status="completed", metrics=metrics, settings=result["settings"],
                per_class={"val": result["val_per_class_accuracy"], "test": result["test_per_class_accuracy"]},
                train_seconds=result["train_seconds"], ended_at=_now()))
            connection.execute(epochs.insert(), [
                {"trial_id": trial_id, "epoch": i + 1, "train_loss": loss, "val_accuracy": accuracy}
                for i, (loss, accuracy) in enumerate(zip(result["epoch_train_loss"], result["epoch_val_accuracy"]))])

    def fail_trial(self, trial_id: int, error: str) -> None:
        with self.engine.begin() as connection:
            connection.execute(trials.update().where(trials.c.id == trial_id).values(
                status="failed", error=error, ended_at=_now()))

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

    def delete_study(self, name: str) -> bool:
        """Remove one study's rows (its per-epoch curves, trials and record) in one transaction;
        False when there is no such study. Other studies are not touched."""
        with self.engine.begin() as connection:
            study_id = connection.execute(sa.select(studies.c.id).where(studies.c.name == name)).scalar()
            if study_id is None:
                return False
            its_trials = sa.select(trials.c.id).where(trials.c.study_id == study_id)
            connection.execute(epochs.delete().where(epochs.c.trial_id.in_(its_trials)))
            connection.execute(trials.delete().where(trials.c.study_id == study_id))
            connection.execute(studies.delete().where(studies.c.id == study_id))
        return True
