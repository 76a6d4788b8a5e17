"""Each method's search luck and its collapsed runs (pipeline/compare/luck.py) against their definitions: the
variance of a method's searches beyond what their pairs explain, recovered from draws with a known luck, and the
collapse rule's threshold."""
import random
import statistics

import pytest

from pipeline.compare.luck import collapsed_runs, search_luck


def test_a_run_far_below_its_methods_median_collapsed_and_one_within_the_noise_did_not():
    runs = {(0, s): 0.95 + 0.005 * (s % 3) for s in range(9)}
    runs[(0, 4)] = 0.86  # 9 points below: within 10 points, not collapsed
    runs[(1, 0)] = 0.40
    assert collapsed_runs({"erm": runs}) == {"erm": {(1, 0)}}
    assert collapsed_runs({"few": {(0, 0): 0.9, (0, 1): 0.1}}) == {"few": set()}  # fewer than three runs


def test_search_luck_is_recovered_from_searches_with_a_known_luck():
    rng = random.Random(3)
    found = []
    for _ in range(30):
        scores = {}
        for r in range(8):
            luck = rng.gauss(0, 0.02)
            for s in range(6):
                scores[(r, s)] = 0.9 + luck + rng.gauss(0, 0.03)
        found.append(search_luck({"m": scores}, 0.0)["m"] ** 2)
    assert statistics.fmean(found) == pytest.approx(0.02 ** 2, rel=0.2)  # the variance, unbiased but floored at 0


def test_no_luck_without_two_searches_and_none_beyond_the_pairs_noise():
    one = {(0, s): 0.9 + 0.01 * s for s in range(5)}
    assert search_luck({"m": one}, 0.2) == {}
    same = {(r, s): 0.9 + 0.01 * s for r in range(4) for s in range(5)}  # every search alike
    assert search_luck({"m": same}, 0.2) == {"m": 0.0}
