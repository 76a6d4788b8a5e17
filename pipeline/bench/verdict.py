"""Is the verdict calibrated? (`robust-tune bench verdict`) Whole campaigns of the decision procedure
(pipeline/compare/decision.py: the rounds, their planning and stopping, the family, equivalence, replicates) simulated
under a generative model of the confirmation runs whose truth is known, and what the verdicts got right: the wrong
words, the power, the coverage of every interval the verdict prints and the pairs it spent.

One run of method m on pair s of search replicate r, on one metric, in fractions of one (0.01 is a point):

    p     = level + truth[m] + split[r, s] + interaction[m, r, s] + seed[m, r, s] + luck[m, r], clipped to [0, 1]
    value = Binomial(test_images, p) / test_images   (p itself where the metric has no test images)

Every term but the truth is normal with the metric's standard deviation (MetricModel says what each is). A run's
terms are correlated across its metrics: each is sqrt(c) times a draw the metrics share plus sqrt(1 - c) times the
metric's own (c the model's correlation); the binomial noise is each metric's own. A scenario gives every compared
method the same true difference, a multiple of each metric's smallest effect (TRUTHS); the campaign's values of all
max_seeds pairs go to decide(), which uses only what the campaign would have trained.

Torch-free: numpy draws, decide() decides (20-50 ms a campaign, most of a simulation's time).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pipeline.compare.decision import Decisions, Design, Outcome, Values, decide
from pipeline.compare.verdict import accuracy_bounds, campaign_runs, method_mean, run_values
from pipeline.errors import UserError
from pipeline.report.tables import Table

POINT = 0.01
METRIC_LABELS = {"test_accuracy": "test acc", "test_balanced_accuracy": "balanced",
                 "smallest_class_accuracy": "rare class"}  # the verdict's labels for the metrics simulated
SHORT_NAMES = {"accuracy": "test_accuracy", "balanced": "test_balanced_accuracy", "rare": "smallest_class_accuracy"}
REFERENCE = "erm"
TRUTHS = (0.0, 0.5, 1.0, 2.0)  # the scenarios: every compared method's true difference, in smallest effects
PRINTED = 0.0005  # the verdict prints to 0.1 point: an interval's end within half of that holds a truth
TRUTH_DRAWS = 400_000  # pairs drawn to compute a P(method > ERM) the model implies
COVERAGES = {  # the intervals the verdict prints, by their label here
    "primary": "difference (cell)",  # a primary cell's simultaneous interval
    "family": "difference (family)",  # every primary cell's at once
    "secondary": "secondary 95%",  # a secondary metric's difference
    "improvement": "P>ERM 95%",  # Clopper-Pearson's, primary and secondary cells
    "mean": "mean ± 95%",  # each method's mean accuracy, a t interval over its runs
}


@dataclass(frozen=True)
class MetricModel:
    """One metric's generative model, every figure a fraction of one (0.01 is a point)."""

    key: str  # the metric as the store and decide() name it (METRIC_LABELS)
    level: float  # ERM's expected accuracy on a pair before the noise, the level the binomial noise is drawn at
    test_images: int  # the test images the metric's binomial noise rests on; 0: no binomial noise
    split_sd: float  # the pair's split: shared by every method of the pair, it cancels in a paired difference
    seed_sd: float  # the training seed: each run's own run-to-run noise
    interaction_sd: tuple[float, ...]  # per compared method: its difference to ERM varies with the split
    search_sd: float  # a search's luck: one shift per (method, replicate), shared by all pairs of that search
    smallest: float  # the smallest effect that matters; the scenarios' true differences are multiples of it


@dataclass(frozen=True)
class Model:
    """A campaign's design and the generative model of its confirmation values."""

    methods: tuple[str, ...]  # ERM first
    metrics: tuple[MetricModel, ...]
    primary: tuple[str, ...]  # the metrics decided on; the others are secondary (95% intervals, no word)
    replicates: int = 1
    seeds: int = 5
    seeds_per_round: int = 5
    max_seeds: int = 30
    correlation: float = 0.5  # of a run's normal terms across its metrics
    alpha: float = 0.05

    def design(self) -> Design:
        """The decision procedure's design for this campaign."""
        return Design(self.primary, {m.key: m.smallest for m in self.metrics if m.key in self.primary}, self.seeds,
                      self.seeds_per_round, self.max_seeds, self.alpha)

    def metric(self, key: str) -> MetricModel:
        """The model of metric `key`."""
        return next(m for m in self.metrics if m.key == key)


