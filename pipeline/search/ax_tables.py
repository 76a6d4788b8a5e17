"""Ax's own tables read without importing Ax: whether a study holds a trial Ax was asked for and never told.

The one part of the Ax boundary that must not load Ax (about 3 s): `compare` asks it of every study it would skip,
and a compare with nothing left to do answers without loading Ax. The table and column names and the status number
are Ax 1.3's; tests/search/test_ax_boundary.py checks them against Ax's own classes (SQATrial, SQAExperiment,
TrialStatus), so an Ax upgrade that renames them fails there.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa

if TYPE_CHECKING:
    from pipeline.store import Store

# Ax's trials and experiments tables, with the columns read here (plain types: Ax's IntEnum status has none)
AX_TRIALS = sa.table("trial_v2", sa.column("experiment_id", sa.Integer), sa.column("status", sa.Integer))
AX_EXPERIMENTS = sa.table("experiment_v2", sa.column("id", sa.Integer), sa.column("name", sa.String))
AX_RUNNING = 4  # ax.core.base_trial.TrialStatus.RUNNING, as its table stores it


def pending_in_ax(store: Store, name: str) -> bool:
    """Whether Ax's records of study `name` in `store`'s database hold a trial asked for and never told (running
    there): a process stopped between storing a trial's end and telling Ax, which the study loop's `reconcile` heals.
    One query, without loading the experiment."""
    trials, experiments = AX_TRIALS, AX_EXPERIMENTS
    query = (sa.select(sa.literal(1)).select_from(trials.join(experiments, trials.c.experiment_id == experiments.c.id))
             .where(experiments.c.name == name, trials.c.status == AX_RUNNING).limit(1))

    def ask() -> bool:
        if not sa.inspect(store.engine).has_table(AX_TRIALS.name):
            return False
        with store.engine.connect() as connection:
            return connection.execute(query).first() is not None

    return store.reconnecting.run(ask)  # asked again once a restarted server answers
