"""robust-tune 0.4.0: a trial trained on several seeds (budget.seeds_per_trial) keeps each seed's metrics, and each
completed trial the study's Gaussian process's prediction of its objective (the model's pick). Nothing stored
before changes: a trial stored before has neither (it trained one seed; no prediction was made)."""
import sqlalchemy as sa
from alembic import op

revision = "0004_trial_seeds_and_predictions"
down_revision = "0003_campaigns"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("rt_trials")}
    with op.batch_alter_table("rt_trials") as table:
        for name in ("seed_runs", "predicted"):
            if name not in columns:
                table.add_column(sa.Column(name, sa.JSON))
