"""The generative model `bench verdict` draws whole campaigns' confirmation runs from, the truth a verdict should
find under it, and the model's figures read off a stored campaign.

One run of method m on pair s of search r, on one metric, in fractions of one (0.01 is a point):

    p     = level + truth[m] + split[r, s] + interaction[m, r, s] + seed[m, r, s] + luck[m, r], clipped to [0, 1]
    p     = collapsed x U(0.5, 1.5) instead, for a run that collapsed (each run of method m with chance collapse[m])
    value = the share of the pair's test images the run gets right

Every term but the truth is normal with the metric's standard deviation (MetricModel says what each is). A run's
terms are correlated across its metrics: each is sqrt(c) times a draw the metrics share plus sqrt(1 - c) times the
metric's own (c the model's correlation). The test images are the pair's, shared by its runs: image i is right for
run j when sqrt(rho) z_i + sqrt(1 - rho) e_ij < Phi^-1(p_j) (a Gaussian copula, rho the model's image
correlation): z_i is the image's difficulty, which both runs of a pair meet, so the binomial noise of a paired
difference is smaller than two independent binomials' (tools/shared_images.py measures rho on the digits).

The truth a verdict's difference should contain is the difference between runs that trained (the model's shift, no
collapse): the verdict's unit is trimmed, and a collapse is counted beside it. P(method > ERM) is the model's over
every pair, collapses included, since the verdict's share counts every pair. Torch-free.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from pipeline.compare.decision import Design, Values
from pipeline.compare.luck import COLLAPSE_POINTS, collapsed_runs, search_luck
from pipeline.compare.verdict import campaign_runs, run_values
from pipeline.errors import UserError
from pipeline.spec.campaign_config import NEW_DESIGN, TRIM

POINT = 0.01
METRIC_LABELS = {"test_accuracy": "test acc", "test_balanced_accuracy": "balanced",
                 "smallest_class_accuracy": "rare class"}  # the verdict's labels for the metrics simulated
SHORT_NAMES = {"accuracy": "test_accuracy", "balanced": "test_balanced_accuracy", "rare": "smallest_class_accuracy"}
REFERENCE = "erm"
TRUTH_DRAWS = 50_000  # pairs drawn to compute a P(method > ERM) the model implies
# The digits campaigns' figures (README, "Does it hold up?"): ERM's rare digit over five widened campaigns was 67.7,
# 69.6, 71.4, 75.6 and 67.0% (SD 3.4, each campaign's own standard error about 2): a search's luck of about 3 points
# there and half a point on the accuracies over every class; one confirmation run in 30 collapsed (27-40% balanced).
SEARCH_SD = {"test_accuracy": 0.5, "test_balanced_accuracy": 0.5, "smallest_class_accuracy": 3.0}
COLLAPSE_RATE = 1 / 30
COLLAPSED = {"test_accuracy": 35.0, "test_balanced_accuracy": 35.0, "smallest_class_accuracy": 10.0}
IMAGE_CORRELATION = 0.88  # measured on the digits (rare class; 0.96 over all test images): tools/shared_images.py


@dataclass(frozen=True)
class MetricModel:
    """One metric's generative model, every figure a fraction of one (0.01 is a point)."""

    key: str  # the metric as the store and decide() name it (METRIC_LABELS)
    level: float  # ERM's expected accuracy on a pair before the noise, the level the binomial noise is drawn at
    test_images: int  # the test images the metric's binomial noise rests on; 0: no binomial noise
    split_sd: float  # the pair's split: shared by every method of the pair, it cancels in a paired difference
    seed_sd: float  # the training seed: each run's own run-to-run noise
    interaction_sd: tuple[float, ...]  # per compared method: its difference to ERM varies with the split
    search_sd: tuple[float, ...]  # per method, ERM first: a search's luck, one shift shared by all its pairs
    smallest: float  # the smallest effect that matters; the scenarios' true differences are multiples of it
    collapsed: float = 0.0  # the accuracy a collapsed run scores, about (drawn at 0.5-1.5 times it)


