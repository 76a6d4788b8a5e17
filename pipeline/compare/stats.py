"""The statistics behind every comparison the tool prints: intervals over seeds, paired differences (by pair,
or by cluster when runs share a search), Holm's correction over a family of comparisons, the alpha-spending
rule that lets a campaign stop adding seeds early, and the probability of improvement.

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
    of the paired t test of a zero mean. With identical differences on every seed (no spread) the test
    is degenerate: p is 1 for a zero difference and 0 otherwise."""

    mean: float
    standard_error: float | None  # None from a single pair
    n: int
    p_value: float | None

    def half_width(self, confidence: float = CONFIDENCE) -> float | None:
        """The half-width of the t interval of the mean difference at `confidence`."""
        if self.standard_error is None:
            return None
        return t_quantile(0.5 + confidence / 2, self.n - 1) * self.standard_error


def paired_difference(a: Sequence[float], b: Sequence[float]) -> PairedDifference:
    """The paired t test of mean(a - b) = 0, a[i] and b[i] measured on the same seed."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired values need the same, non-zero length; got {len(a)} and {len(b)}")
    differences = [x - y for x, y in zip(a, b)]
    n = len(differences)
    if n < 2:
        return PairedDifference(differences[0], None, n, None)
    mean, spread = _spread(differences)
    standard_error = spread / math.sqrt(n)
    if standard_error == 0:
        return PairedDifference(mean, 0.0, n, 1.0 if mean == 0 else 0.0)
    from scipy.special import stdtr  # Student's t distribution function

    return PairedDifference(mean, standard_error, n, float(2 * stdtr(n - 1, -abs(mean) / standard_error)))


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


def spent_alpha(fraction: float, alpha: float = 1 - CONFIDENCE) -> float:
    """The Lan-DeMets O'Brien-Fleming-type spending function 2 - 2 Phi(z_(1 - alpha/2) / sqrt(t)): how much
    of the error rate may be spent by the time a fraction t of the maximum seeds has run. It spends little
    early (0.0056 of 0.05 at half the seeds), so a campaign that runs to the end keeps nearly the power of
    one that never looked early."""
    from scipy.special import ndtr, ndtri  # the normal distribution function and its inverse

    if fraction <= 0:
        return 0.0
    return float(2 - 2 * ndtr(ndtri(1 - alpha / 2) / math.sqrt(min(1.0, fraction))))


def look_alphas(looks: Sequence[int], alpha: float = 1 - CONFIDENCE) -> list[float]:
    """The error rate each look may spend: look k at n_k seeds of at most n_K gets
    spent_alpha(n_k / n_K) - spent_alpha(n_(k-1) / n_K). They sum to alpha, so testing each look at its
    own share keeps the chance of any false rejection over all looks at most alpha (a union bound,
    valid whatever the dependence between looks)."""
    if list(looks) != sorted(set(looks)) or not looks or looks[0] < 1:
        raise ValueError(f"looks must be increasing seed counts, got {list(looks)}")
    fractions = [n / looks[-1] for n in looks]
    spent = [spent_alpha(f, alpha) for f in fractions]
    return [spent[0]] + [b - a for a, b in zip(spent, spent[1:])]


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
    """The mean of `values` within each cluster, in the order the clusters first appear."""
    by_cluster: dict[int, list[float]] = {}
    for value, cluster in zip(values, clusters):
        by_cluster.setdefault(cluster, []).append(value)
    return [math.fsum(v) / len(v) for v in by_cluster.values()]


@dataclass(frozen=True)
class Improvement:
    """P(A > B): the share of paired runs where A beats B, ties counted half, with a percentile bootstrap
    interval over the units resampled (the pairs; the clusters' shares when there are clusters)."""

    probability: float
    low: float
    high: float
    units: int


BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 0  # fixed: a reading command prints the same interval every time


def probability_of_improvement(a: Sequence[float], b: Sequence[float], clusters: Sequence[int] | None = None,
                               confidence: float = CONFIDENCE) -> Improvement:
    """P(A > B) over paired runs (Bouthillier et al. 2021): each pair scores 1 when a > b, 1/2 on a tie, 0 otherwise,
    and the probability is the mean score, averaged within each cluster first when `clusters` is given. The
    interval is scipy.stats.bootstrap's percentile interval of that mean, resampling pairs (or clusters).
    The paired share, not rliable's Mann-Whitney form over all run pairs, because the runs are paired on split
    and seed: it asks how often the method beats ERM on the same data and initialisation."""
    import numpy as np
    from scipy.stats import bootstrap

    if len(a) != len(b) or not a:
        raise ValueError(f"paired values need the same, non-zero length; got {len(a)} and {len(b)}")
    scores = [1.0 if x > y else 0.5 if x == y else 0.0 for x, y in zip(a, b)]
    if clusters is not None:
        scores = cluster_means(scores, clusters)
    probability = math.fsum(scores) / len(scores)
    if len(scores) < 2 or len(set(scores)) == 1:  # nothing to resample: every unit scores the same
        return Improvement(probability, probability, probability, len(scores))
    interval = bootstrap((np.asarray(scores),), np.mean, confidence_level=confidence, method="percentile",
                         n_resamples=BOOTSTRAP_RESAMPLES, random_state=BOOTSTRAP_SEED).confidence_interval
    return Improvement(probability, float(interval.low), float(interval.high), len(scores))
