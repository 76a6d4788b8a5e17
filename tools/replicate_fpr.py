"""The false-positive rate of the verdict's test with repeated searches, pooled (before 0.7.0) and clustered
(since), then the clustered test's false-positive rate and power with a method-by-split interaction, the
replicates' seeds laid out shared (stored by 0.9.0 or before) or apart (since)
(pipeline/compare/replicate_simulation.py).

    python tools/replicate_fpr.py [--campaigns 4000] [--effect 1.0] [--search-sd 0.5]
"""
from __future__ import annotations

import argparse
import time

from pipeline.compare.replicate_simulation import false_positive_rates, layout_rates

SEEDS = 5  # confirmation pairs per search


def pooled_against_clustered(campaigns: int) -> None:
    """The grid of searches and search luck, no split effect: the pooled test against the clustered one."""
    print(f"{'searches':>8} {'seeds':>5} {'search luck sd':>14} {'pooled':>7} {'clustered':>9}")
    for replicates in (2, 3, 5):
        for search_sd in (0.0, 0.5, 1.0, 2.0):
            rates = false_positive_rates(replicates, SEEDS, search_sd, campaigns)
            print(f"{replicates:>8} {SEEDS:>5} {search_sd:>14.1f} {rates.pooled:>7.1%} {rates.clustered:>9.1%}")


def shared_against_apart(campaigns: int, effect: float, search_sd: float) -> None:
    """The grid of searches and method-by-split spread: the clustered test under both seed layouts."""
    print(f"{'':>17} {'false positives':>15} {f'power at {effect:g}':>15}")
    print(f"{'searches':>8} {'split sd':>8} {'shared':>7} {'apart':>7} {'shared':>7} {'apart':>7}")
    for replicates in (2, 3, 5):
        for split_sd in (0.5, 1.0, 2.0):
            null = layout_rates(replicates, SEEDS, search_sd, split_sd, 0.0, campaigns)
            true = layout_rates(replicates, SEEDS, search_sd, split_sd, effect, campaigns, seed=1)
            print(f"{replicates:>8} {split_sd:>8.1f} {null.shared:>7.1%} {null.apart:>7.1%} {true.shared:>7.1%} "
                  f"{true.apart:>7.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=4000, help="simulated campaigns per cell")
    parser.add_argument("--effect", type=float, default=1.0, help="the true difference for the power, in units "
                                                                  "of the run-to-run noise")
    parser.add_argument("--search-sd", type=float, default=0.5, help="a search's luck with a split effect, in the "
                                                                     "same units")
    args = parser.parse_args()
    start = time.perf_counter()
    pooled_against_clustered(args.campaigns)
    print(f"{args.campaigns} campaigns per cell, no true difference, alpha 5%\n")
    shared_against_apart(args.campaigns, args.effect, args.search_sd)
    print(f"the clustered test, {SEEDS} seeds per search, search luck sd {args.search_sd:g}, alpha 5%;\n"
          "split sd: how much the method's difference to ERM moves from split to split;\n"
          f"power: declared better at a true difference of {args.effect:g} (all in units of the\n"
          f"run-to-run noise); {args.campaigns} campaigns per cell; {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