@dataclass(frozen=True)
class Model:
    """A campaign's design and the generative model of its confirmation values. The design is the campaign's
    (pipeline/compare/decision.py's Design): by default a new campaign's."""

    methods: tuple[str, ...]  # ERM first
    metrics: tuple[MetricModel, ...]
    primary: tuple[str, ...]  # the metrics decided on; the others are secondary (95% intervals, no word)
    searches: int = NEW_DESIGN["replicates"]  # the first look's searches per method
    searches_per_round: int = NEW_DESIGN["replicates_per_round"]
    max_searches: int = NEW_DESIGN["max_replicates"]
    seeds: int = NEW_DESIGN["seeds"]
    seeds_per_round: int = NEW_DESIGN["seeds_per_round"]
    max_seeds: int = NEW_DESIGN["max_seeds"]
    trim: float = TRIM
    search_cost: float = 8.0  # a search's cost in runs (its trials), for the pairs the pilot plans
    correlation: float = 0.5  # of a run's normal terms across its metrics
    alpha: float = 0.05
    image_correlation: float = IMAGE_CORRELATION
    collapse: tuple[float, ...] = ()  # per method, ERM first: the share of its runs that collapse (empty: none)

    def design(self) -> Design:
        """The decision procedure's design for this campaign."""
        return Design(self.primary, {m.key: m.smallest for m in self.metrics if m.key in self.primary}, self.seeds,
                      self.seeds_per_round, self.max_seeds, self.alpha, None, self.searches,
                      self.searches_per_round, self.max_searches, self.trim, self.search_cost)

    def metric(self, key: str) -> MetricModel:
        """The model of metric `key`."""
        return next(m for m in self.metrics if m.key == key)

    def collapse_rate(self, method: int) -> float:
        return self.collapse[method] if self.collapse else 0.0


def default_model(methods: int = 4) -> Model:
    """The digits campaign's set-up (studies/digits-campaign.toml: 37 test images of the rare digit, about 400 in
    all; tuned ERM near 95% balanced and 68% on the rare digit, which moves 5-15 points with the split), with the
    search luck and collapses the digits campaigns showed, at a new campaign's design."""
    def metric(key: str, level: float, images: int, split: float, seed: float, interaction: float,
               smallest: float) -> MetricModel:
        return MetricModel(key, level * POINT, images, split * POINT, seed * POINT, (interaction * POINT,) * methods,
                           (SEARCH_SD[key] * POINT,) * (methods + 1), smallest * POINT, COLLAPSED[key] * POINT)

    return Model((REFERENCE, *[f"m{i}" for i in range(1, methods + 1)]),
                 (metric("test_accuracy", 95, 396, 1.0, 0.7, 0.5, 1),
                  metric("test_balanced_accuracy", 95, 396, 1.0, 0.7, 0.5, 1),
                  metric("smallest_class_accuracy", 68, 37, 8, 4, 3, 5)),
                 ("test_balanced_accuracy", "smallest_class_accuracy"), collapse=(COLLAPSE_RATE,) * (methods + 1))


def one_search(model: Model) -> Model:
    """The model at one search per method and rounds of pairs (a campaign with `replicates = 1`)."""
    return replace(model, searches=1, searches_per_round=1, max_searches=1, seeds=5, seeds_per_round=5, max_seeds=30)


# --- one campaign's values ---------------------------------------------------------------------------------------

def _mixed(rng: np.random.Generator, shape: tuple[int, ...], metrics: int, correlation: float) -> np.ndarray:
    """Standard normal draws of `shape` for each metric, correlated `correlation` across the metrics."""
    shared = rng.standard_normal(shape)
    own = rng.standard_normal((metrics, *shape))
    return math.sqrt(correlation) * shared + math.sqrt(1 - correlation) * own


def true_levels(model: Model, truth: float) -> np.ndarray:
    """p before the noise, (metric, method): the level plus each compared method's true difference."""
    return np.array([[m.level] + [m.level + truth * m.smallest] * (len(model.methods) - 1) for m in model.metrics])


