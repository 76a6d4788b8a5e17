"""robust-tune 0.11.0: the ends of a study's searched ranges that widened because its best trial sat on them (one row
each, in order). Nothing stored before changes: a study stored before never widens (StudyConfig.settle_widen)."""
import sqlalchemy as sa
from alembic import op

revision = "0008_widenings"
down_revision = "0007_epoch_prefixes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if not sa.inspect(op.get_bind()).has_table("rt_widenings"):
        op.create_table(
            "rt_widenings",
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("study_id", sa.Integer, sa.ForeignKey("rt_studies.id"), nullable=False),
            sa.Column("parameter", sa.String(200), nullable=False),
            sa.Column("side", sa.String(8), nullable=False),
            sa.Column("low_before", sa.Float, nullable=False),
            sa.Column("high_before", sa.Float, nullable=False),
            sa.Column("low_after", sa.Float, nullable=False),
            sa.Column("high_after", sa.Float, nullable=False),
            sa.Column("log", sa.Boolean, nullable=False),
            sa.Column("after_trial", sa.Integer, nullable=False),
            sa.Column("best_trial", sa.Integer, nullable=False),
            sa.Column("value", sa.Float, nullable=False),
            sa.Column("created_at", sa.DateTime, nullable=False))