def default_model(methods: int = 4) -> Model:
    """The digits campaign's set-up (studies/digits-campaign.toml: 37 test images of the rare digit, about 400 in
    all; tuned ERM near 95% balanced and 50% on the rare digit, which moves 5-15 points with the split)."""
    def metric(key: str, level: float, images: int, split: float, seed: float, interaction: float,
               smallest: float) -> MetricModel:
        return MetricModel(key, level * POINT, images, split * POINT, seed * POINT, (interaction * POINT,) * methods,
                           0.0, smallest * POINT)

    return Model((REFERENCE, *[f"m{i}" for i in range(1, methods + 1)]),
                 (metric("test_accuracy", 95, 396, 1.0, 0.7, 0.5, 1),
                  metric("test_balanced_accuracy", 95, 396, 1.0, 0.7, 0.5, 1),
                  metric("smallest_class_accuracy", 50, 37, 8, 4, 3, 5)),
                 ("test_balanced_accuracy", "smallest_class_accuracy"))


# --- one campaign's values ---------------------------------------------------------------------------------------

def _mixed(rng: np.random.Generator, shape: tuple[int, ...], metrics: int, correlation: float) -> np.ndarray:
    """Standard normal draws of `shape` for each metric, correlated `correlation` across the metrics."""
    shared = rng.standard_normal(shape)
    own = rng.standard_normal((metrics, *shape))
    return math.sqrt(correlation) * shared + math.sqrt(1 - correlation) * own


def true_levels(model: Model, truth: float) -> np.ndarray:
    """p before the noise, (metric, method): the level plus each compared method's true difference."""
    return np.array([[m.level] + [m.level + truth * m.smallest] * (len(model.methods) - 1) for m in model.metrics])


def draw_accuracies(model: Model, truth: float, rng: np.random.Generator) -> np.ndarray:
    """One campaign's values, (metric, method, replicate, pair), every pair up to max_seeds."""
    k, methods, r, s = len(model.metrics), len(model.methods), model.replicates, model.max_seeds
    c = model.correlation
    split, interaction = _mixed(rng, (r, s, 1), k, c), _mixed(rng, (r, s, methods), k, c)
    seed, luck = _mixed(rng, (r, s, methods), k, c), _mixed(rng, (r, 1, methods), k, c)
    levels = true_levels(model, truth)
    values = np.empty((k, methods, r, s))
    for i, m in enumerate(model.metrics):
        interaction_sd = np.array([0.0, *m.interaction_sd])
        p = (levels[i] + m.split_sd * split[i] + interaction_sd * interaction[i] + m.seed_sd * seed[i]
             + m.search_sd * luck[i])  # (replicate, pair, method)
        p = np.clip(p, 0.0, 1.0)
        drawn = rng.binomial(m.test_images, p) / m.test_images if m.test_images > 0 else p
        values[i] = np.moveaxis(drawn, 2, 0)
    return values


def as_values(model: Model, drawn: np.ndarray) -> dict[str, dict[str, dict[tuple[int, int], float]]]:
    """The drawn values as decide() reads them: method -> metric -> (replicate, pair) -> value."""
    keys = [(r, s) for r in range(model.replicates) for s in range(model.max_seeds)]
    return {method: {m.key: dict(zip(keys, drawn[i, j].ravel().tolist())) for i, m in enumerate(model.metrics)}
            for j, method in enumerate(model.methods)}


# --- the truth a verdict's intervals should contain --------------------------------------------------------------

def expected_clipped(mean: float, sd: float) -> float:
    """E[clip(X, 0, 1)] for X normal (mean, sd): a run's expected accuracy (the binomial noise keeps it)."""
    if sd == 0:
        return min(1.0, max(0.0, mean))
    from scipy.special import ndtr

    def above(a: float) -> float:  # E[max(X - a, 0)]
        z = (mean - a) / sd
        return (mean - a) * float(ndtr(z)) + sd * math.exp(-z * z / 2) / math.sqrt(2 * math.pi)

    return above(0.0) - above(1.0)


def run_sd(m: MetricModel, method: int) -> float:
    """The standard deviation of a run's p before clipping, over splits, seeds and searches (method 0: ERM)."""
    interaction = m.interaction_sd[method - 1] if method else 0.0
    return math.sqrt(m.split_sd ** 2 + interaction ** 2 + m.seed_sd ** 2 + m.search_sd ** 2)


def probability_of_improvement(m: MetricModel, method: int, truth: float, rng: np.random.Generator,
                               draws: int = TRUTH_DRAWS) -> float:
    """The model's P(method beats ERM on a pair), ties counted half, by drawing `draws` pairs (their own splits,
    seeds and searches): what the verdict's P>ERM estimates."""
    split = m.split_sd * rng.standard_normal(draws)

    def accuracy(level: float, interaction: float) -> np.ndarray:
        p = (level + split + interaction * rng.standard_normal(draws) + m.seed_sd * rng.standard_normal(draws)
             + m.search_sd * rng.standard_normal(draws))
        p = np.clip(p, 0.0, 1.0)
        return rng.binomial(m.test_images, p) / m.test_images if m.test_images > 0 else p

    mine, erm = accuracy(m.level + truth * m.smallest, m.interaction_sd[method - 1]), accuracy(m.level, 0.0)
    return float(np.mean(mine > erm) + 0.5 * np.mean(mine == erm))


