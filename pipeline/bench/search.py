"""`robust-tune bench search`: the search strategies side by side on problems whose truth is known
(pipeline/bench/problems.py), each run from many search seeds at the study's budget.

A strategy proposes a configuration, the problem observes it (noisily; None: the trial failed, and Ax is
told it was abandoned, as a study does), and after k trials the strategy recommends one of the configurations
it tried: the best observed (what the best table shows), or, for the Gaussian process, the best by the
model's posterior mean among the tried ones. What counts is the recommendation's *true* value.

Strategies: the tool's own Ax generation strategies (pipeline/search/ax.py: "gp" and its variants, "sobol",
"random"; the same objects a study uses), and Optuna's TPE with its defaults ("tpe") when Optuna is
installed; on request also Ax's default GP that winsorises ("gp-winsorized") and the GP told the mean and
standard error of two training seeds per proposal at the same total training ("gp-2seeds"), and the gp with its
acquisition optimised from fewer starts and raw samples ("gp-fast", "gp-fast2"; docs/design/search.md, Proposal cost).

A strategy named with the suffix WIDEN ("gp+widen", "random+widen") widens its search space as a study does: after
every told trial, each soft end of a range (the problem's declared parameters) that the best observed trial sits on
is widened at once (search/bounds.widenings) and Ax searches the wider space from the next proposal on.
Import this module only after `quiet_libraries`.
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from pipeline.bench.problems import Problem, problems
from pipeline.params import Choice, Range
from pipeline.search.bounds import Widening
from pipeline.spec.study_config import STRATEGIES

# The benchmark's own strategies beside a study's (study_config.STRATEGIES, the one list of those): variants of the
# gp (BENCH_VARIANTS) and Optuna's TPE.
BENCH_ONLY_GP = {
    "gp-fast": "gp with its acquisition optimised from 5 starts, the best of 256 raw samples (Ax: 20 of 1,024)",
    "gp-fast2": "gp with its acquisition optimised from 2 starts, the best of 64 raw samples",
    "gp-winsorized": "the gp on results winsorised as Ax does by default",
    "gp-2seeds": "the gp told the mean and standard error of 2 training seeds per proposal (half the proposals)",
}
# Every strategy the benchmark knows, in the tables' order: a study's GP strategies, the benchmark's variants of the
# gp, a study's strategies without a model, TPE.
STRATEGY_NOTES = {**{name: note for name, note in STRATEGIES.items() if name.startswith("gp")}, **BENCH_ONLY_GP,
                  **{name: note for name, note in STRATEGIES.items() if not name.startswith("gp")},
                  "tpe": "Optuna's TPE sampler, its defaults"}
WIDEN = "+widen"  # a strategy's suffix: widen the ranges as a study does (see the module's docstring)
# Measured before, or too slow to measure at the default size (docs/design/search.md): run when named.
ON_REQUEST = ("gp-warp", "gp-centre", "gp-winsorized", "gp-2seeds", "gp-trust", "gp-margin", "gp-fast", "gp-fast2")
# The benchmark's own variants of the study's gp: (strategy, winsorize, acquisition effort; None: the study's).
BENCH_VARIANTS: dict[str, tuple[str, bool, str | None]] = {
    "gp-winsorized": ("gp", True, None), "gp-2seeds": ("gp", False, None),
    "gp-fast": ("gp", False, "fast"), "gp-fast2": ("gp", False, "fast2")}
# The model's pick is the study's own GP (surrogate.fit_gp: the gp's) whatever proposed the trials: taken for these.
MODEL_PICKS = ("gp", "gp-2seeds")


def optuna_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("optuna") is not None


def base_strategy(strategy: str) -> str:
    """The strategy without its WIDEN suffix."""
    return strategy.removesuffix(WIDEN)


def known_strategy(strategy: str) -> bool:
    """Whether `strategy` is one of STRATEGY_NOTES, or one of the tool's own with WIDEN (TPE searches a fixed box)."""
    base = base_strategy(strategy)
    return base in STRATEGY_NOTES and (base == strategy or base not in ("tpe", "gp-2seeds"))


def strategy_order(strategy: str) -> tuple[int, bool]:
    """Where `strategy` comes in the tables: as its base strategy, just after it when it widens."""
    return list(STRATEGY_NOTES).index(base_strategy(strategy)), strategy.endswith(WIDEN)


