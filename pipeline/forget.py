"""Delete a stored study: Ax's experiment and generation strategy, then the tool's own rows.

Ax goes first: a process killed in between leaves the study listed, and deleting it again
finishes the job; a study whose Ax records outlived it could never be run again from scratch.
"""
from __future__ import annotations

from pathlib import Path

from pipeline.errors import UserError
from pipeline.library_logs import quiet_libraries
from pipeline.store import Store


def delete_study(store: Store, name: str, log_file: str | Path = "runs/robust-tune.log") -> None:
    """Remove study `name` and everything stored for it; other studies stay as they are.
    Ax's messages go to `log_file`."""
    study = store.study(name)
    if study is None:
        known = ", ".join(s.name for s in store.all_studies()) or "none"
        raise UserError(f"no study named {name!r} in {store.url}; known: {known}")
    with store.lock_study(study):  # never under a process that is running the study
        _delete_locked(store, name, log_file)


def _delete_locked(store: Store, name: str, log_file: str | Path) -> None:
    quiet_libraries(log_file)
    from ax.storage.sqa_store import delete as ax_delete
    from ax.storage.sqa_store.db import session_scope
    from ax.storage.sqa_store.sqa_classes import SQAExperiment

    from pipeline.search import use_database

    use_database(store.url)
    with session_scope() as session:
        stored_in_ax = session.query(SQAExperiment.id).filter_by(name=name).first() is not None
    if stored_in_ax:
        ax_delete.delete_generation_strategy(name)
        ax_delete.delete_experiment(name)
    store.delete_study(name)
