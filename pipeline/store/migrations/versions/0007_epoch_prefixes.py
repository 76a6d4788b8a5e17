"""robust-tune 0.6.0: a trial may be an epoch prefix of another (rt_trials.prefix_of: the Ax index of the trial that
trained it; its row holds that trial's exact result at a smaller epoch count), or early-stopped (status
"early_stopped"). Nothing stored before changes: its trials are their own runs."""
import sqlalchemy as sa
from alembic import op

revision = "0007_epoch_prefixes"
down_revision = "0006_epoch_metrics"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "prefix_of" not in {c["name"] for c in inspector.get_columns("rt_trials")}:
        with op.batch_alter_table("rt_trials") as table:
            table.add_column(sa.Column("prefix_of", sa.Integer))
