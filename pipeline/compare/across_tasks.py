"""The verdict across the tasks of a campaign: which method to use by default over several data sets and networks.

Per task, the verdict of a one-task campaign (pipeline/compare/verdict.py). Across tasks, per metric:
- each method's mean rank over the tasks (rank 1 the best mean of its re-trained runs on the pairs every method ran
  in that task), and Demsar's (2006) test for ranks as autorank (Herbold 2020) makes it: with three or more methods
  the Friedman test (scipy's) and, where it rejects, the Nemenyi post-hoc with its critical difference (two methods
  differ where their mean ranks are further apart than that); with two, the Wilcoxon signed-rank test, two-sided
  (scipy's, exact where scipy computes it exactly; autorank's is one-sided in the direction of the larger median,
  which doubles its false-positive rate). As autorank requires, at least MIN_TASKS tasks: below that the ranks are
  shown and no test is made, and the verdict says why. autorank itself is no dependency: it brings baycomp, and both
  install a top-level package named `tests` over anyone's own;
- each method's difference to ERM, the mean over tasks of its per-task mean paired difference, with a 95%
  stratified-bootstrap interval (pairs resampled within each task), and the probability of improvement over ERM
  averaged over tasks (per task, the Mann-Whitney share of run pairs the method wins, ties half) with a stratified
  bootstrap interval (each method's runs resampled within each task): rliable's estimators (Agarwal et al. 2021),
  computed here because rliable's bootstrap does not import with the pandas this project's Ax needs;
- whether the order of the methods by expected best validation score (pipeline/compare/budget_curves.py) at the full
  budget is the one at half of it.

scipy, statsmodels and numpy are imported inside the functions that use them: reading commands stay light.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

from pipeline.compare.budget_curves import TIE, Order, half_budget, order_at, order_text
from pipeline.spec.campaign_config import REFERENCE
from pipeline.store import CampaignRecord, Store
from pipeline.compare.verdict import (ALPHA, METRICS, READING_LABELS, Values, Verdict, campaign_runs, run_values,
                                      signed_points, take_verdict)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

MIN_TASKS = 5  # autorank's (and Demsar's) least number of paired samples for a test on ranks
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0  # fixed: a reading command prints the same interval every time


@dataclass(frozen=True)
class Ranking:
    """One metric's ranking of the methods over the tasks: mean ranks (1 = best) and, with enough tasks, the test."""

    metric: str
    methods: list[str]  # the methods ranked: those with runs in every task, best mean rank first
    scores: dict[str, dict[str, float]]  # task -> method -> mean of its runs on the pairs every method has there
    mean_ranks: dict[str, float]
    test: str | None = None  # "friedman" or, for two methods, "wilcoxon"; None: no test (refusal: why)
    # Friedman's chi-square (scipy.stats.friedmanchisquare), or with two methods Wilcoxon's (scipy.stats.wilcoxon)
    statistic: float | None = None
    p_value: float | None = None
    critical_difference: float | None = None  # Nemenyi's, in mean ranks
    differ: list[tuple[str, str]] = field(default_factory=list)  # pairs the post-hoc separates (better one first)
    refusal: str = ""  # why no test was made


@dataclass(frozen=True)
class Aggregate:
    """One method against ERM on one metric over the tasks (rliable's estimators, stratified bootstrap)."""

    method: str
    metric: str
    difference: float  # mean over tasks of the per-task mean paired difference, method - ERM
    low: float
    high: float
    improvement: float  # P(method > ERM) averaged over tasks
    improvement_low: float
    improvement_high: float
    tasks: int


@dataclass
class AcrossTasks:
    """A campaign's verdict over its tasks: each task's verdict, the rankings, the aggregates and the reading."""

    campaign: str
    tasks: list[str]
    verdicts: dict[str, Verdict]
    rankings: list[Ranking]
    aggregates: list[Aggregate]
    budget_changes: dict[str, tuple[Order, Order]] = field(default_factory=dict)  # task -> half, full order
    reading: str = ""


def task_scores(values: Values, methods: Sequence[str], metric: str) -> dict[str, float]:
    """Each method's mean of `metric` over the (replicate, seed) pairs every one of `methods` has."""
    common = [k for k in values[methods[0]][metric] if all(k in values[m][metric] for m in methods)]
    return {m: math.fsum(values[m][metric][k] for k in common) / len(common) for m in methods} if common else {}


