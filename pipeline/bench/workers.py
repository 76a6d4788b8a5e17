"""A study or a campaign run as a user runs it, on the default workers (one per core) and with `--workers 1` (one
trial at a time in this process), each into a fresh database in a temporary folder, side by side in one process:
the wall time of each, their ratio, and what the default's trials did (trained at once, the budget exactly,
distinct, how long no trial trained). Nothing is downloaded; the folder is removed afterwards."""
from __future__ import annotations

import json
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from pipeline.errors import UserError
from pipeline.search.parallel import default_workers, trial_runner
from pipeline.search.study import busy_seconds


@dataclass(frozen=True)
class WorkersTiming:
    """One arm's run of the file: its wall time, and what its trials did."""

    workers: int  # trials that trained at once (1: this process)
    seconds: float  # from the command's start to its end, cluster start-up included
    search_seconds: float  # the searches (a campaign's; a study's whole run)
    trials: int  # trials that ran to an end
    runs: int  # a campaign's re-training runs
    exact: bool  # every study ran exactly its budget
    distinct: bool  # no configuration trained twice within a study
    overlapped: bool  # some two trials trained at the same time
    idle: float  # share of the searches' wall time (start-up included) in which no trial trained


def is_campaign(path: Path) -> bool:
    """Whether a TOML file is a campaign (it lists `methods`) rather than a study."""
    import tomllib

    try:
        return "methods" in tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise UserError(f"cannot read {path}: {error}") from None


def trial_spans(db: Path) -> list[tuple[float, float]]:
    """When each trial that ran to an end trained, in seconds."""
    with sqlite3.connect(db) as connection:
        found = connection.execute("select started_at, ended_at from rt_trials where status in "
                                   "('completed', 'early_stopped', 'failed')").fetchall()
    return [(datetime.fromisoformat(a).timestamp(), datetime.fromisoformat(b).timestamp()) for a, b in found]


def budgets_kept(db: Path) -> tuple[bool, bool]:
    """Whether every study stored in `db` ran exactly its budget (with its allowance once widened), and with no
    configuration trained twice."""
    from pipeline.store import Store, trial_budget, trials_ran

    store, exact, distinct = Store(str(db), create=False), True, True
    for study in store.all_studies():
        trials = [t for t in store.trials(study.id) if t.ran and t.prefix_of is None]
        exact &= trials_ran(trials) == trial_budget(study.study, bool(store.widenings(study.id)))
        distinct &= len({json.dumps(t.parameters, sort_keys=True) for t in trials}) == len(trials)
    return exact, distinct


def run_arm(path: Path, overrides: list[str], workers: int | None, folder: Path, device: str) -> WorkersTiming:
    """The file run once into a new database in `folder`, on `workers` (None: the default)."""
    from pipeline.compare.campaign import run_campaign
    from pipeline.search.study import run_study
    from pipeline.spec.campaign_config import load_campaign
    from pipeline.spec.study_config import load_study

    db, log = folder / "runs.db", folder / "robust-tune.log"
    runner = trial_runner(workers, device=device, log_file=str(log))
    start = time.perf_counter()
    if is_campaign(path):
        campaign = load_campaign(path, None, overrides)
        summary = run_campaign(campaign, str(db), device, lambda event: None, lambda: runner, log_file=log)
        search, trials, runs = summary.search_seconds, summary.trials_run, summary.runs_trained
    else:
        result = run_study(load_study(path, overrides), str(db), device, None, log, runner=runner)
        search, trials, runs = result.seconds, result.completed + result.failed, 0
    seconds = time.perf_counter() - start
    spans = trial_spans(db)
    overlapped = any(a0 < b1 and a1 < b0 for i, (a0, b0) in enumerate(spans) for a1, b1 in spans[i + 1:])
    exact, distinct = budgets_kept(db)
    return WorkersTiming(runner.capacity, seconds, search, trials, runs, exact, distinct, overlapped,
                         max(0.0, 1 - busy_seconds(spans) / search))


def workers_benchmark(path: Path, overrides: tuple[str, ...] = (), device: str = "cpu", rounds: int = 1,
                      report: Callable[[str], None] = lambda message: None) -> list[tuple[WorkersTiming, ...]]:
    """`rounds` rounds of the file on the default workers and on one, the order alternating between rounds;
    each round's (default, one) timings."""
    if not path.is_file():
        raise UserError(f"no such study or campaign file: {path}")
    default = default_workers(device)[0]
    if default < 2:
        raise UserError(f"the default here is one trial at a time ({default_workers(device)[1]}): nothing to compare")
    results: list[tuple[WorkersTiming, ...]] = []
    for round_ in range(rounds):
        arms: dict[Any, WorkersTiming] = {}
        for workers in ((None, 1) if round_ % 2 == 0 else (1, None)):
            report(f"round {round_ + 1}/{rounds}: {'the default' if workers is None else '--workers 1'}")
            with tempfile.TemporaryDirectory(prefix="rt-bench-workers-") as folder:
                arms[workers] = run_arm(path, list(overrides), workers, Path(folder), device)
        results.append((arms[None], arms[1]))
    return results
