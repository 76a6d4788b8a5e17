"""Delete a stored study: Ax's experiment and generation strategy and the tool's own rows, in one
transaction, so a process killed while deleting leaves the study whole and deleting it again works.
"""
from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from pipeline.library_logs import quiet_libraries
from pipeline.store import Store


def delete_study(store: Store, name: str, log_file: str | Path = "runs/robust-tune.log") -> None:
    """Remove study `name` and everything stored for it; other studies stay as they are.
    Ax's messages go to `log_file`."""
    study = store.require_study(name)
    with store.lock_study(study):  # never under a process that is running the study
        _delete_locked(store, name, log_file)


def _delete_locked(store: Store, name: str, log_file: str | Path) -> None:
    quiet_libraries(log_file)
    from pipeline.search import ax_writes_through, delete_experiment, use_database

    use_database(store.url)

    def delete_ax_records(connection: sa.Connection) -> None:
        with ax_writes_through(connection):
            delete_experiment(name)

    store.delete_study(name, also=delete_ax_records)
