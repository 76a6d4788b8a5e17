"""Delete a stored study: Ax's experiment and generation strategy and the tool's own rows, in one
transaction, so a process killed while deleting leaves the study whole and deleting it again works.
"""
from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from pipeline.errors import UserError
from pipeline.faults import kill_point
from pipeline.library_logs import quiet_libraries
from pipeline.store import LockLost, Store, StudyLock


def delete_study(store: Store, name: str, log_file: str | Path = "runs/robust-tune.log") -> None:
    """Remove study `name` and everything stored for it; other studies stay as they are. Never under a process
    that runs (or evaluates) the study: its lock is taken first, and the deleting transaction is fenced by it,
    so a delete that was paused while another process took the study over deletes nothing. Ax's messages go
    to `log_file`."""
    study = store.require_study(name)
    with store.reporting_loss(f"delete study {name}"), store.lock_study(study) as lock:
        kill_point("after-delete-lock")
        try:
            _delete_locked(store, name, lock, log_file)
        except LockLost:
            raise UserError(f"study {name} was not deleted, nothing was changed: {lock.lost} while the delete "
                            "waited; delete it once that process is done") from None


def _delete_locked(store: Store, name: str, lock: StudyLock, log_file: str | Path) -> None:
    quiet_libraries(log_file)
    from pipeline.search.ax import ax_writes_through, delete_experiment, use_database

    use_database(store.url)

    def delete_ax_records(connection: sa.Connection) -> None:
        with ax_writes_through(connection):
            delete_experiment(name)

    store.delete_study(name, lock, also=delete_ax_records)
