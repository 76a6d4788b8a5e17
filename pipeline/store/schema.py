"""The tool's tables (prefixed rt_) and the schema version they are at.

Ax keeps its experiments in the same database under its own tables; these hold what `report` needs
without loading Ax. The schema version is an Alembic revision stored in rt_schema_version; each
revision is one file in migrations/versions and is named here with the tool version that introduced it.
"""
from __future__ import annotations

from typing import Callable

import sqlalchemy as sa

# Alembic revisions, oldest first, with the tool version whose layout each one is. A database written by
# 0.1.0 has the rt_ tables and no version table: it is at the baseline.
BASELINE = "0001_baseline"
HEAD = "0008_widenings"
VERSIONS = {BASELINE: "0.1.0", "0002_normalised_studies": "0.2.0", "0003_campaigns": "0.3.0",
            "0004_trial_seeds_and_predictions": "0.4.0", "0005_importance": "0.5.0", "0006_epoch_metrics": "0.5.0",
            "0007_epoch_prefixes": "0.6.0", HEAD: "0.11.0"}
VERSION_TABLE = "rt_schema_version"

metadata = sa.MetaData()
studies = sa.Table(
    "rt_studies", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(200), unique=True, nullable=False),
    sa.Column("fingerprint", sa.String(32), nullable=False),
    sa.Column("config", sa.JSON, nullable=False),  # StudyConfig.to_dict()
    sa.Column("created_at", sa.DateTime, nullable=False),
)
trials = sa.Table(
    "rt_trials", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("study_id", sa.ForeignKey("rt_studies.id"), nullable=False),
    sa.Column("trial_index", sa.Integer, nullable=False),  # Ax's index of the trial
    sa.Column("status", sa.String(16), nullable=False),  # running | completed | early_stopped | failed | interrupted
    sa.Column("parameters", sa.JSON, nullable=False),  # the proposed values
    sa.Column("seed", sa.Integer, nullable=False),
    sa.Column("metrics", sa.JSON),  # flat: val_accuracy, test_accuracy, test_worst_class_accuracy, ...
    sa.Column("per_class", sa.JSON),  # {"val": {class: accuracy}, "test": {...}}
    sa.Column("settings", sa.JSON),  # the fully resolved settings the trainer ran with (records.RunSettings)
    sa.Column("train_seconds", sa.Float),
    sa.Column("proposal_seconds", sa.Float),  # time Ax took to propose this trial
    sa.Column("error", sa.Text),
    sa.Column("started_at", sa.DateTime, nullable=False),
    sa.Column("ended_at", sa.DateTime),
    # a trial trained on several seeds (budget.seeds_per_trial): each seed's metrics; metrics holds their mean
    sa.Column("seed_runs", sa.JSON),
    # the study's GP's posterior of this trial's objective, fitted on every completed trial when a run of the
    # study ended: {"mean", "sd", "fitted_on"}; the trial it predicts best is the model's pick
    sa.Column("predicted", sa.JSON),
    # an epoch prefix: the Ax index of the trial whose run holds this result at a smaller epoch count (not trained
    # apart, so it counts toward no budget); NULL for a trained trial
    sa.Column("prefix_of", sa.Integer),
    sa.UniqueConstraint("study_id", "trial_index"),
    sa.Index("ix_rt_trials_study_status", "study_id", "status"),  # a study's running trials, at every resume
)
epochs = sa.Table(
    "rt_trial_epochs", metadata,
    sa.Column("trial_id", sa.ForeignKey("rt_trials.id"), primary_key=True),
    sa.Column("epoch", sa.Integer, primary_key=True),
    sa.Column("train_loss", sa.Float),
    sa.Column("val_accuracy", sa.Float),
    sa.Column("val", sa.JSON),  # the epoch's validation metrics (SplitMetrics as a dict), from 0.5.0 on
    sa.Column("test", sa.JSON),  # and its test metrics
)

# A study's best configuration re-trained over seeds, against baselines or with one parameter moved
# (`robust-tune evaluate`). A row is written once, when its run has ended; (study, variant, seed) is unique,
# so a repeated or resumed evaluate never stores a run twice and never replaces one.
evaluations = sa.Table(
    "rt_evaluations", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("study_id", sa.ForeignKey("rt_studies.id"), nullable=False),
    # tuned | a baseline METHOD[:NAME=VALUE...] | NAME=VALUE (--vary)
    sa.Column("variant", sa.String(200), nullable=False),
    sa.Column("seed", sa.Integer, nullable=False),  # the training seed (the split seed a run drew: config.data)
    sa.Column("trial_index", sa.Integer, nullable=False),  # the best trial the variant derives from
    sa.Column("config", sa.JSON, nullable=False),  # the TrainConfig as planned, less seed and device
    sa.Column("metrics", sa.JSON, nullable=False),  # flat, as a trial's
    sa.Column("per_class", sa.JSON, nullable=False),  # {"val": {class: accuracy}, "test": {...}, "counts": {"val":
    #                                                   {class: images}, "test": {...}} (counts from 0.7.0)}
    sa.Column("train_class_counts", sa.JSON, nullable=False),  # {class: training examples}
    sa.Column("settings", sa.JSON, nullable=False),  # the fully resolved settings the trainer ran with
    sa.Column("train_seconds", sa.Float, nullable=False),
    sa.Column("epochs", sa.JSON),  # each epoch's loss, validation and test metrics (EpochMetrics dicts), from 0.5.0
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.UniqueConstraint("study_id", "variant", "seed"),
)

