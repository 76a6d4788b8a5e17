"""What varies between a method's searches and runs beyond the pairs' noise: each method's search luck (how far the
true value of the configuration one search finds moves from search to search), and the runs that collapsed.

A method's search luck is estimated from its own re-trained runs, not from its differences to ERM (which carry ERM's
luck too): each search's (trimmed) mean over its pairs varies across searches by the luck's variance plus what its
pairs' noise leaves in a mean; the pooled within-search spread says how much that is (one-way ANOVA, the between
part floored at 0). With one search per method there is nothing to estimate. Pure Python: no torch.
"""
from __future__ import annotations

import math
import statistics
from typing import Mapping

from pipeline.compare.decision import Key
from pipeline.compare.stats import trimmed

COLLAPSE_POINTS = 0.10  # a run this far (and COLLAPSE_SDS robust sds) below its method's median is called collapsed
COLLAPSE_SDS = 4.0


def collapsed_runs(by_method: Mapping[str, Mapping[Key, float]]) -> dict[str, set[Key]]:
    """Per method, its runs (of three or more) that collapsed: at least COLLAPSE_POINTS and COLLAPSE_SDS robust
    standard deviations (1.4826 x the median absolute deviation) below the median of its runs."""
    found: dict[str, set[Key]] = {}
    for method, scores in by_method.items():
        if len(scores) < 3:
            found[method] = set()
            continue
        middle = statistics.median(scores.values())
        robust_sd = 1.4826 * statistics.median(abs(v - middle) for v in scores.values())
        found[method] = {key for key, score in scores.items()
                         if middle - score > max(COLLAPSE_POINTS, COLLAPSE_SDS * robust_sd)}
    return found


def search_luck(by_method: Mapping[str, Mapping[Key, float]], trim: float) -> dict[str, float]:
    """Each method's search luck as a standard deviation (a fraction), from its runs keyed (search, pair): the
    methods with two or more searches of two or more runs each. Each search's unit is its trimmed mean (as the
    verdict's), the within-search variance the trimmed mean's (n times its squared standard error), pooled; the
    luck's variance is the units' variance less the mean of within / n over the searches (unequal n allowed)."""
    luck = {}
    for method, scores in by_method.items():
        by_search: dict[int, list[float]] = {}
        for (search, _), value in sorted(scores.items()):
            by_search.setdefault(search, []).append(value)
        searches = [values for values in by_search.values() if len(values) >= 2]
        if len(searches) < 2:
            continue
        fitted = [trimmed(values, trim) for values in searches]
        units = [mean for mean, _, _ in fitted]
        within = statistics.fmean([se * se * len(values) for (_, se, _), values in zip(fitted, searches)
                                   if not math.isnan(se)] or [0.0])
        noise = statistics.fmean([within / len(values) for values in searches])
        luck[method] = math.sqrt(max(0.0, statistics.variance(units) - noise))
    return luck
