"""How often a verdict declares a difference that is not there when each method's search is repeated, and how
often it finds one that is.

First, the pooled test (every re-trained run of every search an independent pair, the verdict before 0.7.0)
against the clustered one (the search the unit, stats.clustered_difference, the verdict since): a method's value
on pair (search r, seed s) minus ERM's is search_luck[r] + noise[r, s], the search's luck drawn once per search
(which configuration it happened to pick) and shared by all its re-trained runs (`false_positive_rates`).

Second, the clustered test under the two ways search replicates take their seeds (CampaignConfig.replicate_seeds,
the split seeds from campaign_config.replicate_offsets): with a method-by-split interaction the difference on a
pair also carries split_effect[its split seed], drawn once per split seed (how much more this split favours the
method than ERM). Laid out "shared" (stored by 0.9.0 or before) replicate r's pair s is on split seed r + s, so
neighbouring replicates re-use each other's splits and their mean differences are correlated: the test, which
takes them as independent, is too sure. Laid out "apart", every pair of every replicate has a split of its own
(`layout_rates`). Torch-free; `tools/replicate_fpr.py` prints both grids.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from pipeline.compare.stats import PairedDifference, clustered_difference, paired_difference
from pipeline.spec.campaign_config import APART, SHARED, replicate_offsets


@dataclass(frozen=True)
class FalsePositives:
    """The share of simulated campaigns in which each test declared a difference at `alpha`."""

    replicates: int
    seeds: int
    search_sd: float  # the spread of a search's luck, in units of the run-to-run noise
    campaigns: int
    pooled: float
    clustered: float


def false_positive_rates(replicates: int, seeds: int, search_sd: float, campaigns: int = 2000,
                         alpha: float = 0.05, seed: int = 0) -> FalsePositives:
    """Simulate `campaigns` comparisons with no true difference and count each test's rejections at `alpha`."""
    rng = random.Random(seed)
    pooled = clustered = 0
    for _ in range(campaigns):
        differences, clusters = [], []
        for r in range(replicates):
            luck = rng.gauss(0.0, search_sd)
            for _ in range(seeds):
                differences.append(luck + rng.gauss(0.0, 1.0))
                clusters.append(r)
        zeros = [0.0] * len(differences)
        pooled += (paired_difference(differences, zeros).p_value or 1.0) < alpha
        clustered += (clustered_difference(differences, zeros, clusters).p_value or 1.0) < alpha
    return FalsePositives(replicates, seeds, search_sd, campaigns, pooled / campaigns, clustered / campaigns)


@dataclass(frozen=True)
class LayoutRates:
    """The share of simulated campaigns in which the clustered test declared the method better than ERM
    (`effect` > 0: its power) or declared any difference (`effect` = 0: its false-positive rate), under each
    layout of the replicates' seeds."""

    replicates: int
    seeds: int
    search_sd: float  # the spread of a search's luck, in units of the run-to-run noise
    split_sd: float  # the spread of the method-by-split interaction, in the same units
    effect: float  # the true difference, in the same units
    campaigns: int
    shared: float
    apart: float


def layout_rates(replicates: int, seeds: int, search_sd: float, split_sd: float, effect: float = 0.0,
                 campaigns: int = 2000, alpha: float = 0.05, seed: int = 0) -> LayoutRates:
    """Simulate `campaigns` comparisons, each under both layouts with the same luck, noise and split effects (a
    split seed both layouts use has one effect), and count the clustered test's rejections at `alpha`."""
    rng = random.Random(seed)
    found = {SHARED: 0, APART: 0}
    clusters = [r for r in range(replicates) for _ in range(seeds)]
    for _ in range(campaigns):
        luck = [rng.gauss(0.0, search_sd) for _ in range(replicates)]
        noise = [rng.gauss(0.0, 1.0) for _ in clusters]
        split_effect: dict[int, float] = {}
        for layout in found:
            differences = []
            for r in range(replicates):
                split_base = replicate_offsets(r, layout)[0]
                for s in range(seeds):
                    split = split_base + s
                    if split not in split_effect:
                        split_effect[split] = rng.gauss(0.0, split_sd)
                    differences.append(effect + luck[r] + split_effect[split] + noise[r * seeds + s])
            found[layout] += _declared(clustered_difference(differences, [0.0] * len(differences), clusters),
                                       effect, alpha)
    return LayoutRates(replicates, seeds, search_sd, split_sd, effect, campaigns, found[SHARED] / campaigns,
                       found[APART] / campaigns)


def _declared(difference: PairedDifference, effect: float, alpha: float) -> bool:
    """Whether the test declares what counts: any difference without a true one, else the true one's sign."""
    if (difference.p_value or 1.0) >= alpha:
        return False
    return effect == 0 or (difference.mean > 0) == (effect > 0)
