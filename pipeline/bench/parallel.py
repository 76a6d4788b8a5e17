"""Trials in this process against trials on Dask workers, measured side by side (`robust-tune bench parallel`).

The same trials (the quickstart study's, at fixed parameters, seed and thread count) train through each runner a
study uses, round by round, so that the machine's load hits every arm alike:

- one trial's seconds in this process, on one worker as `run --workers 1` starts it, and on one worker of a plain
  `distributed.LocalCluster` (Dask's own worker environment, MALLOC_TRIM_THRESHOLD_ included: the cause of the
  slow workers this tool used to have, kept as the reference);
- trials per hour one at a time in this process and with `--workers N` for each N asked (1 and 2 by default), the
  clusters started and warmed before the clock (their start-up is reported on its own), with the median trial's
  own seconds: what trials sharing the cores cost each other.

Every arm must give the same metrics for the same trial; `same_numbers` says whether they did.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from pipeline.errors import TrainingFailed
from pipeline.search.parallel import DaskRunner, usable_cores
from pipeline.spec.study_config import load_study
from pipeline.search.trial import InProcessRunner, Outcome, TrialJob, TrialRunner
from pipeline.training.result import RunResult

STUDY_FILE = Path(__file__).resolve().parents[2] / "studies" / "quickstart.toml"
BETAS = (0.3, 3.0, 30.0, 300.0)  # the trials' parameters, cycled: hardness-weighted sampling at four strengths


@dataclass(frozen=True)
class TrialSeconds:
    arm: str
    train_seconds: float  # median over the rounds: the trainer's own clock
    wall_seconds: float  # median: from handing the trial over to holding its outcome
    ratio: float  # train_seconds over the in-process arm's


@dataclass(frozen=True)
class Throughput:
    arm: str
    start_seconds: float  # starting the runner (the cluster), before the clock
    trials_per_hour: float  # median over the rounds
    ratio: float  # over one trial at a time in this process
    trial_seconds: float  # the median trial's train_seconds in this arm


@dataclass(frozen=True)
class ParallelBench:
    trial: list[TrialSeconds]
    throughput: list[Throughput]
    same_numbers: bool  # every arm gave every trial the same metrics
    epochs: int
    threads: int
    cores: int


class PlainDaskRunner(DaskRunner):
    """A one-worker `distributed.LocalCluster` as Dask configures it out of the box (the reference arm)."""

    cluster: Any  # the LocalCluster once entered (DaskRunner leaves it None until its first trial)

    def __enter__(self) -> PlainDaskRunner:
        import dask
        from distributed import Client, LocalCluster

        shipped = next(d["distributed"]["nanny"]["pre-spawn-environ"] for d in dask.config.defaults
                       if "nanny" in d.get("distributed", {}))  # distributed.yaml's, whatever was set since
        with dask.config.set({"distributed.nanny.pre-spawn-environ": shipped}):
            self.cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                        host="127.0.0.1")
        self.client = Client(self.cluster)  # capacity: its one worker
        return self


def jobs(epochs: int, threads: int, count: int) -> list[TrialJob]:
    """`count` quickstart trials at `epochs` epochs and `threads` torch threads, seed 0, on the CPU."""
    study = replace(load_study(STUDY_FILE, [f"params.epochs={epochs}"]), threads=threads)
    return [TrialJob(study, i, {"beta": BETAS[i % len(BETAS)], "importance_sampling": False}, 0, "cpu")
            for i in range(count)]


def run_all(runner: TrialRunner, todo: list[TrialJob]) -> tuple[float, dict[int, Outcome]]:
    """Train `todo` through `runner`, up to its capacity at once: wall seconds and the outcomes by trial (a trial
    that did not complete stops the benchmark, which has nothing to time then)."""
    pending = list(todo)
    outcomes: dict[int, Outcome] = {}
    start = time.perf_counter()
    while pending or len(outcomes) < len(todo):
        while pending and len(todo) - len(pending) - len(outcomes) < runner.capacity:
            runner.submit(pending.pop(0))
        for outcome in runner.wait(lambda event: None):
            if outcome.result is None:
                raise TrainingFailed(f"benchmark trial {outcome.trial_index} did not complete: "
                                     f"{outcome.error or outcome.lost}")
            outcomes[outcome.trial_index] = outcome
    return time.perf_counter() - start, outcomes


def completed(outcome: Outcome) -> RunResult:
    """The result of a trial that `run_all` returned: every one of them completed."""
    assert outcome.result is not None, f"trial {outcome.trial_index} did not complete"
    return outcome.result


def metrics(outcome: Outcome) -> dict[str, Any]:
    """A completed trial's numbers, less its clock."""
    return {**completed(outcome).to_dict(), "train_seconds": None}


