"""`robust-tune bench search`: the search strategies side by side on problems whose truth is known
(pipeline/bench/problems.py), each run from many search seeds at the study's budget.

A strategy proposes a configuration, the problem observes it (noisily; None: the trial failed, and Ax is
told it was abandoned, as a study does), and after k trainings a pick rule (PICKS) recommends one of the
configurations it tried: the best observed (what the best table shows), or, for the Gaussian process, the best by
the model's posterior mean among the tried ones, the best lower end of its interval, or the winner of a race of
the top three on extra trainings kept back from the search's k (pipeline/search/racing.py). What counts is the
recommendation's *true* value, and its spread over search seeds (and base splits: `SplitTerm`) is the search's
luck.

Strategies: the tool's own Ax generation strategies (pipeline/search/ax.py: "gp" and its variants, "sobol",
"random"; the same objects a study uses), and Optuna's TPE with its defaults ("tpe") when Optuna is
installed; on request also Ax's default GP that winsorises ("gp-winsorized") and the GP told the mean and
standard error of two training seeds per proposal at the same total training ("gp-2seeds"), the gp with its
acquisition optimised from fewer starts and raw samples ("gp-fast", "gp-fast2"; docs/design/search.md, Proposal
cost), and the gp whose trials train to half the epochs at half a training's cost, twice as many ("gp-lowfi", on a
problem with epochs).

A strategy named with the suffix WIDEN ("gp+widen", "random+widen") widens its search space as a study does: after
every told trial, each soft end of a range (the problem's declared parameters) that the best observed trial sits on
is widened at once (search/bounds.widenings) and Ax searches the wider space from the next proposal on. Options
after it, joined with "-" (WIDEN_OPTIONS; "gp+widen-model-x2"), change the rule: anchored on the model's pick
instead of the best observed trial, by a factor of 2 instead of 4, never at an end where a trial failed.
Import this module only after `quiet_libraries`.
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from pipeline.bench.problems import Problem, SplitTerm, problems
from pipeline.params import Choice, Range
from pipeline.search.bounds import WIDEN_FACTOR, Widening
from pipeline.search.racing import RACE_SIZE, RACE_TRAININGS, contenders, race_cost, race_winner
from pipeline.spec.study_config import STRATEGIES

# The benchmark's own strategies beside a study's (study_config.STRATEGIES, the one list of those): variants of the
# gp (BENCH_VARIANTS) and Optuna's TPE.
BENCH_ONLY_GP = {
    "gp-fast": "gp with its acquisition optimised from 5 starts, the best of 256 raw samples (Ax: 20 of 1,024)",
    "gp-fast2": "gp with its acquisition optimised from 2 starts, the best of 64 raw samples",
    "gp-winsorized": "the gp on results winsorised as Ax does by default",
    "gp-2seeds": "the gp told the mean and standard error of 2 training seeds per proposal (half the proposals)",
    "gp-lowfi": "the gp on trials trained to half the epochs, at half a training's cost (twice the proposals)",
}
# Every strategy the benchmark knows, in the tables' order: a study's GP strategies, the benchmark's variants of the
# gp, a study's strategies without a model, TPE.
STRATEGY_NOTES = {**{name: note for name, note in STRATEGIES.items() if name.startswith("gp")}, **BENCH_ONLY_GP,
                  **{name: note for name, note in STRATEGIES.items() if not name.startswith("gp")},
                  "tpe": "Optuna's TPE sampler, its defaults"}
WIDEN = "+widen"  # a strategy's suffix: widen the ranges as a study does (see the module's docstring)
# Options of WIDEN, joined to it with "-" ("gp+widen-model-x2"): each changes one thing of the study's rule.
WIDEN_OPTIONS = {
    "model": "anchored on the model's pick (the tried configuration with the best posterior mean) instead of the best "
             "observed trial",
    "x2": "by a factor of 2 on a log scale (half the range's width on a linear one) instead of "
          f"{WIDEN_FACTOR:g}",
    "safe": "never at an end where a trial failed",
}
# Measured before, or too slow to measure at the default size (docs/design/search.md): run when named.
ON_REQUEST = ("gp-warp", "gp-centre", "gp-winsorized", "gp-2seeds", "gp-trust", "gp-margin", "gp-fast", "gp-fast2",
              "gp-lowfi")
# The benchmark's own variants of the study's gp: (strategy, winsorize, acquisition effort; None: the study's).
BENCH_VARIANTS: dict[str, tuple[str, bool, str | None]] = {
    "gp-winsorized": ("gp", True, None), "gp-2seeds": ("gp", False, None), "gp-lowfi": ("gp", False, None),
    "gp-fast": ("gp", False, "fast"), "gp-fast2": ("gp", False, "fast2")}
# The model's pick is the study's own GP (surrogate.fit_gp: the gp's) whatever proposed the trials: taken for these.
MODEL_PICKS = ("gp", "gp-2seeds", "gp-lowfi")
# Trainings per trial where not one: two seeds per trial, or half the epochs.
TRIAL_COSTS = {"gp-2seeds": 2.0, "gp-lowfi": 0.5}
# How a search recommends a configuration after k trainings. The search's luck is the spread of its true value.
LOWER_Z = 1.96  # the lower end of the GP's 95% interval
PICKS = {
    "observed": "the best observed trial (a study's best; what evaluate re-trains by default)",
    "model": "the tried configuration with the highest posterior mean of the study's GP (--pick model)",
    "lower": "the tried configuration with the highest lower end of the GP's 95% interval (mean - 1.96 SD)",
    "race": f"{race_cost()} of the k trainings kept back: the search's top {RACE_SIZE} by the GP's posterior mean "
            f"each trained {'once' if RACE_TRAININGS == 1 else f'{RACE_TRAININGS} times'} more on another seed and "
            "split, the best mean of its trainings picked",
    "race-observed": f"the same race among the top {RACE_SIZE} by observed value",
}


def optuna_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("optuna") is not None


def base_strategy(strategy: str) -> str:
    """The strategy without its WIDEN suffix and options."""
    return strategy.split("+", 1)[0]


def widen_options(strategy: str) -> frozenset[str] | None:
    """The WIDEN_OPTIONS of a strategy that widens (empty: the study's rule); None for one that does not."""
    suffix = strategy[len(base_strategy(strategy)):]
    if not suffix.startswith(WIDEN):
        return None
    return frozenset(suffix[len(WIDEN):].split("-")[1:])


def known_strategy(strategy: str) -> bool:
    """Whether `strategy` is one of STRATEGY_NOTES, or one of the tool's own with WIDEN and known options, each once
    (TPE searches a fixed box)."""
    base, suffix = base_strategy(strategy), strategy[len(base_strategy(strategy)):]
    if base not in STRATEGY_NOTES or not suffix:
        return base in STRATEGY_NOTES
    options = suffix[len(WIDEN):].split("-")
    return (suffix.startswith(WIDEN) and options[0] == "" and set(options[1:]) <= set(WIDEN_OPTIONS)
            and len(set(options[1:])) == len(options[1:]) and base not in ("tpe", "gp-2seeds"))


def strategy_order(strategy: str) -> tuple[int, bool, str]:
    """Where `strategy` comes in the tables: as its base strategy, just after it when it widens (the study's rule
    first)."""
    return list(STRATEGY_NOTES).index(base_strategy(strategy)), WIDEN in strategy, strategy


def trial_cost(strategy: str) -> float:
    """The trainings one trial of `strategy` costs."""
    return TRIAL_COSTS.get(base_strategy(strategy), 1.0)


def picks_of(strategy: str) -> tuple[str, ...]:
    """The pick rules that apply to `strategy`'s searches: a model's where the study's GP judges it (MODEL_PICKS), a
    race where a trial is one training or less."""
    if base_strategy(strategy) not in MODEL_PICKS:
        return ("observed",)
    return tuple(pick for pick in PICKS if not pick.startswith("race") or trial_cost(strategy) <= 1)


def strategies(with_tpe: bool | None = None) -> tuple[str, ...]:
    """The strategies benchmarked by default: all but ON_REQUEST, TPE only when Optuna is installed."""
    tpe = optuna_available() if with_tpe is None else with_tpe
    return tuple(name for name in STRATEGY_NOTES if (name != "tpe" or tpe) and name not in ON_REQUEST)


@dataclass
class SearchRun:
    """One strategy from one search seed on one problem: what it tried and what each pick rule would recommend."""

    problem: str
    strategy: str
    seed: int
    trial_cost: float  # trainings per trial: 2 with two seeds per trial, 0.5 at half the epochs
    initial: int = 0  # trainings proposed before the model (Sobol's)
    observed: list[float | None] = field(default_factory=list)  # per proposal (a mean over its seeds)
    truths: list[float] = field(default_factory=list)  # per proposal
    parameters: list[dict[str, Any]] = field(default_factory=list)  # per proposal
    on_edge: list[bool] = field(default_factory=list)  # per proposal after the initial ones, in the box searched then
    widened: list[tuple[int, str, str]] = field(default_factory=list)  # (after trial, parameter, side) per widening
    proposal_seconds: list[float] = field(default_factory=list)
    # trainings -> (index, posterior mean, posterior SD) of every completed trial, the study's GP fitted on them
    fits: dict[float, list[tuple[int, float, float]]] = field(default_factory=dict)
    picks: dict[str, dict[int, int]] = field(default_factory=dict)  # pick rule -> trainings -> the picked trial

    def model_seconds(self) -> list[float]:
        """The time of each proposal after the initial ones: the model's (a GP's fit and acquisition)."""
        return [s for count, s in enumerate(self.proposal_seconds, 1) if count * self.trial_cost > self.initial]

    def trials_within(self, trainings: float) -> int:
        """How many of the run's trials its first `trainings` trainings paid for."""
        return int(trainings / self.trial_cost + 1e-9)

    def observed_pick(self, trainings: float) -> int | None:
        """Index of the best observed configuration among the first `trainings` trainings (the earlier on ties)."""
        tried = [(value, -i) for i, value in enumerate(self.observed[:self.trials_within(trainings)])
                 if value is not None]
        return -max(tried)[1] if tried else None

    def true_value(self, trainings: int, pick: str = "observed") -> float:
        """The true value of the configuration `pick` recommends after `trainings` trainings (NaN: none yet)."""
        index = self.observed_pick(trainings) if pick == "observed" else self.picks.get(pick, {}).get(trainings)
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
        self.problem, self.widens = problem, widen_options(strategy)
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
        return self.widen() if self.widens is not None else []

    def widen(self) -> list[Widening]:
        """As a study does after every recorded trial: each soft end of a range the best observed trial (with
        "model": the model's pick) sits on, widened at once (bounds.widenings; "x2": by 2; "safe": not at an end a
        failed trial sits on), and Ax's search space with it."""
        from pipeline.search.ax import experiment, widen_search_space
        from pipeline.search.bounds import searched_ranges, widenings

        if not self.observed:
            return []
        options = self.widens or frozenset()
        best = max(self.observed, key=lambda index: (self.observed[index], -index))  # the earlier of equals
        if "model" in options:
            fitted = self.fit()
            if fitted:
                best = max(fitted, key=lambda row: (row[1], -row[0]))[0]
        failed = [p for index, p in self.parameters.items() if index not in self.observed] if "safe" in options else []
        moved = widenings(self.search, self.problem.declared, self.parameters[best], best, len(self.parameters),
                          2.0 if "x2" in options else WIDEN_FACTOR, failed)
        if moved:
            self.search = searched_ranges(self.search, moved)
            widen_search_space(experiment(self.client), {w.parameter: w.after for w in moved})
        return moved

    def fit(self) -> list[tuple[int, float, float]]:
        """The study's GP (surrogate.fit_gp) fitted on the completed trials: (Ax's index, posterior mean, SD) of each;
        empty when it cannot be fitted. Torch's random state is left as it was, so fitting never changes what the
        search proposes next."""
        import torch

        from pipeline.search.ax import experiment
        from pipeline.search.surrogate import fit_gp

        with torch.random.fork_rng():
            tried_so_far = experiment(self.client)
            model = fit_gp(tried_so_far, tried_so_far.lookup_data(), "value")
            if model is None:
                return []
            tried = model.completed_trials()
            means, sds = model.predict([parameters for _, parameters in tried])
        return [(index, float(mean), float(sd)) for (index, _), mean, sd in zip(tried, means, sds)]


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

    def fit(self) -> list[tuple[int, float, float]]:
        return []


def _optuna_distribution(optuna: Any, space: Any, kind: str) -> Any:
    from pipeline.params import Choice

    if isinstance(space, Choice):
        return optuna.distributions.CategoricalDistribution(list(space.values))
    if kind == "int":
        return optuna.distributions.IntDistribution(int(space.low), int(space.high), log=space.log)
    return optuna.distributions.FloatDistribution(space.low, space.high, log=space.log)


def run_search(problem: Problem, strategy: str, seed: int, trainings: int, initial: int,
               checkpoints: tuple[int, ...], split: SplitTerm | None = None) -> SearchRun:
    """`strategy` from search seed `seed` on `problem` for `trainings` trainings, with every pick rule that applies
    (`picks_of`) taken at each of `checkpoints` (in trainings). With `split`, the search runs on a base split of its
    own: a draw of the split term added to every observation (a race's extra trainings run on other splits)."""
    cost = trial_cost(strategy)
    observe = problem.observe_half if base_strategy(strategy) == "gp-lowfi" else problem.observe
    if observe is None:
        raise ValueError(f"{strategy} needs a problem with epochs; {problem.name} has none")
    searcher = (TpeSearch if strategy == "tpe" else AxSearch)(problem, strategy, seed, max(1, int(initial / cost)))
    stream = sum(map(ord, problem.name))
    noise = np.random.default_rng([seed, stream])
    view = split.draw(problem, np.random.default_rng([seed, stream, 1])) if split else None
    run = SearchRun(problem.name, strategy, seed, cost, initial)
    picks = picks_of(strategy)
    fit_at = set(checkpoints) | {k - race_cost() for k in checkpoints if "race" in picks}
    for count in range(1, run.trials_within(trainings) + 1):
        tick = time.perf_counter()
        parameters = searcher.ask()
        run.proposal_seconds.append(time.perf_counter() - tick)
        spent = count * cost
        if spent > initial:  # the same slice of every strategy: random search's gives the base rate
            run.on_edge.append(problem.on_edge(parameters, search=getattr(searcher, "search", None)))
        values = [_seen(observe(parameters, noise), view, parameters) for _ in range(int(max(cost, 1)))]
        run.widened += [(count, w.parameter, w.side) for w in searcher.tell(values)]
        done = [v for v in values if v is not None]
        run.observed.append(float(np.mean(done)) if done else None)
        run.truths.append(problem.truth(parameters))
        run.parameters.append(dict(parameters))
        if len(picks) > 1 and spent in fit_at:
            run.fits[spent] = searcher.fit()
    for k in checkpoints:
        _take_picks(run, problem, picks, k, split, stream)
    return run


def _seen(value: float | None, view: Callable[[dict[str, Any]], float] | None, parameters: dict[str, Any]
          ) -> float | None:
    """An observation as the search's split shows it (`view`: its split term; None: no split term)."""
    if value is None or view is None:
        return value
    return float(np.clip(value + view(parameters), 0.0, 1.0))


def _take_picks(run: SearchRun, problem: Problem, picks: tuple[str, ...], k: int, split: SplitTerm | None,
                stream: int) -> None:
    """Each pick rule's choice after `k` trainings into `run.picks` (none where the GP could not be fitted). A race
    trains its contenders again: contender c's extra training j draws its seed noise from its own stream and its
    split from pair j's (the same for every contender, as a campaign's pairs are), both apart from the search's."""
    fitted = run.fits.get(k) or []
    if fitted and "model" in picks:
        run.picks.setdefault("model", {})[k] = max(fitted, key=lambda row: (row[1], -row[0]))[0]
    if fitted and "lower" in picks:
        run.picks.setdefault("lower", {})[k] = max(fitted, key=lambda row: (row[1] - LOWER_Z * row[2], -row[0]))[0]
    searched = k - race_cost()
    if searched < 1:
        return
    within = run.trials_within(searched)
    full = run.trial_cost >= 1  # a trial at half the epochs is not one of the race's trainings
    pair_views = [split.draw(problem, np.random.default_rng([run.seed, stream, 3, k, j])) if split else None
                  for j in range(RACE_TRAININGS)]

    def race(scores: dict[int, float]) -> int:
        trainings = {}
        for index in contenders(scores):
            parameters = run.parameters[index]
            extra = [_seen(problem.observe(parameters, np.random.default_rng([run.seed, stream, 2, k, index, j])),
                           pair_views[j], parameters) for j in range(RACE_TRAININGS)]
            trainings[index] = ([run.observed[index]] if full else []) + extra
        return race_winner(trainings)

    before = run.fits.get(searched) or []
    if before and "race" in picks:
        run.picks.setdefault("race", {})[k] = race({index: mean for index, mean, _ in before})
    observed = {i: v for i, v in enumerate(run.observed[:within]) if v is not None}
    if observed and "race-observed" in picks:
        run.picks.setdefault("race-observed", {})[k] = race(observed)


@dataclass(frozen=True)
class Summary:
    """One problem, strategy and pick rule over every search seed: the recommendations' true values at each
    checkpoint, their quartiles and SD (the search's luck)."""

    problem: str
    strategy: str
    pick: str  # a PICKS rule
    seeds: int
    quartiles: dict[int, tuple[float, float, float]]  # trainings -> (25%, median, 75%) of the true value
    beats_random: float | None  # share of seeds whose recommendation at the last checkpoint beats random's
    edge_share: float | None  # share of proposals after the initial ones with a range parameter on a bound
    proposal_ms: float  # median time of one proposal
    model_seconds: float  # median time of one proposal after the initial ones (a GP's: fit and acquisition)
    best: float  # the problem's best true value
    widened: float | None = None  # with WIDEN: share of seeds whose search widened a range
    sds: dict[int, float] = field(default_factory=dict)  # trainings -> SD of the true value over seeds (ddof 1)
    values: dict[int, list[float]] = field(default_factory=dict)  # trainings -> each seed's true value, seed order

    def iqr(self, k: int) -> float:
        """The interquartile range of the true value after `k` trainings."""
        low, _, high = self.quartiles[k]
        return high - low

    def record(self) -> dict[str, Any]:
        """The summary as JSON-ready data: per checkpoint the median, quartiles, IQR, SD and every seed's value."""
        def number(value: float | None) -> float | None:
            return None if value is None or value != value else round(value, 6)

        return {"problem": self.problem, "strategy": self.strategy, "pick": self.pick, "seeds": self.seeds,
                "best": number(self.best),
                "trainings": {str(k): {"median": number(q[1]), "q25": number(q[0]), "q75": number(q[2]),
                                       "iqr": number(self.iqr(k)), "sd": number(self.sds.get(k)),
                                       "values": [number(v) for v in self.values.get(k, [])]}
                              for k, q in self.quartiles.items()},
                "beats_random": number(self.beats_random), "on_bound": number(self.edge_share),
                "widened": number(self.widened), "proposal_ms": number(self.proposal_ms),
                "model_seconds": number(self.model_seconds)}


def spread(values: np.ndarray) -> tuple[tuple[float, float, float], float]:
    """The quartiles (25%, median, 75%) and SD (ddof 1) of `values` without their NaNs (NaN where too few)."""
    values = values[~np.isnan(values)]
    quartiles = tuple(float(q) for q in np.percentile(values, [25, 50, 75])) if len(values) else (math.nan,) * 3
    return (quartiles[0], quartiles[1], quartiles[2]), float(np.std(values, ddof=1)) if len(values) > 1 else math.nan


def summarise(runs: list[SearchRun], checkpoints: tuple[int, ...], best: dict[str, float]) -> list[Summary]:
    """The true value of each strategy's recommendation by each pick rule, per problem: its quartiles and SD over
    search seeds, and against random search."""
    summaries = []
    keys = sorted({(r.problem, r.strategy) for r in runs}, key=lambda k: (k[0], strategy_order(k[1])))
    for problem, strategy in keys:
        mine = sorted((r for r in runs if (r.problem, r.strategy) == (problem, strategy)), key=lambda r: r.seed)
        random = {r.seed: r for r in runs if (r.problem, r.strategy) == (problem, "random")}
        for pick in picks_of(strategy):
            quartiles, sds, values = {}, {}, {}
            for k in checkpoints:
                values[k] = [r.true_value(k, pick) for r in mine]
                quartiles[k], sds[k] = spread(np.array(values[k]))
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
                                     float(np.mean([bool(r.widened) for r in mine])) if WIDEN in strategy else None,
                                     sds, values))
    return summaries


