"""The statistics behind every comparison the tool prints: intervals over seeds, paired differences (by pair,
or by cluster when runs share a search), Holm's correction over a family of comparisons, and the probability of
improvement with its exact interval. A campaign's decisions build on these in pipeline/compare/decision.py.

A comparison is over training seeds: two variants trained on the same seeds differ by d_s on seed s,
and the paired t test asks whether the mean of d_s is 0 (Student's t with n - 1 degrees of freedom,
from scipy.stats). Pure Python and scipy: no torch, so reading commands stay light.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

CONFIDENCE = 0.95  # the level of every interval and test, family-wise where a family is corrected
# Differences and means are rounded to this many decimals before they are compared or spread: accuracies are counts
# over a few images, and 18/37 - 19/37 and 0/37 - 1/37 differ in the 17th digit as floats, which a t interval would
# read as a spread of almost nothing (a p of 1e-31 where the exact p is 0.25).
DIGITS = 12


def rounded(value: float) -> float:
    """`value` at DIGITS decimals: equal counts stay equal after float arithmetic."""
    return round(value, DIGITS)


def t_quantile(probability: float, degrees_of_freedom: int) -> float:
    """Student's t quantile (scipy.special.stdtrit: the distribution's inverse, without scipy.stats' overhead)."""
    from scipy.special import stdtrit  # here: `report` without comparisons does not load scipy

    return float(stdtrit(degrees_of_freedom, probability))


def _spread(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation in floats (statistics.stdev computes in exact fractions: slow
    in the stopping rule's simulations)."""
    mean = math.fsum(values) / len(values)
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float | None]:
    """The mean and the half-width of its Student t interval (n - 1 degrees of freedom); no half-width
    from a single value."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, t_quantile(0.5 + confidence / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


@dataclass(frozen=True)
class PairedDifference:
    """The mean of paired differences a - b over n seeds, its standard error and the two-sided p-value
    of the paired t test of a zero mean. With identical differences on every seed (no spread) the t test
    is degenerate, and the exact sign test takes its place (`sign_test_p`): p is 1 for a zero difference, 2 / 2^n
    otherwise."""

    mean: float
    standard_error: float | None  # None from a single pair
    n: int
    p_value: float | None

    def half_width(self, confidence: float = CONFIDENCE) -> float | None:
        """The half-width of the t interval of the mean difference at `confidence`."""
        if self.standard_error is None:
            return None
        return t_quantile(0.5 + confidence / 2, self.n - 1) * self.standard_error


def sign_test_p(differences: Sequence[float]) -> float:
    """The exact two-sided sign test of a zero median (scipy's binomtest on the signs, ties dropped): it assumes
    nothing of the differences' shape, where a sign-flip (permutation) test assumes them symmetric. With every
    difference equal and non-zero it is 2 / 2^n, the smallest p n pairs can give; 1 when all are zero."""
    from scipy.stats import binomtest

    above = sum(d > 0 for d in differences)
    signed = above + sum(d < 0 for d in differences)
    return 1.0 if signed == 0 else float(binomtest(above, signed).pvalue)


def paired_difference(a: Sequence[float], b: Sequence[float]) -> PairedDifference:
    """The paired t test of mean(a - b) = 0, a[i] and b[i] measured on the same seed; the differences rounded
    (DIGITS), so that equal counts give no spread and the exact sign test."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired values need the same, non-zero length; got {len(a)} and {len(b)}")
    differences = [rounded(x - y) for x, y in zip(a, b)]
    n = len(differences)
    if n < 2:
        return PairedDifference(differences[0], None, n, None)
    mean, spread = _spread(differences)
    mean = rounded(mean)
    if len(set(differences)) == 1:  # no spread: the exact sign test (n equal differences: 2 / 2^n)
        return PairedDifference(mean, 0.0, n, sign_test_p(differences))
    standard_error = spread / math.sqrt(n)
    from scipy.special import stdtr  # Student's t distribution function

    return PairedDifference(mean, standard_error, n, float(2 * stdtr(n - 1, -abs(mean) / standard_error)))


def trimmed(values: Sequence[float], trim: float) -> tuple[float, float, int]:
    """Yuen's (1974) trimmed mean of `values`, its standard error and degrees of freedom: g = floor(trim * n) values
    cut from each end, the mean of the rest; the standard error from the winsorized variance (the cut values set to
    the nearest kept one), s_w / ((1 - 2 g / n) sqrt(n)); n - 2g - 1 degrees of freedom. At trim = 0 it is the mean
    and Student's t (one run in thirty that collapses leaves a trimmed mean where it was and a t interval useless)."""
    n = len(values)
    g = int(math.floor(trim * n + 1e-9))
    ordered = sorted(values)
    kept = ordered[g:n - g]
    mean = rounded(math.fsum(kept) / len(kept))
    if n < 2 or n - 2 * g < 2:
        return mean, math.nan, 0
    winsorized = [ordered[g]] * g + kept + [ordered[n - g - 1]] * g
    centre = math.fsum(winsorized) / n
    variance = math.fsum((v - centre) ** 2 for v in winsorized) / (n - 1)
    return mean, math.sqrt(variance) / ((1 - 2 * g / n) * math.sqrt(n)), n - 2 * g - 1


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979): sort ascending, multiply the i-th smallest (from
    0) by m - i, carry the running maximum, cap at 1. Rejecting where the adjusted p is below alpha keeps
    the chance of any false rejection in the family at most alpha, whatever the dependence between tests."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def simultaneous_confidence(family_size: int, alpha: float = 1 - CONFIDENCE) -> float:
    """The per-interval confidence that makes `family_size` intervals hold together with probability at
    least 1 - alpha (Bonferroni: each at 1 - alpha / m)."""
    return 1 - alpha / max(1, family_size)