def _shared_images(p: np.ndarray, images: int, rho: float, rng: np.random.Generator) -> np.ndarray:
    """The share of `images` test images each run gets right, p: (..., pair-sharing axis last but one is the pair)
    shaped (searches, pairs, methods): the runs of a pair meet the same images (a Gaussian copula, `rho`)."""
    from scipy.special import ndtri

    r, s, methods = p.shape
    if rho <= 0:
        return rng.binomial(images, p) / images
    threshold = ndtri(np.clip(p, 1e-12, 1 - 1e-12)).astype(np.float32)[..., None]  # (r, s, methods, 1)
    difficulty = rng.standard_normal((r, s, 1, images), dtype=np.float32)
    own = rng.standard_normal((r, s, methods, images), dtype=np.float32)
    right = np.float32(math.sqrt(rho)) * difficulty + np.float32(math.sqrt(1 - rho)) * own < threshold
    return right.mean(axis=-1)


def draw_accuracies(model: Model, truth: float, rng: np.random.Generator, searches: int | None = None,
                    pairs: int | None = None) -> np.ndarray:
    """One campaign's values, (metric, method, search, pair), every search and pair up to the design's caps."""
    k, methods = len(model.metrics), len(model.methods)
    r, s = searches or model.max_searches, pairs or model.max_seeds
    c = model.correlation
    split, interaction = _mixed(rng, (r, s, 1), k, c), _mixed(rng, (r, s, methods), k, c)
    seed, luck = _mixed(rng, (r, s, methods), k, c), _mixed(rng, (r, 1, methods), k, c)
    rates = np.array([model.collapse_rate(j) for j in range(methods)])
    collapsed = rng.random((r, s, methods)) < rates
    scale = rng.uniform(0.5, 1.5, (r, s, methods))
    levels = true_levels(model, truth)
    values = np.empty((k, methods, r, s))
    for i, m in enumerate(model.metrics):
        interaction_sd = np.array([0.0, *m.interaction_sd])
        search_sd = np.array(m.search_sd) if len(m.search_sd) == methods else np.full(methods, m.search_sd[0])
        p = (levels[i] + m.split_sd * split[i] + interaction_sd * interaction[i] + m.seed_sd * seed[i]
             + search_sd * luck[i])  # (search, pair, method)
        p = np.clip(np.where(collapsed, m.collapsed * scale, p), 0.0, 1.0)
        drawn = _shared_images(p, m.test_images, model.image_correlation, rng) if m.test_images > 0 else p
        values[i] = np.moveaxis(drawn, 2, 0)
    return values


def as_values(model: Model, drawn: np.ndarray) -> dict[str, dict[str, dict[tuple[int, int], float]]]:
    """The drawn values as decide() reads them: method -> metric -> (search, pair) -> value."""
    _, _, r, s = drawn.shape
    keys = [(a, b) for a in range(r) for b in range(s)]
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
    luck = m.search_sd[method] if len(m.search_sd) > method else m.search_sd[0]
    return math.sqrt(m.split_sd ** 2 + interaction ** 2 + m.seed_sd ** 2 + luck ** 2)


def probability_of_improvement(model: Model, metric: int, method: int, truth: float, rng: np.random.Generator,
                               draws: int = TRUTH_DRAWS) -> float:
    """The model's P(method beats ERM on a pair), ties counted half, by drawing `draws` pairs (their own splits,
    seeds, searches, shared images and collapses): what the verdict's P>ERM estimates."""
    m = model.metrics[metric]
    luck = m.search_sd[method] if len(m.search_sd) > method else m.search_sd[0]
    alone = replace(m, interaction_sd=(m.interaction_sd[method - 1],), search_sd=(m.search_sd[0], luck))
    two = replace(model, methods=(model.methods[0], model.methods[method]), metrics=(alone,),
                  collapse=(model.collapse_rate(0), model.collapse_rate(method)))
    wins, done = 0.0, 0
    while done < draws:
        chunk = min(20_000, draws - done)
        drawn = draw_accuracies(two, truth, rng, searches=chunk, pairs=1)[0]  # (method, search, 1)
        mine, erm = drawn[1].ravel(), drawn[0].ravel()
        wins += float(np.sum(mine > erm) + 0.5 * np.sum(mine == erm))
        done += chunk
    return wins / done