@functools.lru_cache(maxsize=4)
def _problem(name: str) -> Problem:
    """A problem built once per process (the replay fits its surrogate when built)."""
    return problems((name,))[0]


def _run_job(job: tuple[str, str, int, int, int, tuple[int, ...], str, SplitTerm | None]) -> SearchRun:
    """One search run in a worker process, its libraries' output routed to the log first."""
    from pipeline.library_logs import quiet_libraries

    name, strategy, seed, trainings, initial, checkpoints, log_file, split = job
    quiet_libraries(log_file)
    return run_search(_problem(name), strategy, seed, trainings, initial, checkpoints, split)


CAMPAIGN_TRAININGS = 8  # a campaign's budget per method (studies/digits-campaign.toml): a checkpoint of every run


def checkpoints_for(trainings: int) -> tuple[int, ...]:
    """The trainings after which every pick is taken: 5, a campaign's 8, then every 5 or 10 up to `trainings`."""
    return tuple(k for k in (5, CAMPAIGN_TRAININGS, 10, 15, 20, 30, 40, 50) if k < trainings) + (trainings,)


def runnable(problem: Problem, strategy: str) -> bool:
    """Whether `strategy` can search `problem` (half the epochs needs a problem with epochs)."""
    return base_strategy(strategy) != "gp-lowfi" or problem.observe_half is not None


def search_benchmark(problem_names: tuple[str, ...], strategy_names: tuple[str, ...], seeds: int, trainings: int,
                     initial: int, processes: int = 1, log_file: str = "runs/robust-tune.log",
                     report: Callable[[str], None] = lambda message: None, split: SplitTerm | None = None
                     ) -> tuple[list[SearchRun], list[Summary], tuple[int, ...]]:
    """Every strategy from search seeds 0 .. seeds-1 on every problem it can search at `trainings` trainings (each
    search on a base split of its own with `split`), the runs spread over `processes` processes (one thread each; a
    run's result does not depend on where it ran). The strategies take turns seed by seed, so that a machine busier
    at one time than another slows them alike."""
    checkpoints = checkpoints_for(trainings)
    jobs = [(name, strategy, seed, trainings, initial, checkpoints, log_file, split) for name in problem_names
            for seed in range(seeds) for strategy in strategy_names if runnable(_problem(name), strategy)]
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