@dataclass(frozen=True)
class Truth:
    """What a scenario's verdicts should find: per (method, metric), the expected accuracy, the difference to ERM
    and P(method > ERM)."""

    multiple: float  # every compared method's true difference, in smallest effects
    accuracy: dict[tuple[str, str], float]
    difference: dict[tuple[str, str], float]
    improvement: dict[tuple[str, str], float]


def scenario_truth(model: Model, multiple: float, seed: int, draws: int = TRUTH_DRAWS) -> Truth:
    """The truths of the scenario where every compared method differs from ERM by `multiple` smallest effects."""
    accuracy, difference, improvement = {}, {}, {}
    cache: dict[tuple[str, float], float] = {}
    for i, m in enumerate(model.metrics):
        erm = expected_clipped(m.level, run_sd(m, 0))
        accuracy[(model.methods[0], m.key)] = erm
        for j, method in enumerate(model.methods[1:], start=1):
            mine = expected_clipped(m.level + multiple * m.smallest, run_sd(m, j))
            accuracy[(method, m.key)] = mine
            difference[(method, m.key)] = mine - erm
            same = (m.key, m.interaction_sd[j - 1])  # methods alike in the model share one truth
            if same not in cache:
                rng = np.random.default_rng([seed, 7919, i, j, int(round(1000 * multiple))])
                cache[same] = probability_of_improvement(m, j, multiple, rng, draws)
            improvement[(method, m.key)] = cache[same]
    return Truth(multiple, accuracy, difference, improvement)


# --- one campaign's verdict, scored ------------------------------------------------------------------------------

def word_truth(truth: Truth, key: tuple[str, str], smallest: float) -> float:
    """The true difference a cell's word is judged against: the expected difference in accuracy, which clipping at
    0 or 100% moves off the model's shift (far below it near the ceiling); the shift itself where the two agree to
    the printed precision (a method's extra spread moves a clipped mean by a hair: no difference at a shift of 0,
    exactly the smallest effect at a shift of one)."""
    shift, expected = truth.multiple * smallest, truth.difference[key]
    return shift if abs(expected - shift) <= PRINTED else expected


def wrong(outcome: Outcome | None, truth: float, smallest: float) -> bool:
    """Whether a word is wrong for a true difference `truth`: better where it is not above 0, worse where it is
    not below, equivalent where it is not inside (-smallest, +smallest)."""
    if outcome is Outcome.BETTER:
        return truth <= 0
    if outcome is Outcome.WORSE:
        return truth >= 0
    if outcome is Outcome.EQUIVALENT:
        return abs(truth) >= smallest
    return False


def _covers(low: float | None, high: float | None, truth: float) -> bool | None:
    """Whether [low, high] holds the truth to the precision the verdict prints (PRINTED); None where it prints no
    interval."""
    if low is None or high is None:
        return None
    return low - PRINTED <= truth <= high + PRINTED


@dataclass(frozen=True)
class Scored:
    """One simulated campaign: each primary cell's word, and for each interval kind whether each printed interval
    held its truth (None: none printed)."""

    words: dict[tuple[str, str], Outcome]
    covers: dict[str, list[bool | None]]
    pairs: dict[str, int]


def score(model: Model, decisions: Decisions, values: Values, truth: Truth) -> Scored:
    """What one campaign's verdict got right against the truth."""
    covers: dict[str, list[bool | None]] = {kind: [] for kind in COVERAGES}
    words = {}
    for key, cell in decisions.cells.items():
        words[key] = cell.outcome or Outcome.UNDECIDED
        covers["primary"].append(_covers(cell.low, cell.high, truth.difference[key]))
    shown = [c for c in covers["primary"] if c is not None]
    covers["family"].append(all(shown) if shown else None)
    for key, cell in decisions.secondary.items():
        covers["secondary"].append(_covers(cell.low, cell.high, truth.difference[key]))
    for key, cell in [*decisions.cells.items(), *decisions.secondary.items()]:
        if cell.improvement is not None:
            covers["improvement"].append(_covers(cell.improvement.low, cell.improvement.high, truth.improvement[key]))
    for method in model.methods:
        keys = [(r, s) for r in range(model.replicates) for s in range(decisions.pairs.get(method, 0))]
        for m in model.metrics:
            runs = {k: values[method][m.key][k] for k in keys}
            if len(runs) >= 2:
                bounds = accuracy_bounds(*method_mean(runs, model.replicates))  # the interval the verdict prints
                low, high = (None, None) if bounds is None else bounds
                covers["mean"].append(_covers(low, high, truth.accuracy[(method, m.key)]))
    return Scored(words, covers, dict(decisions.pairs))


def simulate_campaign(model: Model, truth: Truth, seed: int, index: int) -> Scored:
    """Campaign `index` of the scenario: drawn from its own generator (the same whatever process runs it),
    decided, scored."""
    rng = np.random.default_rng([seed, int(round(1000 * truth.multiple)), index])
    values = as_values(model, draw_accuracies(model, truth.multiple, rng))
    names = [m.key for m in model.metrics]
    return score(model, decide(values, model.methods, model.design(), model.replicates, secondary=names), values,
                 truth)