def clustered_difference(a: Sequence[float], b: Sequence[float], clusters: Sequence[int]) -> PairedDifference:
    """The paired t test with the cluster as its unit: the mean of a[i] - b[i] within each cluster, then the
    one-sample t test of those cluster means (n = the number of clusters). A campaign's search replicates are
    the clusters: the runs re-trained from one search share that search's luck, so they are not independent
    pairs, and a test that counts them as such is too sure (see pipeline/compare/replicate_simulation.py)."""
    if not len(a) == len(b) == len(clusters) or not a:
        raise ValueError(f"paired values need the same, non-zero length; got {len(a)}, {len(b)}, {len(clusters)}")
    means = cluster_means([x - y for x, y in zip(a, b)], clusters)
    return paired_difference(means, [0.0] * len(means))


def cluster_means(values: Sequence[float], clusters: Sequence[int]) -> list[float]:
    """The mean of `values` within each cluster, in the order the clusters first appear, rounded (DIGITS): clusters
    of equal counts have equal means."""
    by_cluster: dict[int, list[float]] = {}
    for value, cluster in zip(values, clusters):
        by_cluster.setdefault(cluster, []).append(value)
    return [rounded(math.fsum(v) / len(v)) for v in by_cluster.values()]


@dataclass(frozen=True)
class Improvement:
    """P(A > B): the share of paired units where A beats B, ties counted half, with its Clopper-Pearson interval
    over the units (the pairs; the searches, each its own share, when there are several)."""

    probability: float
    low: float
    high: float
    units: int


def paired_improvement(a: Sequence[float], b: Sequence[float], clusters: Sequence[int] | None = None,
                       confidence: float = CONFIDENCE) -> Improvement:
    """P(A > B) over paired runs (Bouthillier et al. 2021): each pair scores 1 when a > b, 1/2 on a tie, 0 otherwise,
    averaged within each cluster first when `clusters` is given. The interval is Clopper-Pearson's exact binomial
    interval (statsmodels' proportion_confint, method "beta") on the score's sum over the units: it covers at
    least `confidence` at any share and any number of units, and is never of zero width (5 wins of 5: [48, 100]),
    where a percentile bootstrap over 5-10 pairs covers 40-67% for a share near 0.8-0.9. The paired share, not
    rliable's Mann-Whitney form over all run pairs, because the runs are paired on split and seed."""
    from statsmodels.stats.proportion import proportion_confint

    if len(a) != len(b) or not a:
        raise ValueError(f"paired values need the same, non-zero length; got {len(a)} and {len(b)}")
    scores = [1.0 if x > y else 0.5 if x == y else 0.0 for x, y in zip(a, b)]
    if clusters is not None:
        scores = cluster_means(scores, clusters)
    units = len(scores)
    wins = math.fsum(scores)
    low, high = proportion_confint(wins, units, alpha=1 - confidence, method="beta")
    low = 0.0 if wins == 0 else float(low)
    high = 1.0 if wins == units else float(high)
    return Improvement(wins / units, low, high, units)
