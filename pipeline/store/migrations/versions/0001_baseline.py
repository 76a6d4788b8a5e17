"""robust-tune 0.1.0: the rt_ tables as that version created them, with no version table.

A database written by 0.1.0 is recognised by its tables and stamped at this revision before it is
upgraded; a new database is created at the newest revision directly. So this revision changes nothing.
"""
revision = "0001_baseline"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Nothing to do: the baseline is the layout 0.1.0 left."""