# --- many campaigns, summarised ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rate:
    """A share (or a mean) over the simulated campaigns with its Monte Carlo standard error; `units` counted."""

    value: float
    se: float
    units: int


def ratio(numerators: Sequence[float], denominators: Sequence[float]) -> Rate:
    """sum(numerators) / sum(denominators) over campaigns, its standard error by the campaigns as clusters (the
    cells of one campaign share its draws): the ratio estimator's linearisation."""
    x, n = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    total, campaigns = n.sum(), len(n)
    if total == 0:
        return Rate(math.nan, math.nan, 0)
    value = float(x.sum() / total)
    if campaigns < 2:
        return Rate(value, math.nan, int(total))
    residual = x - value * n
    se = math.sqrt(float(np.sum(residual ** 2)) * campaigns / (campaigns - 1)) / total
    return Rate(value, se, int(total))


def share(flags: Sequence[bool]) -> Rate:
    """The share of campaigns where `flags` holds."""
    return ratio([float(f) for f in flags], [1.0] * len(flags))


@dataclass(frozen=True)
class Scenario:
    """The verdicts of many simulated campaigns at one true difference."""

    multiple: float
    campaigns: int
    any_wrong: Rate  # campaigns with any wrong word: the family-wise false-positive rate at a true difference of 0
    wrong_cells: Rate  # cells with a wrong word
    false_equivalent: Rate  # campaigns with a wrong `equivalent` (at a true difference of a smallest effect or more)
    correct: dict[tuple[str, str], Rate]  # per cell: decided, and rightly
    words: dict[tuple[str, str], dict[str, float]]  # per cell: the share of each word
    coverage: dict[str, Rate]  # per interval kind (COVERAGES)
    missing: dict[str, int]  # per interval kind: intervals the verdict could not give (too few units)
    pairs: dict[str, Rate]  # per method: the mean pairs per replicate it was compared on


def summarise(model: Model, truth: Truth, scored: list[Scored]) -> Scenario:
    """One scenario's rates over its campaigns."""
    multiple, smallest = truth.multiple, {m.key: m.smallest for m in model.metrics}

    def bad(key: tuple[str, str], outcome: Outcome) -> bool:
        return wrong(outcome, word_truth(truth, key, smallest[key[1]]), smallest[key[1]])

    cells = list(scored[0].words) if scored else []
    correct, words = {}, {}
    for key in cells:
        got = [s.words.get(key, Outcome.UNDECIDED) for s in scored]
        correct[key] = share([o is not Outcome.UNDECIDED and not bad(key, o) for o in got])
        words[key] = {o.value: sum(g is o for g in got) / len(got) for o in Outcome}
    coverage, missing = {}, {}
    for kind in COVERAGES:
        coverage[kind] = ratio([sum(c is True for c in s.covers[kind]) for s in scored],
                               [sum(c is not None for c in s.covers[kind]) for s in scored])
        missing[kind] = sum(c is None for s in scored for c in s.covers[kind])
    return Scenario(
        multiple, len(scored),
        any_wrong=share([any(bad(k, o) for k, o in s.words.items()) for s in scored]),
        wrong_cells=ratio([sum(bad(k, o) for k, o in s.words.items()) for s in scored],
                          [len(s.words) for s in scored]),
        false_equivalent=share([any(o is Outcome.EQUIVALENT and bad(k, o) for k, o in s.words.items())
                                for s in scored]),
        correct=correct, words=words, coverage=coverage, missing=missing,
        pairs={method: ratio([s.pairs.get(method, 0) for s in scored], [1.0] * len(scored))
               for method in model.methods})


def _job(arguments: tuple[Model, Truth, int, range]) -> list[Scored]:
    """A batch of one scenario's campaigns (one process's share)."""
    model, truth, seed, indices = arguments
    return [simulate_campaign(model, truth, seed, i) for i in indices]


@dataclass(frozen=True)
class Simulation:
    """bench verdict's answer: the model simulated and each scenario's verdicts."""

    model: Model
    campaigns: int
    seed: int
    scenarios: list[Scenario]
    seconds_per_campaign: float


def simulate(model: Model, campaigns: int, seed: int = 0, truths: Sequence[float] = TRUTHS, processes: int = 1,
             report: Callable[[str], None] = lambda message: None, truth_draws: int = TRUTH_DRAWS) -> Simulation:
    """`campaigns` campaigns of each scenario in `truths` (true differences in smallest effects), here or spread
    over `processes` processes; the numbers do not depend on where a campaign ran."""
    import time

    started, scenarios = time.perf_counter(), []
    for multiple in truths:
        truth = scenario_truth(model, multiple, seed, truth_draws)
        step = max(1, math.ceil(campaigns / max(1, 4 * processes)))
        batches = [(model, truth, seed, range(i, min(campaigns, i + step))) for i in range(0, campaigns, step)]
        scored: list[Scored] = []
        for done in _run(batches, processes):
            scored += done
            report(f"true difference {multiple:g}x the smallest effect: {len(scored)}/{campaigns} campaigns")
        scenarios.append(summarise(model, truth, scored))
    seconds = (time.perf_counter() - started) / max(1, campaigns * len(truths))
    return Simulation(model, campaigns, seed, scenarios, seconds)