@dataclass(frozen=True)
class Truth:
    """What a scenario's verdicts should find: per (method, metric), the expected accuracy of a run that trained, the
    difference to ERM and P(method > ERM)."""

    multiple: float  # every compared method's true difference, in smallest effects
    accuracy: dict[tuple[str, str], float]
    difference: dict[tuple[str, str], float]
    improvement: dict[tuple[str, str], float]


def scenario_truth(model: Model, multiple: float, seed: int, draws: int = TRUTH_DRAWS) -> Truth:
    """The truths of the scenario where every compared method differs from ERM by `multiple` smallest effects."""
    accuracy, difference, improvement = {}, {}, {}
    cache: dict[tuple[Any, ...], float] = {}
    for i, m in enumerate(model.metrics):
        erm = expected_clipped(m.level, run_sd(m, 0))
        accuracy[(model.methods[0], m.key)] = erm
        for j, method in enumerate(model.methods[1:], start=1):
            mine = expected_clipped(m.level + multiple * m.smallest, run_sd(m, j))
            accuracy[(method, m.key)] = mine
            difference[(method, m.key)] = mine - erm
            same = (m.key, m.interaction_sd[j - 1], run_sd(m, j), model.collapse_rate(j))  # alike methods: one truth
            if same not in cache:
                rng = np.random.default_rng([seed, 7919, i, j, int(round(1000 * multiple))])
                cache[same] = probability_of_improvement(model, i, j, multiple, rng, draws)
            improvement[(method, m.key)] = cache[same]
    return Truth(multiple, accuracy, difference, improvement)


# --- the figures of a stored campaign ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Estimate:
    """The figures read off a stored campaign's confirmation runs, and what they could not tell apart."""

    methods: tuple[str, ...]  # ERM first, then the methods with pairs enough to estimate from
    metrics: tuple[MetricModel, ...]
    correlation: float
    pairs: int  # ERM's pairs per search
    collapse: tuple[float, ...] = ()  # per method, ERM first: the share of its runs that collapsed
    notes: tuple[str, ...] = field(default_factory=tuple)


Keys = list[list[tuple[int, int]]]  # per search, the (search, pair) keys a figure rests on


def _pooled_variance(by_search: list[list[float]]) -> float:
    """The variance within searches, pooled (a search's luck is constant within it)."""
    return statistics.fmean([statistics.variance(rep) for rep in by_search if len(rep) > 1])


def _pooled_covariance(a: list[list[float]], b: list[list[float]]) -> float:
    """The covariance within searches of two paired series, pooled."""
    return statistics.fmean([statistics.covariance(x, y) for x, y in zip(a, b) if len(x) > 1])


