"""robust-tune 0.5.0: the importance of each searched parameter under a study's GP, one row per study, made when a
run of the study ends. Nothing stored before changes: a study stored before has none until its next run."""
import sqlalchemy as sa
from alembic import op

revision = "0005_importance"
down_revision = "0004_trial_seeds_and_predictions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if not sa.inspect(op.get_bind()).has_table("rt_importance"):
        op.create_table(
            "rt_importance",
            sa.Column("study_id", sa.Integer, sa.ForeignKey("rt_studies.id"), primary_key=True),
            sa.Column("objective", sa.String(200), nullable=False),
            sa.Column("fitted_on", sa.Integer, nullable=False),
            sa.Column("minimum", sa.Integer, nullable=False),
            sa.Column("parameters", sa.JSON, nullable=False),
            sa.Column("note", sa.Text),
            sa.Column("computed_at", sa.DateTime, nullable=False))
