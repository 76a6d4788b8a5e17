"""robust-tune 0.2.0: every stored study config in the current shape, the tables a database from before
them lacks, and an index for a study's running trials.

The rules here are a copy, frozen as of 0.2.0, of what StudyConfig.from_dict fills in for a field added
later (search_seed was the seed; the imbalance skewed validation too before data.imbalance_in): a
migration must do the same thing whatever the code becomes.
"""
import sqlalchemy as sa
from alembic import op

revision = "0002_normalised_studies"
down_revision = "0001_baseline"
branch_labels = None
depends_on = None


def _normalised(config: dict) -> dict:
    """A stored study config with the fields added after it was stored, at the values it ran with."""
    config = {**config, "data": dict(config.get("data") or {})}
    config.setdefault("search_seed", config.get("seed", 0))
    if config["data"].get("imbalance_class") is not None:
        config["data"].setdefault("imbalance_in", "train+val")
    return config


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    if not inspector.has_table("rt_evaluations"):  # a database from before `robust-tune evaluate`
        op.create_table(
            "rt_evaluations",
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("study_id", sa.ForeignKey("rt_studies.id"), nullable=False),
            sa.Column("variant", sa.String(200), nullable=False),
            sa.Column("seed", sa.Integer, nullable=False),
            sa.Column("trial_index", sa.Integer, nullable=False),
            sa.Column("config", sa.JSON, nullable=False),
            sa.Column("metrics", sa.JSON, nullable=False),
            sa.Column("per_class", sa.JSON, nullable=False),
            sa.Column("train_class_counts", sa.JSON, nullable=False),
            sa.Column("settings", sa.JSON, nullable=False),
            sa.Column("train_seconds", sa.Float, nullable=False),
            sa.Column("created_at", sa.DateTime, nullable=False),
            sa.UniqueConstraint("study_id", "variant", "seed"))
    if not inspector.has_table("rt_study_locks"):  # a database from before the study lock
        op.create_table(
            "rt_study_locks",
            sa.Column("study_id", sa.ForeignKey("rt_studies.id"), primary_key=True),
            sa.Column("token", sa.String(32), nullable=False),
            sa.Column("pid", sa.Integer, nullable=False),
            sa.Column("host", sa.String(255), nullable=False),
            sa.Column("heartbeat_at", sa.DateTime, nullable=False))
    if "ix_rt_trials_study_status" not in {i["name"] for i in inspector.get_indexes("rt_trials")}:
        op.create_index("ix_rt_trials_study_status", "rt_trials", ["study_id", "status"])

    studies = sa.table("rt_studies", sa.column("id", sa.Integer), sa.column("config", sa.JSON))
    for study_id, config in bind.execute(sa.select(studies.c.id, studies.c.config)).all():
        if _normalised(config) != config:
            bind.execute(studies.update().where(studies.c.id == study_id).values(config=_normalised(config)))
