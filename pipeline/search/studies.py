"""Several studies at once on one runner: a campaign's searches spread over one Dask cluster.

Each study keeps its own loop (pipeline/search/study.py: its searcher, its lock, its budget and failure policy);
the one loop that drives a study run alone (`run_loops`) asks whichever study runs the fewest trials for the next
one whenever the runner has room, and hands each outcome back to the study that asked for it (an Outcome names its
job's study). As with one study, only this process talks to Ax and writes the database, and every write goes
through its study's loop, so a kill at any moment leaves each study as a killed `run` would: its resume
(`reconcile`) loses and duplicates nothing.
"""
from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from pipeline.search.study import StudySummary, as_stored, check_can_train, new_loop, prepare_study, run_loops
from pipeline.search.trial import OnEvent, TrialRunner
from pipeline.spec.study_config import StudyConfig
from pipeline.store import SchemaUpgraded, Store


@dataclass(frozen=True)
class StudiesStarted:
    """Several studies start searching together, sharing a runner that trains `capacity` trials at once."""

    studies: tuple[str, ...]
    capacity: int


@dataclass(frozen=True)
class StudyFinished:
    """One of several studies searched together ran its budget (or stopped): `summary` says how."""

    summary: StudySummary


def run_studies(studies: list[StudyConfig], runner: TrialRunner, db: str | None = None, device: str = "auto",
                log_file: str | Path = "runs/robust-tune.log", on_event: OnEvent = lambda event: None,
                precision: str = "auto") -> list[StudySummary]:
    """Run (or resume) every study of `studies` to its budget, their trials sharing `runner`, as `run_study` runs
    one: each study's lock is held from before its first write until they all end, a study's own limits (its
    budget, its failure policy, Ax waiting for a result) hold, and the runner's room goes to the study running
    the fewest trials, the one that waited longest among equals, so that none starves. A stop (a UserError, a lost
    server, Ctrl-C) stores every study's running trials as interrupted, to run again first, and propagates."""
    start = time.perf_counter()
    studies = [as_stored(study, db) for study in studies]
    for study in studies:
        check_can_train(study, device, precision)
    store = Store(db, on_upgrade=lambda message: on_event(SchemaUpgraded(message)), on_reconnect=on_event)
    with store.reporting_loss(f"run {len(studies)} studies"), ExitStack() as stack:
        loops = []
        for study in studies:
            stored, study, log_path = prepare_study(store, study, log_file)
            lock = stack.enter_context(store.lock_study(stored))
            loops.append(new_loop(store, stored, study, lock, None, log_path, on_event, device, precision))
        stack.enter_context(runner)
        on_event(StudiesStarted(tuple(loop.study.name for loop in loops), runner.capacity))
        for loop in loops:
            loop.started()
        run_loops(loops, runner, on_event, lambda loop: on_event(StudyFinished(loop.summary)))
        for loop in loops:
            loop.summary.best = loop.best()
    for loop in loops:
        loop.summary.seconds = time.perf_counter() - start
    return [loop.summary for loop in loops]
