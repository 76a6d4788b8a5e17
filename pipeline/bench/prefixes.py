"""`robust-tune bench prefixes`: what epoch prefixes and early stopping save in a search that tunes `epochs`,
on a problem replayed from real per-epoch curves (pipeline/bench/replay/digits-hws-curves.csv, made by
tools/replay_curves.py) whose true value at every epoch count is known.

The truth of a configuration at E epochs is a Gaussian process (search_problems.fit_surrogate) fitted, one per
epoch count, to the configurations' mean over training seeds at that epoch. A trial observes a whole curve: the
truth at every epoch plus the deviation *curve* of one training seed of the nearest tried configuration from its
mean, so the noise is correlated along the epochs as a real trial's prefixes are (at most the best real run at
that epoch).

Four variants drive the study's own Ax strategy (pipeline/search/ax.py, an in-memory client) from the same search
seed: plain (one observation per trial, costs its epochs), prefix (also each epoch prefix the trial holds,
pipeline/epochs.prefix_epochs, as an attached completed trial; same cost), stop (the median StopRule of
pipeline/spec/epochs.py; a stopped trial costs the epochs it trained and is told to Ax as early stopped with its value
at the epoch it stopped: Client.attach_data + mark_trial_early_stopped) and both. After each trial the
recommendation is the best observed configuration (prefixes and a stopped trial's last epoch included, each at
the epochs it was trained), and what counts is its true value. At each checkpoint of epochs trained, the study's
GP's pick is measured too: the tried configuration (completed observations) with the highest posterior mean of a GP
fitted on every observation, the recommendation `--pick model` makes. Import this module only after `quiet_libraries`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, cast

import numpy as np

from pipeline.spec.epochs import StopRule, prefix_epochs
from pipeline.params import Choice, Range
from pipeline.bench.problems import CHANCE, CURVE_SPACE, CurveTable, _to_unit, fit_surrogate, read_curves

PROBLEM = "digits-hws-epochs-replay"
LOW_EPOCHS = 2  # the searched range of epochs is [LOW_EPOCHS, the table's top epoch count]
VARIANTS = {
    "plain": "one observation per trial, which costs the epochs it trains",
    "prefix": "also every epoch prefix the trial holds, told to Ax as a completed trial of its own (same cost)",
    "stop": "the median stopping rule: a trial behind the median of earlier trials at the same epoch stops",
    "both": "prefixes and the median stopping rule",
}


@dataclass(frozen=True)
class EpochsProblem:
    """The search space with `epochs` searched, the true value of a configuration at its epochs, and a noisy
    observed curve of a trial (None: the run failed, as a diverged run does)."""

    search: dict[str, Range | Choice]
    kinds: dict[str, str]
    truth: Callable[[dict[str, Any]], float]
    observe: Callable[[dict[str, Any], np.random.Generator], np.ndarray | None]
    best: float


def epochs_problem(table: CurveTable) -> EpochsProblem:
    """The replay of the digits hws study with epochs searched (see the module's docstring)."""
    filled = np.where(np.isnan(table.values), CHANCE, table.values)  # a failed run counts at chance
    means = filled.mean(axis=1)  # configurations x epochs
    predictors = [fit_surrogate(table.points, means[:, e]) for e in range(table.top_epochs)]
    completed = ~np.isnan(table.values).any(axis=2)  # configurations x seeds
    # Deviations are not scaled up for coming from a mean of few seeds: at a configuration whose seeds differ by
    # tens of points (an unstable one) that would make observations no real run reached; an observation at a
    # tried configuration is thus one of its real runs, and no observation exceeds the best real run at its epoch.
    deviations = table.values - np.nanmean(table.values, axis=1, keepdims=True)
    ceiling = np.nanmax(table.values, axis=(0, 1))
    seeds = table.values.shape[1]
    search: dict[str, Range | Choice] = {**CURVE_SPACE, "epochs": Range(LOW_EPOCHS, table.top_epochs)}
    kinds = {**{name: "float" for name in CURVE_SPACE}, "epochs": "int"}

    def unit(parameters: dict[str, Any]) -> np.ndarray:
        return np.array([_to_unit(space, parameters[name]) for name, space in CURVE_SPACE.items()])

    @functools.lru_cache(maxsize=4096)
    def truths(point: tuple[float, ...]) -> np.ndarray:
        return np.array([float(predict(np.array(point))[0]) for predict in predictors])

    def truth(parameters: dict[str, Any]) -> float:
        return float(truths(tuple(unit(parameters)))[int(parameters["epochs"]) - 1])

    def observe(parameters: dict[str, Any], rng: np.random.Generator) -> np.ndarray | None:
        point = unit(parameters)
        nearest = int(np.argmin(np.sum((table.points - point) ** 2, axis=1)))
        seed = int(rng.integers(seeds))
        if not completed[nearest, seed]:
            return None
        epochs = int(parameters["epochs"])
        return np.clip(truths(tuple(point))[:epochs] + deviations[nearest, seed, :epochs], 0.0, ceiling[:epochs])

    best = max(float(np.max(predict(np.random.default_rng(12345).random((5_000, len(CURVE_SPACE))))))
               for predict in predictors[LOW_EPOCHS - 1:])
    return EpochsProblem(search, kinds, truth, observe, best)


@dataclass
class EpochsRun:
    """One variant from one search seed: after each trial, the epochs trained so far, the observations Ax was
    told so far, and the true value of the recommendation."""

    variant: str
    seed: int
    total_epochs: list[int] = field(default_factory=list)
    observations: list[int] = field(default_factory=list)
    true_values: list[float] = field(default_factory=list)  # NaN while nothing completed
    proposed: list[int] = field(default_factory=list)  # each trial's epochs
    trained: list[int] = field(default_factory=list)  # the epochs each trial trained (fewer: stopped early)
    best_observed: list[float] = field(default_factory=list)  # the recommendation's observed value (NaN: none)
    best_epochs: list[int] = field(default_factory=list)  # the recommendation's epochs (0: none)
    # checkpoint -> the true value of the GP's pick after the trial that brought the epochs trained to it or past it
    model_values: dict[int, float] = field(default_factory=dict)

    def value_at(self, epochs: float) -> float:
        """The true value of the recommendation once `epochs` epochs were trained (NaN: no trial ended by then)."""
        done = [v for total, v in zip(self.total_epochs, self.true_values) if total <= epochs]
        return done[-1] if done else math.nan

    @property
    def trials(self) -> int:
        return len(self.total_epochs)


def run_variant(problem: EpochsProblem, variant: str, seed: int, budget: int, initial: int,
                min_epochs: int, checkpoints: tuple[int, ...] = ()) -> EpochsRun:
    """`variant` from search seed `seed` until `budget` epochs are trained (the last trial may run past it), with
    the GP's pick measured once the epochs trained reach each of `checkpoints`."""
    from pipeline.search.ax import generation_strategy, in_memory_client, range_and_choice_configs

    prefixes, stopping = variant in ("prefix", "both"), variant in ("stop", "both")
    client = in_memory_client(range_and_choice_configs(problem.search, problem.kinds), f"epochs-{variant}-{seed}",
                              seed, generation_strategy(initial, seed, "gp"))
    noise = np.random.default_rng([seed, 25])  # the same observations for every variant from one search seed
    curves: list[tuple[float, ...]] = []
    best: tuple[float, dict[str, Any]] | None = None
    run, total, told = EpochsRun(variant, seed), 0, 0
    while total < budget:
        index, parameters = next(iter(client.get_next_trials(max_trials=1).items()))
        epochs = int(parameters["epochs"])
        curve = problem.observe(dict(parameters), noise)
        if curve is None:
            client.mark_trial_abandoned(trial_index=index)
            trained = epochs  # a diverged run is found out at its end
        else:
            trained = epochs
            if stopping:
                rule = StopRule(50.0, min_epochs, tuple(curves))
                values = cast(Sequence[float], curve)
                trained = next((e for e in range(1, epochs) if rule.should_stop(values[:e])), epochs)
            curves.append(tuple(float(v) for v in curve[:trained]))
            value = float(curve[trained - 1])
            if trained == epochs:
                client.complete_trial(trial_index=index, raw_data={"value": value})
            else:
                client.attach_data(trial_index=index, raw_data={"value": value})
                client.mark_trial_early_stopped(trial_index=index)
            told += 1
            candidates = [(value, {**parameters, "epochs": trained})]
            if prefixes:
                for e in prefix_epochs(problem.search, trained, trained == epochs):
                    attached = client.attach_trial(parameters={**parameters, "epochs": e})
                    client.complete_trial(trial_index=attached, raw_data={"value": float(curve[e - 1])})
                    candidates.append((float(curve[e - 1]), {**parameters, "epochs": e}))
                    told += 1
            for candidate in candidates:
                if best is None or candidate[0] > best[0]:
                    best = candidate
        total += trained
        run.proposed.append(epochs)
        run.trained.append(trained)
        run.total_epochs.append(total)
        run.observations.append(told)
        run.true_values.append(math.nan if best is None else problem.truth(best[1]))
        run.best_observed.append(math.nan if best is None else best[0])
        run.best_epochs.append(0 if best is None else int(best[1]["epochs"]))
        for checkpoint in (c for c in checkpoints if c <= total and c not in run.model_values):
            run.model_values[checkpoint] = _model_pick_value(client, problem)
    return run


def _model_pick_value(client: Any, problem: EpochsProblem) -> float:
    """The true value of the tried configuration the GP (the study's, pipeline/surrogate.fit_gp) predicts best;
    NaN when it cannot be fitted yet."""
    from pipeline.search.ax import experiment
    from pipeline.search.surrogate import fit_gp

    ran = experiment(client)
    model = fit_gp(ran, ran.lookup_data(), "value")
    if model is None:
        return math.nan
    tried = model.completed_trials()
    means, _ = model.predict([parameters for _, parameters in tried])
    return problem.truth(dict(tried[int(np.argmax(means))][1]))


@dataclass(frozen=True)
class Summary:
    """One variant over every search seed: the recommendation's true value at each checkpoint of epochs."""

    variant: str
    seeds: int
    quartiles: dict[int, tuple[float, float, float]]  # epochs trained -> (25%, median, 75%) of the true value
    epochs_to_plain: float  # the epochs at which the median over seeds first reaches plain's final median (inf: not)
    trials: float  # median trials run
    observations: float  # median observations told to Ax
    model_quartiles: dict[int, tuple[float, float, float]] = field(default_factory=dict)  # the same for the GP's pick


def _quartiles(values: np.ndarray) -> tuple[float, float, float]:
    """The 25%, 50% and 75% points of `values` without their NaNs (NaN each when none is left)."""
    values = values[~np.isnan(values)]
    if not len(values):
        return math.nan, math.nan, math.nan
    low, middle, high = (float(q) for q in np.percentile(values, [25, 50, 75]))
    return low, middle, high


def summarise(runs: list[EpochsRun], checkpoints: tuple[int, ...]) -> list[Summary]:
    """Quartiles of the true value of each variant's recommendation at the checkpoints, and the epochs each
    variant needs to reach the median value plain search ends with."""
    def quartiles(mine: list[EpochsRun], epochs: int) -> tuple[float, float, float]:
        return _quartiles(np.array([r.value_at(epochs) for r in mine]))

    by_variant = {v: sorted((r for r in runs if r.variant == v), key=lambda r: r.seed) for v in VARIANTS}
    def epochs_to_reach(mine: list[EpochsRun], target: float) -> float:
        medians = (np.nanmedian([r.value_at(x) for r in mine]) if any(r.total_epochs[0] <= x for r in mine)
                   else math.nan for x in range(1, checkpoints[-1] + 1))
        return next((float(x) for x, median in enumerate(medians, 1) if median >= target), math.inf)

    by_variant = {v: mine for v, mine in by_variant.items() if mine}
    target = quartiles(by_variant["plain"], checkpoints[-1])[1] if "plain" in by_variant else math.nan
    def model_quartiles(mine: list[EpochsRun], epochs: int) -> tuple[float, float, float]:
        return _quartiles(np.array([r.model_values.get(epochs, math.nan) for r in mine]))

    return [Summary(variant, len(mine), {k: quartiles(mine, k) for k in checkpoints}, epochs_to_reach(mine, target),
                    float(np.median([r.trials for r in mine])), float(np.median([r.observations[-1] for r in mine])),
                    {k: model_quartiles(mine, k) for k in checkpoints if any(k in r.model_values for r in mine)})
            for variant, mine in by_variant.items()]


def surrogate_checks(table: CurveTable, epochs: tuple[int, ...]) -> dict[int, dict[str, float]]:
    """search_problems.surrogate_check at each of `epochs`: how well the surrogate of that epoch count predicts
    configurations it was not fitted on, against the mean of the rest and the seed noise's floor."""
    from pipeline.bench.problems import ReplayTable, surrogate_check

    return {e: surrogate_check(ReplayTable(CURVE_SPACE, {}, table.points, table.values[:, :, e - 1], table.header))
            for e in epochs if 1 <= e <= table.top_epochs}


@functools.lru_cache(maxsize=1)
def replay_problem() -> EpochsProblem:
    """The problem, built once per process (fitting its surrogates takes seconds)."""
    return epochs_problem(read_curves())


def _run_job(job: tuple[str, int, int, int, int, tuple[int, ...], str]) -> EpochsRun:
    """One search run in a worker process, its libraries' output routed to the log first."""
    from pipeline.library_logs import quiet_libraries

    variant, seed, budget, initial, min_epochs, checkpoints, log_file = job
    quiet_libraries(log_file)
    return run_variant(replay_problem(), variant, seed, budget, initial, min_epochs, checkpoints)


def epochs_benchmark(variants: tuple[str, ...], seeds: int, budget: int, initial: int = 5, min_epochs: int = 3,
                     processes: int = 1, log_file: str = "runs/robust-tune.log",
                     report: Callable[[str], None] = lambda message: None
                     ) -> tuple[list[EpochsRun], list[Summary], tuple[int, ...]]:
    """Every variant from search seeds 0 .. seeds-1 until `budget` epochs are trained, the runs spread over
    `processes` processes (one thread each; a run's result does not depend on where it ran)."""
    checkpoints = tuple(sorted({max(1, round(budget * share)) for share in (0.25, 0.5, 0.75, 1.0)}))
    jobs = [(variant, seed, budget, initial, min_epochs, checkpoints, log_file) for seed in range(seeds)
            for variant in variants]
    from pipeline.bench.search import run_jobs

    runs = run_jobs(_run_job, jobs, processes, report, lambda job: f"{job[0]}, seed {job[1]}")
    return runs, summarise(runs, checkpoints), checkpoints