def parallel_benchmark(epochs: int = 10, threads: int = 1, rounds: int = 3, trials: int = 4,
                       workers: tuple[int, ...] = (1, 2), log_file: str = "",
                       report: Callable[[str], None] = lambda message: None) -> ParallelBench:
    """Both comparisons above, `rounds` timed rounds each after a warm-up (a worker's first trial also imports the
    libraries and loads the data); `trials` per round and arm for the throughput."""
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")
    environ = dict(os.environ)  # a nanny writes Dask's worker environment into this process's: put back after
    starts: dict[str, float] = {}

    def started(name: str, runner: TrialRunner) -> TrialRunner:
        report(f"starting {name}")
        tick = time.perf_counter()
        runner.__enter__()
        if isinstance(runner, DaskRunner):
            runner.start()  # a local cluster starts with its first trial otherwise
        starts[name] = time.perf_counter() - tick
        return runner

    runners: dict[str, TrialRunner] = {}
    try:
        runners["in this process"] = started("in this process", InProcessRunner())
        for n in sorted({1, *workers}):  # the tool's clusters first, spawned before the plain one sets Dask's environ
            runners[f"{n} Dask worker(s)"] = started(f"{n} Dask worker(s)", DaskRunner("cpu", log_file, workers=n))
        runners["plain Dask worker"] = started("plain Dask worker", PlainDaskRunner("cpu", log_file, workers=1))
        for n in sorted(set(workers) - {1}):  # every worker's first trial imports the libraries and loads the data
            report(f"warming {n} Dask worker(s)")
            run_all(runners[f"{n} Dask worker(s)"], jobs(epochs, threads, n))
        seen: dict[int, dict[str, Any]] = {}  # each trial's metrics as the first arm gave them

        def agrees(outcomes: dict[int, Outcome]) -> bool:
            return all(seen.setdefault(i, metrics(o)) == metrics(o) for i, o in outcomes.items())

        same = True
        seconds: dict[str, list[tuple[float, float]]] = {name: [] for name in
                                                         ("in this process", "1 Dask worker(s)", "plain Dask worker")}
        for round_ in range(rounds + 1):
            for name in seconds:
                report(f"one trial, round {round_}/{rounds}: {name}")
                wall, outcomes = run_all(runners[name], jobs(epochs, threads, 1))
                same &= agrees(outcomes)
                if round_:
                    seconds[name].append((completed(outcomes[0]).train_seconds, wall))
        hourly: dict[str, list[float]] = {name: [] for name in ("in this process",
                                                                *(f"{n} Dask worker(s)" for n in workers))}
        own: dict[str, list[float]] = {name: [] for name in hourly}  # each trial's train_seconds
        for round_ in range(1, rounds + 1):
            for name in hourly:
                report(f"{trials} trials, round {round_}/{rounds}: {name}")
                wall, outcomes = run_all(runners[name], jobs(epochs, threads, trials))
                same &= agrees(outcomes)
                hourly[name].append(3600 * trials / wall)
                own[name] += [completed(o).train_seconds for o in outcomes.values()]
    finally:
        for runner in reversed(runners.values()):
            runner.__exit__(None, None, None)
        os.environ.clear()
        os.environ.update(environ)
    base = statistics.median(t for t, _ in seconds["in this process"])
    trial = [TrialSeconds(name, statistics.median(t for t, _ in values), statistics.median(w for _, w in values),
                          statistics.median(t for t, _ in values) / base) for name, values in seconds.items()]
    sequential = statistics.median(hourly["in this process"])
    throughput = [Throughput(name, starts[name], statistics.median(values), statistics.median(values) / sequential,
                             statistics.median(own[name])) for name, values in hourly.items()]
    return ParallelBench(trial, throughput, same, epochs, threads, usable_cores())
