"""robust-tune 0.4.0: a trial trained on several seeds (budget.seeds_per_trial) keeps each seed's metrics. Nothing
stored before changes: a trial stored before has no seed runs (it trained one seed)."""
import sqlalchemy as sa
from alembic import op

revision = "0004_seed_runs"
down_revision = "0003_campaigns"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("rt_trials")}
    if "seed_runs" not in columns:
        with op.batch_alter_table("rt_trials") as table:
            table.add_column(sa.Column("seed_runs", sa.JSON))