def estimate(values: Values, methods: Sequence[str], searches: int, test_images: Mapping[str, int],
             smallest: Mapping[str, float], image_correlation: float = IMAGE_CORRELATION) -> Estimate:
    """Each metric's variance components from a campaign's runs (method -> metric -> (search, pair) -> value),
    leaving out the pairs where a run collapsed (counted per method instead, the verdict's rule): the split (the
    variance across pairs of the mean over methods, less what the runs' own noise leaves in that mean), the
    within-pair spread of each method's difference to ERM less the binomial noise the shared test images leave
    (seed and method-by-split together), each method's search luck (searches >= 2: the variance of its searches'
    means beyond what their pairs explain) and the correlation of the differences across metrics; `test_images`:
    per metric, the images its binomial noise rests on."""
    reference = methods[0]
    compared = [m for m in methods[1:] if _pairs(_common_keys(values, [reference, m], searches)) >= 2]
    if not compared:
        raise UserError("the campaign has no method besides ERM with 2 or more pairs in each search: the spread of a "
                        "difference needs 2")
    primary = "test_balanced_accuracy"
    fallen = collapsed_runs({m: values[m][primary] for m in (reference, *compared)})
    clean = {m: {metric: {k: v for k, v in by_key.items() if k not in fallen.get(m, set()) and
                          k not in fallen.get(reference, set())} for metric, by_key in values[m].items()}
             for m in (reference, *compared)}
    shared = {m: _common_keys(clean, [reference, m], searches) for m in compared}
    everyone = _common_keys(clean, [reference, *compared], searches)
    metrics, remainders = [], {}
    for key in METRIC_LABELS:
        fitted, remainders[key] = _metric_estimate(clean, values, reference, shared, everyone, key,
                                                   test_images.get(key, 0), smallest.get(key, POINT), searches,
                                                   image_correlation)
        metrics.append(fitted)
    notes = ["seed and method-by-split come together: each pair is its own split and seed, so a difference's "
             "spread cannot tell them apart; the least spread method's is taken as seed noise (half on each "
             "side of a difference), the rest of each method's as its method-by-split",
             f"the shared test images' correlation is not in the stored runs: {image_correlation:g}, measured on the "
             "digits (--image-correlation changes it)"]
    if searches < 2:
        notes.append("search luck from the digits campaigns: one search per method cannot measure it (2 or more "
                     "searches would)")
    if not any(test_images.values()):
        notes.append("no binomial noise: the runs store no test image counts (runs before 0.7.0), so it is "
                     "inside the seed noise")
    if len(compared) < len(methods) - 1:
        notes.append("left out, too few pairs: " + ", ".join(m for m in methods[1:] if m not in compared))
    model_methods = (reference, *compared)
    runs = {m: len(values[m][primary]) for m in model_methods}
    collapse = tuple(len(fallen.get(m, ())) / runs[m] if runs[m] else 0.0 for m in model_methods)
    correlation = _correlation(clean, reference, shared, remainders)
    return Estimate(model_methods, tuple(metrics), correlation, _pairs(_common_keys(values, [reference], searches)),
                    collapse, tuple(notes))


def _pairs(keys: Keys) -> int:
    """The pairs per search that `keys` holds in every search."""
    return min((len(k) for k in keys), default=0)


def _common_keys(values: Values, methods: Sequence[str], searches: int) -> Keys:
    """Per search, the pairs every method of `methods` has on every simulated metric with a number."""
    keys = []
    for r in range(searches):
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


def shared_share(p: float, rho: float) -> float:
    """The correlation of two runs' right-or-wrong on one image at accuracy p under the image copula (rho): the
    share of their binomial variance a paired difference does not have."""
    from scipy.special import ndtri
    from scipy.stats import multivariate_normal

    if rho <= 0 or not 0 < p < 1:
        return 0.0
    q = ndtri(p)
    both = float(multivariate_normal(mean=[0, 0], cov=[[1, rho], [rho, 1]]).cdf([q, q]))
    return (both - p * p) / (p * (1 - p))


def _differences(values: Values, method: str, reference: str, metric: str, keys: Keys) -> list[list[float]]:
    """The method's differences to ERM on `keys`, one list per search."""
    return [[values[method][metric][k] - values[reference][metric][k] for k in rep] for rep in keys]


def _runs(values: Values, method: str, metric: str, keys: Keys) -> list[float]:
    """The method's values on `keys`, every search's in one list."""
    return [values[method][metric][k] for rep in keys for k in rep]