def _run(batches: list[Any], processes: int) -> Any:
    """Each batch's campaigns, in order: here, or on `processes` spawned processes."""
    if processes <= 1:
        for batch in batches:
            yield _job(batch)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield from pool.map(_job, batches)


# --- the figures of a stored campaign ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Estimate:
    """The figures read off a stored campaign's confirmation runs, and what they could not tell apart."""

    methods: tuple[str, ...]  # ERM first, then the methods with pairs enough to estimate from
    metrics: tuple[MetricModel, ...]
    correlation: float
    pairs: int  # ERM's pairs per replicate
    notes: tuple[str, ...] = field(default_factory=tuple)


def _pooled_variance(by_replicate: list[list[float]]) -> float:
    """The variance within replicates, pooled (the searches' luck is constant within one)."""
    return statistics.fmean([statistics.variance(rep) for rep in by_replicate])


def _pooled_covariance(a: list[list[float]], b: list[list[float]]) -> float:
    """The covariance within replicates of two paired series, pooled."""
    return statistics.fmean([statistics.covariance(x, y) for x, y in zip(a, b)])


Keys = list[list[tuple[int, int]]]  # per search replicate, the (replicate, pair) keys a figure rests on


def estimate(values: Values, methods: Sequence[str], replicates: int, test_images: Mapping[str, int],
             smallest: Mapping[str, float]) -> Estimate:
    """Each metric's variance components from a campaign's runs (method -> metric -> (replicate, pair) -> value):
    the split (the variance across pairs of the mean over methods, less what the runs' own noise leaves in that
    mean), the within-pair spread of each method's difference to ERM less the binomial noise (seed and
    method-by-split together), the searches' luck (replicates >= 2) and the correlation of the differences across
    metrics; `test_images`: per metric, the images its binomial noise rests on. A method's difference rests on
    the pairs it shares with ERM, the split on those every method has."""
    reference = methods[0]
    compared = [m for m in methods[1:] if _pairs(_common_keys(values, [reference, m], replicates)) >= 2]
    if not compared:
        raise UserError("the campaign has no method besides ERM with 2 or more pairs in each search replicate: "
                        "the spread of a difference needs 2")
    shared = {m: _common_keys(values, [reference, m], replicates) for m in compared}
    everyone = _common_keys(values, [reference, *compared], replicates)
    metrics, remainders = [], {}
    for key in METRIC_LABELS:
        fitted, remainders[key] = _metric_estimate(values, reference, shared, everyone, key, test_images.get(key, 0),
                                                   smallest.get(key, POINT), replicates)
        metrics.append(fitted)
    notes = ["seed and method-by-split come together: each pair is its own split and seed, so a difference's "
             "spread cannot tell them apart; the least spread method's is taken as seed noise (half on each "
             "side of a difference), the rest of each method's as its method-by-split"]
    if replicates < 2:
        notes.append("search luck 0: one search per method cannot measure it (replicates = 2 or more would)")
    if not any(test_images.values()):
        notes.append("no binomial noise: the runs store no test image counts (runs before 0.7.0), so it is "
                     "inside the seed noise")
    if len(compared) < len(methods) - 1:
        notes.append("left out, too few pairs: " + ", ".join(m for m in methods[1:] if m not in compared))
    model_methods = (reference, *compared)
    correlation = _correlation(values, reference, shared, remainders)
    return Estimate(model_methods, tuple(metrics), correlation, _pairs(_common_keys(values, [reference], replicates)),
                    tuple(notes))


def _pairs(keys: Keys) -> int:
    """The pairs per replicate that `keys` holds in every replicate."""
    return min((len(k) for k in keys), default=0)


def _common_keys(values: Values, methods: Sequence[str], replicates: int) -> Keys:
    """Per replicate, the pairs every method of `methods` has on every simulated metric with a number."""
    keys = []
    for r in range(replicates):
        mine: set[tuple[int, int]] | None = None
        for method in methods:
            for key in METRIC_LABELS:
                have = {k for k, v in values.get(method, {}).get(key, {}).items() if k[0] == r and not math.isnan(v)}
                mine = have if mine is None else mine & have
        keys.append(sorted(mine or ()))
    return keys


def _binomial_variance(runs: Sequence[float], images: int) -> float:
    """The mean binomial variance of runs measured on `images` test images (p(1 - p)/(n - 1): unbiased for
    p(1 - p)/n at the run's own p)."""
    if images < 2 or not runs:
        return 0.0
    return statistics.fmean([v * (1 - v) / (images - 1) for v in runs])