def mean_ranks(scores: Mapping[str, Mapping[str, float]], methods: Sequence[str]) -> dict[str, float]:
    """Each method's mean rank over the tasks, rank 1 the highest score, ties sharing the mean of their ranks (every
    task ranked in one call: the two-method test's simulation ranks thousands of sets)."""
    import numpy as np
    from scipy.stats import rankdata

    if not methods:
        return {}
    ranks = rankdata(-np.array([[by_method[m] for m in methods] for by_method in scores.values()]), axis=1)
    return {m: float(rank) for m, rank in zip(methods, ranks.mean(axis=0))}


def rank_methods(metric: str, scores: Mapping[str, Mapping[str, float]], methods: Sequence[str],
                 alpha: float = ALPHA) -> Ranking:
    """The ranking of `methods` on `metric` from `scores` (task -> method -> score), tested when there are at least
    MIN_TASKS tasks: Friedman and Nemenyi as autorank tests them (nonparametric), or for two methods the two-sided
    Wilcoxon signed-rank test."""
    ranks = mean_ranks(scores, methods)
    ordered = sorted(methods, key=lambda m: ranks[m])
    plain = {t: dict(s) for t, s in scores.items()}
    if len(methods) < 2:
        return Ranking(metric, ordered, plain, ranks, refusal="fewer than two methods have runs in every task")
    if len(scores) < MIN_TASKS:
        return Ranking(metric, ordered, plain, ranks,
                       refusal=f"{len(scores)} task{'s' if len(scores) != 1 else ''}: a test on ranks needs at least "
                               f"{MIN_TASKS} (autorank's rule, after Demsar 2006); the mean ranks are shown, not "
                               "tested")
    if len(methods) == 2:
        return _two_methods(metric, plain, ranks, methods, alpha)
    import numpy as np
    from scipy.stats import friedmanchisquare
    from statsmodels.stats.libqsturng import qsturng

    friedman = friedmanchisquare(*[[scores[t][m] for t in scores] for m in methods])
    k, n = len(methods), len(scores)
    # Nemenyi's critical difference (Demsar 2006, eq. 5: q_alpha from the studentized range over sqrt 2)
    cd = float(qsturng(1 - alpha, k, np.inf) * math.sqrt(k * (k + 1) / (12 * n)))
    differ = []
    if friedman.pvalue < alpha:
        differ = [(a, b) for i, a in enumerate(ordered) for b in ordered[i + 1:] if ranks[b] - ranks[a] > cd]
    return Ranking(metric, ordered, plain, ranks, "friedman", float(friedman.statistic), float(friedman.pvalue), cd,
                   differ)


def _two_methods(metric: str, scores: dict[str, dict[str, float]], ranks: dict[str, float], methods: Sequence[str],
                 alpha: float) -> Ranking:
    """Two methods over the tasks: the two-sided Wilcoxon signed-rank test of their paired per-task scores; where it
    rejects, the one whose signed ranks sum higher is the better."""
    a, b = methods
    statistic, p_value, sign = wilcoxon_two_sided([scores[t][a] for t in scores], [scores[t][b] for t in scores])
    differ = [(a, b) if sign > 0 else (b, a)] if p_value < alpha else []
    return Ranking(metric, sorted(methods, key=lambda m: ranks[m]), scores, ranks, "wilcoxon", statistic, p_value,
                   None, differ)


def wilcoxon_two_sided(a: Sequence[float], b: Sequence[float]) -> tuple[float | None, float, int]:
    """scipy.stats.wilcoxon of a - b, two-sided (exact for up to 50 non-zero differences without ties, the normal
    approximation otherwise; zero differences dropped): its statistic, its p-value, and which side leads (+1: a's
    positive differences outrank its negative ones, -1: b's, 0: neither). No non-zero difference: no statistic, p 1."""
    import numpy as np
    from scipy.stats import rankdata, wilcoxon

    differences = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    differences = differences[differences != 0]
    if not len(differences):
        return None, 1.0, 0
    result = wilcoxon(differences, alternative="two-sided")
    ranks = rankdata(np.abs(differences))
    lead = float(ranks[differences > 0].sum() - ranks[differences < 0].sum())
    return float(result.statistic), float(result.pvalue), int(np.sign(lead))


