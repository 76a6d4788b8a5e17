"""The false-positive rate of the verdict's test with repeated searches, pooled (before 0.7.0) and clustered
(since): a grid of searches, seeds and search luck, no true difference anywhere
(pipeline/compare/replicate_simulation.py).

    python tools/replicate_fpr.py [--campaigns 4000]
"""
from __future__ import annotations

import argparse
import time

from pipeline.compare.replicate_simulation import false_positive_rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=4000, help="simulated campaigns per cell")
    args = parser.parse_args()
    start = time.perf_counter()
    print(f"{'searches':>8} {'seeds':>5} {'search luck sd':>14} {'pooled':>7} {'clustered':>9}")
    for replicates in (2, 3, 5):
        for search_sd in (0.0, 0.5, 1.0, 2.0):
            rates = false_positive_rates(replicates, 5, search_sd, args.campaigns)
            print(f"{replicates:>8} {5:>5} {search_sd:>14.1f} {rates.pooled:>7.1%} {rates.clustered:>9.1%}")
    print(f"{args.campaigns} campaigns per cell, no true difference, alpha 5%; {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