def _differences(values: Values, method: str, reference: str, metric: str, keys: Keys) -> list[list[float]]:
    """The method's differences to ERM on `keys`, one list per replicate."""
    return [[values[method][metric][k] - values[reference][metric][k] for k in rep] for rep in keys]


def _runs(values: Values, method: str, metric: str, keys: Keys) -> list[float]:
    """The method's values on `keys`, every replicate's in one list."""
    return [values[method][metric][k] for rep in keys for k in rep]


def _metric_estimate(values: Values, reference: str, shared: Mapping[str, Keys], everyone: Keys, metric: str,
                     images: int, smallest: float, replicates: int) -> tuple[MetricModel, float]:
    """One metric's model from the runs, and the mean spread of a difference less its binomial noise."""
    erm = _runs(values, reference, metric, _common_keys(values, [reference], replicates))
    binomial = {m: _binomial_variance(_runs(values, m, metric, keys), images) for m, keys in shared.items()}
    binomial[reference] = _binomial_variance(erm, images)
    remainder = {m: max(0.0, _pooled_variance(_differences(values, m, reference, metric, keys)) - binomial[m]
                        - binomial[reference]) for m, keys in shared.items()}
    seed = min(remainder.values()) / 2  # a variance
    interaction = {m: math.sqrt(max(0.0, r - 2 * seed)) for m, r in remainder.items()}
    split = 0.0
    if _pairs(everyone) >= 2:
        methods = [reference, *shared]
        means = [[statistics.fmean(values[m][metric][k] for m in methods) for k in rep] for rep in everyone]
        noise = sum(seed + interaction.get(m, 0.0) ** 2 + binomial[m] for m in methods) / len(methods) ** 2
        split = math.sqrt(max(0.0, _pooled_variance(means) - noise))
    luck = 0.0
    if replicates >= 2:
        between = []
        for m, keys in shared.items():
            by_replicate = _differences(values, m, reference, metric, keys)
            between.append(statistics.variance([statistics.fmean(rep) for rep in by_replicate])
                           - _pooled_variance(by_replicate) / _pairs(keys))
        luck = math.sqrt(max(0.0, statistics.fmean(between)) / 2)
    model = MetricModel(metric, statistics.fmean(erm), images, split, math.sqrt(seed), tuple(interaction.values()),
                        luck, smallest)
    return model, statistics.fmean(remainder.values())


def _correlation(values: Values, reference: str, shared: Mapping[str, Keys], remainders: Mapping[str, float]) -> float:
    """The correlation of a method's differences to ERM across the metrics (pooled within replicates, less the
    binomial noise each metric has of its own), averaged over the metric pairs, in [0, 1]."""
    found = []
    metrics = list(METRIC_LABELS)
    for i, a in enumerate(metrics):
        for b in metrics[i + 1:]:
            if remainders[a] <= 0 or remainders[b] <= 0:
                continue
            covariance = statistics.fmean([_pooled_covariance(_differences(values, m, reference, a, keys),
                                                              _differences(values, m, reference, b, keys))
                                           for m, keys in shared.items()])
            found.append(covariance / math.sqrt(remainders[a] * remainders[b]))
    return min(1.0, max(0.0, statistics.fmean(found))) if found else 0.0


def test_images_of(runs: Sequence[Any]) -> dict[str, int]:
    """Per metric, the test images its binomial noise rests on, the median over the runs of their stored counts
    (run.per_class["counts"]["test"]): all of them for the test accuracy, K^2 / sum(1/n_c) for the balanced
    accuracy (the mean of K class accuracies has the variance of one on that many), the smallest training class's
    for the rare class; none where no run stores its counts."""
    found: dict[str, list[int]] = {key: [] for key in METRIC_LABELS}
    for run in runs:
        counts = (run.per_class or {}).get("counts", {}).get("test")
        if not counts:
            continue
        sizes = [n for n in counts.values() if n > 0]
        found["test_accuracy"].append(sum(sizes))
        found["test_balanced_accuracy"].append(round(len(sizes) ** 2 / sum(1 / n for n in sizes)) if sizes else 0)
        rare = min(run.train_class_counts, key=lambda name: run.train_class_counts[name])
        found["smallest_class_accuracy"].append(counts.get(rare, 0))
    return {key: int(statistics.median(sizes)) if sizes else 0 for key, sizes in found.items()}


def campaign_values(store: Any, campaign: Any) -> tuple[dict[str, dict[str, dict[tuple[int, int], float]]], list[Any]]:
    """A stored campaign's re-trained (tuned) runs as the verdict reads them: each method's metrics per (replicate,
    pair), and the runs themselves. Reads only."""
    runs = campaign_runs(store, campaign)
    return run_values(runs), [run for by_key in runs.values() for run in by_key.values()]