def smallest_wilcoxon_p(differences: int) -> float:
    """The smallest p-value the exact two-sided signed-rank test can give on `differences` non-zero differences
    (every one on the same side): 2 / 2^n, 0.0625 at five, so five tasks can never reach 5%."""
    return min(1.0, 2.0 ** (1 - differences))


def _percentile(values: Sequence[float] | NDArray[np.float64], confidence: float = 0.95) -> tuple[float, float]:
    import numpy as np

    tail = 100 * (1 - confidence) / 2
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


def mann_whitney_share(x: Sequence[float], y: Sequence[float]) -> float:
    """P(X > Y) over every pair of a run of x and a run of y, ties half (rliable: 0.5 where x and y are the same)."""
    if list(x) == list(y):
        return 0.5
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y)
    return wins / (len(x) * len(y))


def aggregate(method: str, metric: str, pairs: Mapping[str, tuple[Sequence[float], Sequence[float]]]) -> Aggregate:
    """`method` against ERM over tasks from each task's paired runs (task -> (method's values, ERM's values), the
    same pairs in the same order): the mean over tasks of the mean difference and of P(method > ERM), each with a
    95% percentile interval from a stratified bootstrap (resampling within each task: the pairs for the difference,
    each method's runs independently for the probability, as rliable resamples)."""
    import numpy as np

    rng = np.random.default_rng(BOOTSTRAP_SEED)
    tasks = list(pairs)
    differences = [np.asarray(pairs[t][0]) - np.asarray(pairs[t][1]) for t in tasks]
    mean = float(np.mean([d.mean() for d in differences]))
    improvement = float(np.mean([mann_whitney_share(*pairs[t]) for t in tasks]))
    resampled = np.zeros(BOOTSTRAP_RESAMPLES)
    shares = np.zeros(BOOTSTRAP_RESAMPLES)
    for t, d in zip(tasks, differences):
        picks = rng.integers(0, len(d), size=(BOOTSTRAP_RESAMPLES, len(d)))
        resampled += d[picks].mean(axis=1) / len(tasks)
        x, y = np.asarray(pairs[t][0]), np.asarray(pairs[t][1])
        xs = x[rng.integers(0, len(x), size=(BOOTSTRAP_RESAMPLES, len(x)))]
        ys = y[rng.integers(0, len(y), size=(BOOTSTRAP_RESAMPLES, len(y)))]
        wins = (xs[:, :, None] > ys[:, None, :]) + 0.5 * (xs[:, :, None] == ys[:, None, :])
        same = np.all(np.sort(xs, axis=1) == np.sort(ys, axis=1), axis=1)  # rliable's tie rule, per resample
        shares += np.where(same, 0.5, wins.mean(axis=(1, 2))) / len(tasks)
    low, high = _percentile(resampled)
    p_low, p_high = _percentile(shares)
    return Aggregate(method, metric, mean, low, high, improvement, p_low, p_high, len(tasks))


def across_of(name: str, verdicts: Mapping[str, Verdict], values: Mapping[str, Values],
              methods: Sequence[str]) -> AcrossTasks:
    """The verdict across tasks from each task's verdict and run values (task -> method -> metric -> pair ->
    value); `methods` ERM first."""
    tasks = list(verdicts)
    ranked = [m for m in methods if all(values[t].get(m) and values[t][m][METRICS[0]] for t in tasks)]
    rankings, aggregates = [], []
    for metric in METRICS:
        scores = {t: task_scores(values[t], ranked, metric) for t in tasks} if ranked else {}
        scores = {t: s for t, s in scores.items() if s}
        rankings.append(rank_methods(metric, scores, ranked if scores else []))
        for m in ranked:
            if m == REFERENCE:
                continue
            pairs = {}
            for t in tasks:
                keys = [k for k in values[t][m][metric] if k in values[t][REFERENCE][metric]]
                if keys:
                    pairs[t] = ([values[t][m][metric][k] for k in keys],
                                [values[t][REFERENCE][metric][k] for k in keys])
            if pairs:
                aggregates.append(aggregate(m, metric, pairs))
    result = AcrossTasks(name, tasks, dict(verdicts), rankings, aggregates)
    for t, verdict in verdicts.items():
        if len(verdict.curves) >= 2:
            budget = verdict.curves[0].budget
            half, full = order_at(verdict.curves, half_budget(budget)), order_at(verdict.curves, budget)
            if half != full:
                result.budget_changes[t] = (half, full)
    result.reading = across_reading(result)
    return result