# The importance of each searched parameter under a study's GP, remade when a run of the study ends (one row per
# study): the share of the objective's variance each explains (first-order Sobol index) with its interval.
importance = sa.Table(
    "rt_importance", metadata,
    sa.Column("study_id", sa.ForeignKey("rt_studies.id"), primary_key=True),
    sa.Column("objective", sa.String(200), nullable=False),
    sa.Column("fitted_on", sa.Integer, nullable=False),  # completed trials the GP was fitted on
    sa.Column("minimum", sa.Integer, nullable=False),  # completed trials it needs; below, parameters is empty
    sa.Column("parameters", sa.JSON, nullable=False),  # [{"name", "share", "low", "high"}], largest share first
    sa.Column("note", sa.Text),  # why there is none, when there is none
    sa.Column("computed_at", sa.DateTime, nullable=False),
)

# Each end of a study's searched range that widened because its best trial sat on it (pipeline/search/bounds.py), in
# order: the study searches its file's ranges with these applied. Written in the transaction that widens Ax's search
# space, so the two agree after a kill at any moment.
widenings = sa.Table(
    "rt_widenings", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("study_id", sa.ForeignKey("rt_studies.id"), nullable=False),
    sa.Column("parameter", sa.String(200), nullable=False),
    sa.Column("side", sa.String(8), nullable=False),  # lower | upper
    sa.Column("low_before", sa.Float, nullable=False),
    sa.Column("high_before", sa.Float, nullable=False),
    sa.Column("low_after", sa.Float, nullable=False),
    sa.Column("high_after", sa.Float, nullable=False),
    sa.Column("log", sa.Boolean, nullable=False),
    sa.Column("after_trial", sa.Integer, nullable=False),  # trials that had run to an end when it widened
    sa.Column("best_trial", sa.Integer, nullable=False),  # Ax's index of the best trial, on the end
    sa.Column("value", sa.Float, nullable=False),  # that trial's value of the parameter
    sa.Column("created_at", sa.DateTime, nullable=False),
)

study_locks = sa.Table(
    "rt_study_locks", metadata,
    sa.Column("study_id", sa.ForeignKey("rt_studies.id"), primary_key=True),  # one holder per study
    sa.Column("token", sa.String(32), nullable=False),  # the holder's own random id
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("heartbeat_at", sa.DateTime, nullable=False),
)

# A campaign (`robust-tune compare`): several methods, each tuned in its own study named <campaign>.<method>,
# re-trained over seeds and compared with ERM. The row holds what `report --verdict` needs to find them.
campaigns = sa.Table(
    "rt_campaigns", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(200), unique=True, nullable=False),
    sa.Column("fingerprint", sa.String(32), nullable=False),
    sa.Column("config", sa.JSON, nullable=False),  # CampaignConfig.to_dict()
    sa.Column("created_at", sa.DateTime, nullable=False),
)
campaign_locks = sa.Table(
    "rt_campaign_locks", metadata,
    sa.Column("campaign_id", sa.ForeignKey("rt_campaigns.id"), primary_key=True),  # one `compare` per campaign
    sa.Column("token", sa.String(32), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("heartbeat_at", sa.DateTime, nullable=False),
)

# Alembic's version table under the tool's own name (Ax or another tool may keep its own alembic_version).
schema_version = sa.Table(
    VERSION_TABLE, metadata,
    sa.Column("version_num", sa.String(32), primary_key=True),
)

# Tables a database from before them may lack: readers read it without them.
OPTIONAL = (evaluations.name, study_locks.name, schema_version.name, campaigns.name, campaign_locks.name,
            importance.name, widenings.name)
# Columns a database from before them may lack: readers read such rows with the column empty.
OPTIONAL_COLUMNS = (f"{trials.name}.seed_runs", f"{trials.name}.predicted", f"{trials.name}.prefix_of",
                    f"{epochs.name}.val", f"{epochs.name}.test", f"{evaluations.name}.epochs")


def already_exists(error: sa.exc.DatabaseError) -> bool:
    """Whether creating a table failed because another process created it (or its type) just before."""
    return "already exists" in str(error) or isinstance(error, sa.exc.IntegrityError)


def create_missing_tables(create_all: Callable[[sa.Engine], None], engine: sa.Engine) -> None:
    """Run `create_all` (Ax's tables). Two processes opening a new database at once may both see a
    table missing; the one that creates it second retries and then finds it made."""
    for attempt in range(5):
        try:
            create_all(engine)
            return
        except sa.exc.DatabaseError as error:
            if not already_exists(error) or attempt == 4:
                raise