def model_from_campaign(store: Any, campaign: Any, primary: Sequence[str]) -> tuple[Model, Estimate]:
    """The model of a stored campaign: its methods, replicates and rounds, the figures its runs give and the
    default smallest effects."""
    values, runs = campaign_values(store, campaign)
    smallest = {m.key: m.smallest for m in default_model(1).metrics}
    estimated = estimate(values, campaign.methods, campaign.replicates, test_images_of(runs), smallest)
    evaluation = campaign.evaluation
    model = Model(estimated.methods, estimated.metrics, tuple(primary), campaign.replicates, evaluation.seeds,
                  evaluation.seeds_per_round, max(evaluation.max_seeds, evaluation.seeds), estimated.correlation)
    return model, estimated


def with_figures(model: Model, figures: Mapping[str, Mapping[str, float]]) -> Model:
    """The model with figures given per metric replacing its own: `figures` maps a MetricModel field (level,
    test_images, split_sd, seed_sd, interaction_sd, search_sd, smallest) to metric -> value, in fractions."""
    metrics = []
    for m in model.metrics:
        changes: dict[str, Any] = {}
        for name, by_metric in figures.items():
            if m.key in by_metric:
                value = by_metric[m.key]
                changes[name] = (int(value) if name == "test_images" else
                                 (float(value),) * len(m.interaction_sd) if name == "interaction_sd" else float(value))
        metrics.append(replace(m, **changes))
    return replace(model, metrics=tuple(metrics))


# --- the tables --------------------------------------------------------------------------------------------------

def _points(value: float) -> str:
    """A fraction in points, one decimal."""
    return f"{value / POINT:.1f}"


def _pm(rate: Rate, scale: float = 100.0, digits: int = 1) -> str:
    """A rate as `value ± se` (percent by default); '-' where nothing was counted."""
    if rate.units == 0 or math.isnan(rate.value):
        return "-"
    se = "" if math.isnan(rate.se) else f" ± {scale * rate.se:.{digits}f}"
    return f"{scale * rate.value:.{digits}f}{se}"


def _truth_label(multiple: float) -> str:
    """A true difference as a column header: 0, 0.5x, 1x, ..."""
    return "0" if multiple == 0 else f"{multiple:g}x"


def _record(rate: Rate) -> dict[str, float | int | None]:
    """A rate in a JSON record: its value, Monte Carlo standard error and the units it counts."""
    def number(x: float) -> float | None:
        return None if math.isnan(x) else float(x)

    return {"value": number(rate.value), "se": number(rate.se), "units": rate.units}


def figures_table(model: Model, source: str, notes: Sequence[str] = ()) -> Table:
    """The figures simulated, per metric, in points: where they come from and what the campaign's design is."""
    rows, records = [], []
    for m in model.metrics:
        low, high = min(m.interaction_sd, default=0.0), max(m.interaction_sd, default=0.0)
        interaction = _points(low) if round(low / POINT, 1) == round(high / POINT, 1) else \
            f"{_points(low)}-{_points(high)}"
        primary = m.key in model.primary
        rows.append([METRIC_LABELS[m.key], "primary" if primary else "second.", _points(m.level),
                     str(m.test_images or "-"), _points(m.split_sd), _points(m.seed_sd), interaction,
                     _points(m.search_sd), _points(m.smallest)])
        records.append({"metric": m.key, "primary": primary, "level": m.level, "test_images": m.test_images,
                        "split_sd": m.split_sd, "seed_sd": m.seed_sd, "interaction_sd": list(m.interaction_sd),
                        "search_sd": m.search_sd, "smallest_effect": m.smallest})
    compared = len(model.methods) - 1
    design = (f"{compared} method{'s' if compared > 1 else ''} against ERM ({', '.join(model.methods[1:])}), "
              f"{model.replicates} search{'es' if model.replicates > 1 else ''} each; pairs {model.seeds}, then "
              f"{model.seeds_per_round} a round up to {model.max_seeds}; alpha {100 * model.alpha:g}%; the normal "
              f"terms of a run correlated {model.correlation:.2f} across its metrics.")
    legend = ("Points: ERM = ERM's expected accuracy before the noise; images = the test images its binomial "
              "noise rests on; then standard deviations: the split (shared by a pair's methods), the training seed "
              "(each run's own), method x split (a method's difference to ERM moving with the split), search (a "
              "search's luck, shared by its pairs); effect = the smallest effect that matters (a secondary "
              "metric's only scales its true differences).")
    return Table(f"Figures simulated ({source})", ["metric", "role", "ERM", "images", "split", "seed",
                                                   "m x split", "search", "effect"],
                 rows, [design, *notes, legend], records)


