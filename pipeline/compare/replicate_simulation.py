"""How often a verdict declares a difference that is not there when each method's search is repeated: the
pooled test (every re-trained run of every search an independent pair, the verdict before 0.7.0) against the
clustered one (the search the unit, stats.clustered_difference, the verdict since).

The simulated campaign has no true difference: a method's value on pair (search r, seed s) minus ERM's is
search_luck[r] + noise[r, s], the search's luck drawn once per search (which configuration it happened to
pick) and shared by all its re-trained runs. Torch-free; `tools/replicate_fpr.py` prints the grid.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from pipeline.compare.stats import clustered_difference, paired_difference


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