def _metric_estimate(clean: Values, values: Values, reference: str, shared: Mapping[str, Keys], everyone: Keys,
                     metric: str, images: int, smallest: float, searches: int,
                     rho: float) -> tuple[MetricModel, float]:
    """One metric's model from the runs (`clean`: without the pairs where a run collapsed), and the mean spread of a
    difference less its binomial noise."""
    erm = _runs(clean, reference, metric, _common_keys(clean, [reference], searches))
    binomial = {m: _binomial_variance(_runs(clean, m, metric, keys), images) for m, keys in shared.items()}
    binomial[reference] = _binomial_variance(erm, images)
    share = shared_share(statistics.fmean(erm), rho)
    remainder = {m: max(0.0, _pooled_variance(_differences(clean, m, reference, metric, keys))
                        - (binomial[m] + binomial[reference]) * (1 - share)) for m, keys in shared.items()}
    seed = min(remainder.values()) / 2  # a variance
    interaction = {m: math.sqrt(max(0.0, r - 2 * seed)) for m, r in remainder.items()}
    split = 0.0
    if _pairs(everyone) >= 2:
        methods = [reference, *shared]
        means = [[statistics.fmean(clean[m][metric][k] for m in methods) for k in rep] for rep in everyone]
        count = len(methods)  # what the runs' own noise leaves in their mean: the binomial parts share the images
        binomial_mean = statistics.fmean(binomial[m] for m in methods) * (1 + (count - 1) * share) / count
        noise = sum(seed + interaction.get(m, 0.0) ** 2 for m in methods) / count ** 2 + binomial_mean
        split = math.sqrt(max(0.0, _pooled_variance(means) - noise))
    luck = search_luck({m: clean[m][metric] for m in (reference, *shared)}, TRIM) if searches >= 2 else {}
    default = SEARCH_SD[metric] * POINT
    model = MetricModel(metric, statistics.fmean(erm), images, split, math.sqrt(seed), tuple(interaction.values()),
                        tuple(luck.get(m, default) for m in (reference, *shared)), smallest,
                        _collapsed_level(values, clean, metric))
    return model, statistics.fmean(remainder.values())


def _collapsed_level(values: Values, clean: Values, metric: str) -> float:
    """The mean score of the runs left out as collapsed, else the default share of the clean runs' level."""
    lost = [v for m in clean for k, v in values[m][metric].items() if k not in clean[m][metric]]
    fallen = [v for v in lost if v <= statistics.fmean(values[REFERENCE][metric].values()) - COLLAPSE_POINTS]
    if fallen:
        return statistics.fmean(fallen)
    return COLLAPSED[metric] * POINT


def _correlation(values: Values, reference: str, shared: Mapping[str, Keys], remainders: Mapping[str, float]) -> float:
    """The correlation of a method's differences to ERM across the metrics (pooled within searches, less the
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
    """A stored campaign's re-trained (tuned) runs as the verdict reads them: each method's metrics per (search,
    pair), and the runs themselves. Reads only."""
    runs = campaign_runs(store, campaign)
    return run_values(runs), [run for by_key in runs.values() for run in by_key.values()]


def model_from_campaign(store: Any, campaign: Any, primary: Sequence[str]) -> tuple[Model, Estimate]:
    """The model of a stored campaign: its methods, searches and rounds, the figures its runs give and the default
    smallest effects."""
    from pipeline.compare.verdict import stored_design

    values, runs = campaign_values(store, campaign)
    searches = max((k[0] + 1 for by_metric in values.values() for by_key in by_metric.values() for k in by_key),
                   default=1)
    smallest = {m.key: m.smallest for m in default_model(1).metrics}
    estimated = estimate(values, campaign.methods, searches, test_images_of(runs), smallest)
    design = stored_design(campaign, None)
    model = Model(estimated.methods, estimated.metrics, tuple(primary), design.searches, design.searches_per_round,
                  design.max_searches, design.seeds, design.seeds_per_round, max(design.max_seeds, design.seeds),
                  design.trim, design.search_cost, estimated.correlation, collapse=estimated.collapse)
    return model, estimated


def with_figures(model: Model, figures: Mapping[str, Mapping[str, float]]) -> Model:
    """The model with figures given per metric replacing its own: `figures` maps a MetricModel field (level,
    test_images, split_sd, seed_sd, interaction_sd, search_sd, smallest, collapsed) to metric -> value, in
    fractions (a per-method figure takes the value for every method)."""
    metrics = []
    for m in model.metrics:
        changes: dict[str, Any] = {}
        for name, by_metric in figures.items():
            if m.key in by_metric:
                value = by_metric[m.key]
                changes[name] = (int(value) if name == "test_images" else
                                 (float(value),) * len(m.interaction_sd) if name == "interaction_sd" else
                                 (float(value),) * len(model.methods) if name == "search_sd" else float(value))
        metrics.append(replace(m, **changes))
    return replace(model, metrics=tuple(metrics))