def errors_table(simulation: Simulation) -> Table:
    """The wrong words per true difference: the family-wise false-positive rate at 0, a false equivalent at 1x."""
    rows, records = [], []
    for s in simulation.scenarios:
        label = "0 (none)" if s.multiple == 0 else f"{s.multiple:g}x smallest"
        rows.append([label, _pm(s.any_wrong), _pm(s.false_equivalent), _pm(s.wrong_cells, digits=2)])
        records.append({"truth": s.multiple, "campaigns": s.campaigns, "any_wrong": _record(s.any_wrong),
                        "false_equivalent": _record(s.false_equivalent), "wrong_cells": _record(s.wrong_cells)})
    notes = [f"Share of {simulation.campaigns} simulated campaigns per true difference (every compared method's, "
             "in smallest effects), ± its Monte Carlo standard error. A wrong word: better where the truth is not "
             "above 0, worse where it is not below, equivalent where it is not inside ± the smallest effect. At 0 "
             "any wrong word is the family-wise false-positive rate; at 1x a wrong equivalent is the false "
             "equivalent. The design holds every row to at most alpha."]
    return Table("Wrong words (%)", ["true difference", "any wrong word", "wrong equivalent", "wrong cells"], rows,
                 notes, records)


def power_table(simulation: Simulation) -> Table:
    """Per primary cell, the share decided rightly at each true difference above 0."""
    scenarios = [s for s in simulation.scenarios if s.multiple > 0]
    cells = list(scenarios[0].correct) if scenarios else []
    rows, records = [], []
    for key in cells:
        rows.append([key[0], METRIC_LABELS.get(key[1], key[1]), *[_pm(s.correct[key]) for s in scenarios]])
        for s in scenarios:
            records.append({"method": key[0], "metric": key[1], "truth": s.multiple, "right": _record(s.correct[key]),
                            "words": s.words[key]})
    notes = ["Right: better, or equivalent where the truth is inside ± the smallest effect (at 0.5x); undecided is "
             "never right. --format json has the share of each word."]
    return Table("Power: cells decided rightly (%)", ["method", "metric", *[_truth_label(s.multiple)
                                                                            for s in scenarios]], rows, notes, records)


def coverage_table(simulation: Simulation) -> Table:
    """Per interval kind the verdict prints, the share of its intervals that held the truth, per true difference."""
    model = simulation.model
    family = len(model.primary) * (len(model.methods) - 1)
    nominal = {"primary": f"{100 - 100 * model.alpha / max(1, family):.2f}+", "family": f"{100 - 100 * model.alpha:g}+",
               "secondary": "95", "improvement": "95+", "mean": "95"}
    rows, records = [], []
    for kind, label in COVERAGES.items():
        rows.append([label, *[_pm(s.coverage[kind]) for s in simulation.scenarios], nominal[kind]])
        for s in simulation.scenarios:
            records.append({"interval": kind, "truth": s.multiple, "coverage": _record(s.coverage[kind]),
                            "not_printed": s.missing[kind], "nominal": nominal[kind]})
    notes = ["Share of the intervals printed that held the truth, ± its Monte Carlo standard error. difference: "
             "a primary cell's simultaneous interval (its look's share of alpha, Bonferroni over the family), one "
             "at a time (cell) and all of a campaign's at once (family); secondary 95%: the other metrics' "
             "differences; P>ERM 95%: Clopper-Pearson's interval of P(method beats ERM on a pair); mean ± 95%: "
             "each method's mean accuracy over its runs (Student's t). Truth: the model's expected difference "
             "or accuracy, and its P(method beats ERM), ties half, from a large draw. An interval the verdict "
             "could not give (too few units) is left out."]
    if model.replicates == 1 and any(m.search_sd > 0 for m in model.metrics):
        notes.append("With one search per method its luck is in every pair: no interval can contain it, so they "
                     "cover the search's result, not the method's (replicates = 2 or more count it).")
    return Table("Coverage (%)", ["interval", *[_truth_label(s.multiple) for s in simulation.scenarios], "nominal"],
                 rows, notes, records)


def pairs_table(simulation: Simulation) -> Table:
    """Per method, the mean pairs per replicate the campaigns spent, per true difference."""
    rows, records = [], []
    for method in simulation.model.methods:
        rows.append([method, *[_pm(s.pairs[method], 1.0) for s in simulation.scenarios]])
        records += [{"method": method, "truth": s.multiple, "pairs": _record(s.pairs[method])}
                    for s in simulation.scenarios]
    notes = [f"Mean pairs per search (of at most {simulation.model.max_seeds}) each method was trained on, ERM "
             f"the most; {1000 * simulation.seconds_per_campaign:.0f} ms a simulated campaign here."]
    return Table("Pairs used", ["method", *[_truth_label(s.multiple) for s in simulation.scenarios]], rows, notes,
                 records)


def verdict_bench_tables(simulation: Simulation, source: str, notes: Sequence[str] = ()) -> list[Table]:
    """bench verdict's tables: the figures, the wrong words, the power, the coverage, the pairs."""
    return [figures_table(simulation.model, source, notes), errors_table(simulation), power_table(simulation),
            coverage_table(simulation), pairs_table(simulation)]
