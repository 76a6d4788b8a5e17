"""robust-tune 0.5.0: every epoch's validation and test metrics, of each trial (rt_trial_epochs) and of each
evaluation run (rt_evaluations.epochs): one run to E epochs holds the result of every shorter run. Nothing stored
before changes: its epochs keep their loss and validation accuracy, without the new metrics."""
import sqlalchemy as sa
from alembic import op

revision = "0006_epoch_metrics"
down_revision = "0005_importance"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    for table_name, names in (("rt_trial_epochs", ("val", "test")), ("rt_evaluations", ("epochs",))):
        if not inspector.has_table(table_name):
            continue
        columns = {c["name"] for c in inspector.get_columns(table_name)}
        with op.batch_alter_table(table_name) as table:
            for name in names:
                if name not in columns:
                    table.add_column(sa.Column(name, sa.JSON))