def take_across_tasks(store: Store, campaign: CampaignRecord) -> AcrossTasks:
    """The verdict across the tasks of a stored campaign (a one-task campaign is its one task)."""
    verdicts, values = {}, {}
    for task, record in campaign.task_records():
        label = task or campaign.name
        verdicts[label] = take_verdict(store, record)
        values[label] = run_values(campaign_runs(store, record))
    return across_of(campaign.name, verdicts, values, campaign.methods)


def _wilcoxon_floor(ranking: Ranking) -> str:
    """Where two methods' scores differ on too few tasks for the two-sided signed-rank test ever to reach ALPHA, the
    clause that says so; empty otherwise."""
    a, b = ranking.methods
    differing = sum(scores[a] != scores[b] for scores in ranking.scores.values())
    floor = smallest_wilcoxon_p(differing)
    if floor < ALPHA:
        return ""
    return (f"; on {differing} task{'s' if differing != 1 else ''} where they differ it cannot go below "
            f"p = {floor:.4g}, so only more tasks could decide")


def across_reading(result: AcrossTasks) -> str:
    """The verdict across tasks in words, generated from the numbers."""
    sentences = []
    first = result.rankings[0] if result.rankings else None
    if first is not None and first.refusal:
        sentences.append(f"Cannot rank the methods across tasks: {first.refusal}")
    for r in result.rankings:
        if r.refusal or r.p_value is None:
            continue
        label = READING_LABELS[r.metric]
        test = "Friedman" if r.test == "friedman" else "two-sided Wilcoxon signed-rank"
        if r.p_value >= ALPHA and r.test == "wilcoxon":
            sentences.append(f"On {label} the {test} test detects no difference between the two methods over the "
                             f"tasks (p = {r.p_value:.3f}){_wilcoxon_floor(r)}")
        elif r.p_value >= ALPHA:
            sentences.append(f"On {label} the {test} test finds no difference between the methods' ranks "
                             f"(p = {r.p_value:.3f})")
        elif r.differ:
            pairs = ", ".join(f"{a} > {b}" for a, b in r.differ)
            differ = "the ranks differ" if r.test == "friedman" else "the two methods differ over the tasks"
            sentences.append(f"On {label} {differ} ({test} p = {r.p_value:.3f}); "
                             f"{'Nemenyi separates ' if r.test == 'friedman' else ''}{pairs}")
        else:
            sentences.append(f"On {label} the ranks differ ({test} p = {r.p_value:.3f}) but the Nemenyi post-hoc "
                             "separates no pair")
    clear = [a for a in result.aggregates if a.low > 0 or a.high < 0]
    for method in dict.fromkeys(a.method for a in clear):
        for word, side in (("above", [a for a in clear if a.method == method and a.low > 0]),
                           ("below", [a for a in clear if a.method == method and a.high < 0])):
            if side:
                shown = ", ".join(f"{READING_LABELS[a.metric]} ({signed_points(a.difference)} points "
                                  f"[{signed_points(a.low)}, {signed_points(a.high)}])" for a in side)
                sentences.append(f"{method} is {word} ERM over the tasks on {shown}")
    if clear:
        sentences.append("These bootstrap intervals exclude 0; they count the runs' spread within the tasks, not "
                         "which tasks were chosen, and are not corrected for the number of comparisons")
    elif result.aggregates:
        sentences.append("No method's difference to ERM averaged over the tasks has a bootstrap interval that "
                         "excludes 0")
    for task, (half, full) in result.budget_changes.items():
        sentences.append(f"On {task} the order by expected best validation score changes with the budget "
                         f"({order_text(half)} at half, {order_text(full)} at the full budget"
                         f"{f'; {TIE}' if any(len(g) > 1 for g in half + full) else ''})")
    return "".join(f"{s}. " for s in sentences).strip()
