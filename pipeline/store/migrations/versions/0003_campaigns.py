"""robust-tune 0.3.0: campaigns (`robust-tune compare`) and their lock. Nothing stored before changes."""
import sqlalchemy as sa
from alembic import op

revision = "0003_campaigns"
down_revision = "0002_normalised_studies"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table("rt_campaigns"):
        op.create_table(
            "rt_campaigns",
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("name", sa.String(200), unique=True, nullable=False),
            sa.Column("fingerprint", sa.String(32), nullable=False),
            sa.Column("config", sa.JSON, nullable=False),
            sa.Column("created_at", sa.DateTime, nullable=False))
    if not inspector.has_table("rt_campaign_locks"):
        op.create_table(
            "rt_campaign_locks",
            sa.Column("campaign_id", sa.Integer, sa.ForeignKey("rt_campaigns.id"), primary_key=True),
            sa.Column("token", sa.String(32), nullable=False),
            sa.Column("pid", sa.Integer, nullable=False),
            sa.Column("host", sa.String(255), nullable=False),
            sa.Column("heartbeat_at", sa.DateTime, nullable=False))