def strategies(with_tpe: bool | None = None) -> tuple[str, ...]:
    """The strategies benchmarked by default: all but ON_REQUEST, TPE only when Optuna is installed."""
    tpe = optuna_available() if with_tpe is None else with_tpe
    return tuple(name for name in STRATEGY_NOTES if (name != "tpe" or tpe) and name not in ON_REQUEST)


@dataclass
class SearchRun:
    """One strategy from one search seed on one problem: what it tried and what it would recommend."""

    problem: str
    strategy: str
    seed: int
    trainings_per_trial: int
    initial: int = 0  # trainings proposed before the model (Sobol's)
    observed: list[float | None] = field(default_factory=list)  # per proposal (a mean over its seeds)
    truths: list[float] = field(default_factory=list)  # per proposal
    on_edge: list[bool] = field(default_factory=list)  # per proposal after the initial ones, in the box searched then
    widened: list[tuple[int, str, str]] = field(default_factory=list)  # (after trial, parameter, side) per widening
    proposal_seconds: list[float] = field(default_factory=list)
    model_picks: dict[int, int] = field(default_factory=dict)  # trainings -> index of the model's pick

    def model_seconds(self) -> list[float]:
        """The time of each proposal after the initial ones: the model's (a GP's fit and acquisition)."""
        per_trial = self.trainings_per_trial
        return [s for count, s in enumerate(self.proposal_seconds, 1) if count * per_trial > self.initial]

    def observed_pick(self, trainings: int) -> int | None:
        """Index of the best observed configuration among the first `trainings` trainings."""
        tried = [(value, i) for i, value in enumerate(self.observed[:trainings // self.trainings_per_trial])
                 if value is not None]
        return max(tried)[1] if tried else None

    def true_value(self, trainings: int, pick: str = "observed") -> float:
        """The true value of the configuration recommended after `trainings` trainings (NaN: none yet)."""
        index = self.model_picks.get(trainings) if pick == "model" else self.observed_pick(trainings)
        return math.nan if index is None else self.truths[index]


class AxSearch:
    """A strategy of pipeline/search/ax.py driven through an in-memory Ax client, as a study drives it."""

    def __init__(self, problem: Problem, strategy: str, seed: int, initial: int) -> None:
        from pipeline.search.ax import generation_strategy, in_memory_client, range_and_choice_configs

        base = base_strategy(strategy)
        study_strategy, winsorize, effort = BENCH_VARIANTS.get(base, (base, False, None))
        self.client = in_memory_client(range_and_choice_configs(problem.search, problem.kinds),
                                       f"{problem.name}-{strategy}-{seed}", seed,
                                       generation_strategy(initial, seed, study_strategy, winsorize, effort))
        self.index: int | None = None
        self.problem, self.widens = problem, strategy.endswith(WIDEN)
        self.search: dict[str, Range | Choice] = dict(problem.search)  # the box searched now
        self.parameters: dict[int, dict[str, Any]] = {}
        self.observed: dict[int, float] = {}  # Ax's trial index -> the value told

    def ask(self) -> dict[str, Any]:
        proposals = self.client.get_next_trials(max_trials=1)
        self.index, parameters = next(iter(proposals.items()))
        self.parameters[self.index] = dict(parameters)
        return dict(parameters)

    def tell(self, values: list[float | None]) -> list[Widening]:
        """Tell Ax how the trial ended; with WIDEN, then widen the soft ends the best trial sits on (returned)."""
        assert self.index is not None
        done = [v for v in values if v is not None]
        if not done:
            self.client.mark_trial_abandoned(trial_index=self.index)
        elif len(values) == 1:
            self.client.complete_trial(trial_index=self.index, raw_data={"value": done[0]})
        else:  # the mean and its standard error, as a study with seeds_per_trial tells Ax
            sem = float(np.std(done, ddof=1) / math.sqrt(len(done))) if len(done) > 1 else 0.0
            self.client.complete_trial(trial_index=self.index, raw_data={"value": (float(np.mean(done)), sem)})
        if done:
            self.observed[self.index] = float(np.mean(done))
        return self.widen() if self.widens else []

    def widen(self) -> list[Widening]:
        """As a study does after every recorded trial: each soft end of a range the best observed trial sits on,
        widened at once (bounds.widenings), and Ax's search space with it."""
        from pipeline.search.ax import experiment, widen_search_space
        from pipeline.search.bounds import searched_ranges, widenings

        if not self.observed:
            return []
        best = max(self.observed, key=lambda index: (self.observed[index], -index))  # the earlier of equals
        moved = widenings(self.search, self.problem.declared, self.parameters[best], best, len(self.parameters))
        if moved:
            self.search = searched_ranges(self.search, moved)
            widen_search_space(experiment(self.client), {w.parameter: w.after for w in moved})
        return moved

    def model_pick(self) -> int | None:
        """Index (in trial order) of the tried configuration with the best posterior mean of the study's GP."""
        from pipeline.search.ax import experiment
        from pipeline.search.surrogate import fit_gp

        tried_so_far = experiment(self.client)
        model = fit_gp(tried_so_far, tried_so_far.lookup_data(), "value")
        if model is None:
            return None
        tried = model.completed_trials()
        means, _ = model.predict([parameters for _, parameters in tried])
        return tried[int(np.argmax(means))][0]


class TpeSearch:
    """Optuna's TPE sampler with its defaults, seeded, through its ask-and-tell interface."""

    def __init__(self, problem: Problem, strategy: str, seed: int, initial: int) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
        self.distributions = {name: _optuna_distribution(optuna, space, problem.kinds[name])
                              for name, space in problem.search.items()}
        self.trial: Any = None

    def ask(self) -> dict[str, Any]:
        self.trial = self.study.ask(self.distributions)
        return dict(self.trial.params)

    def tell(self, values: list[float | None]) -> list[Widening]:
        done = [v for v in values if v is not None]
        if done:
            self.study.tell(self.trial, float(np.mean(done)))
        else:
            self.study.tell(self.trial, state=self.optuna.trial.TrialState.FAIL)
        return []

    def model_pick(self) -> int | None:
        return None


def _optuna_distribution(optuna: Any, space: Any, kind: str) -> Any:
    from pipeline.params import Choice

    if isinstance(space, Choice):
        return optuna.distributions.CategoricalDistribution(list(space.values))
    if kind == "int":
        return optuna.distributions.IntDistribution(int(space.low), int(space.high), log=space.log)
    return optuna.distributions.FloatDistribution(space.low, space.high, log=space.log)


def run_search(problem: Problem, strategy: str, seed: int, trainings: int, initial: int,
               checkpoints: tuple[int, ...]) -> SearchRun:
    """`strategy` from search seed `seed` on `problem` for `trainings` trainings; the GP strategies' model
    picks are taken at each of `checkpoints` (in trainings)."""
    per_trial = 2 if strategy == "gp-2seeds" else 1
    searcher = (TpeSearch if strategy == "tpe" else AxSearch)(problem, strategy, seed, max(1, initial // per_trial))
    noise = np.random.default_rng([seed, sum(map(ord, problem.name))])
    run = SearchRun(problem.name, strategy, seed, per_trial, initial)
    for count in range(1, trainings // per_trial + 1):
        tick = time.perf_counter()
        parameters = searcher.ask()
        run.proposal_seconds.append(time.perf_counter() - tick)
        if count * per_trial > initial:  # the same slice of every strategy: random search's gives the base rate
            run.on_edge.append(problem.on_edge(parameters, search=getattr(searcher, "search", None)))
        values = [problem.observe(parameters, noise) for _ in range(per_trial)]
        run.widened += [(count, w.parameter, w.side) for w in searcher.tell(values)]
        done = [v for v in values if v is not None]
        run.observed.append(float(np.mean(done)) if done else None)
        run.truths.append(problem.truth(parameters))
        if base_strategy(strategy) in MODEL_PICKS and count * per_trial in checkpoints and count * per_trial > initial:
            pick = searcher.model_pick()
            if pick is not None:
                run.model_picks[count * per_trial] = pick
    return run


@dataclass(frozen=True)
class Summary:
    """One problem and strategy over every search seed: the recommendations' true values at each checkpoint."""

    problem: str
    strategy: str
    pick: str  # observed | model
    seeds: int
    quartiles: dict[int, tuple[float, float, float]]  # trainings -> (25%, median, 75%) of the true value
    beats_random: float | None  # share of seeds whose recommendation at the last checkpoint beats random's
    edge_share: float | None  # share of proposals after the initial ones with a range parameter on a bound
    proposal_ms: float  # median time of one proposal
    model_seconds: float  # median time of one proposal after the initial ones (a GP's: fit and acquisition)
    best: float  # the problem's best true value
    widened: float | None = None  # with WIDEN: share of seeds whose search widened a range


def summarise(runs: list[SearchRun], checkpoints: tuple[int, ...], best: dict[str, float]) -> list[Summary]:
    """Quartiles of the true value of each strategy's recommendation, per problem, and against random search."""
    summaries = []
    keys = sorted({(r.problem, r.strategy) for r in runs}, key=lambda k: (k[0], strategy_order(k[1])))
    for problem, strategy in keys:
        mine = sorted((r for r in runs if (r.problem, r.strategy) == (problem, strategy)), key=lambda r: r.seed)
        random = {r.seed: r for r in runs if (r.problem, r.strategy) == (problem, "random")}
        picks = ["observed", "model"] if any(r.model_picks for r in mine) else ["observed"]
        for pick in picks:
            quartiles = {}
            for k in checkpoints:
                values = np.array([r.true_value(k, pick) for r in mine])
                values = values[~np.isnan(values)]
                low, middle, high = (float(q) for q in np.percentile(values, [25, 50, 75])) if len(values) else (
                    math.nan,) * 3
                quartiles[k] = (low, middle, high)
            last = checkpoints[-1]
            beats = None
            if strategy != "random" and random:
                pairs = [(r.true_value(last, pick), random[r.seed].true_value(last)) for r in mine if r.seed in random]
                beats = float(np.mean([a > b for a, b in pairs])) if pairs else None
            edges = [e for r in mine for e in r.on_edge]
            summaries.append(Summary(problem, strategy, pick, len(mine), quartiles, beats,
                                     float(np.mean(edges)) if edges else None,
                                     1000 * float(np.median([s for r in mine for s in r.proposal_seconds])),
                                     float(np.median([s for r in mine for s in r.model_seconds()] or [math.nan])),
                                     best[problem],
                                     float(np.mean([bool(r.widened) for r in mine])) if strategy.endswith(WIDEN)
                                     else None))
    return summaries


@functools.lru_cache(maxsize=4)
def _problem(name: str) -> Problem:
    """A problem built once per process (the replay fits its surrogate when built)."""
    return problems((name,))[0]


def _run_job(job: tuple[str, str, int, int, int, tuple[int, ...], str]) -> SearchRun:
    """One search run in a worker process, its libraries' output routed to the log first."""
    from pipeline.library_logs import quiet_libraries

    name, strategy, seed, trainings, initial, checkpoints, log_file = job
    quiet_libraries(log_file)
    return run_search(_problem(name), strategy, seed, trainings, initial, checkpoints)


def search_benchmark(problem_names: tuple[str, ...], strategy_names: tuple[str, ...], seeds: int, trainings: int,
                     initial: int, processes: int = 1, log_file: str = "runs/robust-tune.log",
                     report: Callable[[str], None] = lambda message: None
                     ) -> tuple[list[SearchRun], list[Summary], tuple[int, ...]]:
    """Every strategy from search seeds 0 .. seeds-1 on every problem at `trainings` trainings, the runs
    spread over `processes` processes (one thread each; a run's result does not depend on where it ran). The
    strategies take turns seed by seed, so that a machine busier at one time than another slows them alike."""
    checkpoints = tuple(k for k in (5, 10, 15, 20, 30, 40, 50) if k < trainings) + (trainings,)
    jobs = [(name, strategy, seed, trainings, initial, checkpoints, log_file) for name in problem_names
            for seed in range(seeds) for strategy in strategy_names]
    runs = run_jobs(_run_job, jobs, processes, report, lambda job: f"{job[0]}, {job[1]}, seed {job[2]}")
    best = {name: _problem(name).best for name in problem_names}
    return runs, summarise(runs, checkpoints, best), checkpoints


def run_jobs(run_job: Callable[[Any], Any], jobs: list[Any], processes: int, report: Callable[[str], None],
             describe: Callable[[Any], str]) -> list[Any]:
    """`run_job` of every job, here or spread over `processes` spawned processes of one torch thread each (a search
    run's result does not depend on where it ran), reporting how many are done."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    report(f"0/{len(jobs)} search runs")
    runs = []
    if processes <= 1:
        for job in jobs:
            runs.append(run_job(job))
            report(f"{len(runs)}/{len(jobs)} search runs (last: {describe(job)})")
        return runs
    import multiprocessing

    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_one_thread) as pool:
        for future in as_completed([pool.submit(run_job, job) for job in jobs]):
            runs.append(future.result())
            report(f"{len(runs)}/{len(jobs)} search runs")
    return runs


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)
