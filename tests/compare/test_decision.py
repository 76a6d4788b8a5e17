"""The campaign's decisions (pipeline/compare/decision.py) against their definitions: the word read off the interval,
the interval against scipy's t interval at the Bonferroni level of the look's share, the exact rule without spread,
the rounds planned for power against statsmodels' power, futility only for what the budget cannot decide, the time
budget, replicates as the unit; and the whole procedure's false-positive rate simulated under the null."""
import math
import random

import pytest
from scipy import stats as scipy_stats

from dataclasses import replace

from pipeline.compare.decision import (Axis, Design, Outcome, decide, interval, pairs_needed, planned_pairs,
                                       searches_needed, spread, word)

BALANCED, RARE = "test_balanced_accuracy", "smallest_class_accuracy"
DESIGN = Design((BALANCED, RARE), {BALANCED: 0.01, RARE: 0.05}, seeds=5, seeds_per_round=5, max_seeds=30)


def campaign(rng: random.Random, truth: dict[str, float], pairs: int = 30, sd: float = 0.01,
             replicates: int = 1, search_sd: float = 0.0) -> dict:
    """Every method's runs on `pairs` pairs: a split effect every method shares, a method's true difference to ERM
    (`truth`, on balanced accuracy; five times it on the rare class), and noise (`sd`, five times on the rare class)."""
    values: dict = {m: {BALANCED: {}, RARE: {}} for m in truth}
    luck = {(m, r): rng.gauss(0, search_sd) for m in truth for r in range(replicates)}
    for r in range(replicates):
        for s in range(pairs):
            split = rng.gauss(0, 0.03)
            for m, delta in truth.items():
                values[m][BALANCED][(r, s)] = 0.85 + split + delta + luck[(m, r)] + rng.gauss(0, sd)
                values[m][RARE][(r, s)] = 0.5 + split + 5 * (delta + luck[(m, r)]) + rng.gauss(0, 5 * sd)
    return values


def test_the_word_is_read_off_the_interval():
    assert word(-0.015, 0.012, 0.01, (-0.009, 0.008)) is Outcome.EQUIVALENT  # the two one-sided tests' interval
    assert word(0.002, 0.008, 0.01) is Outcome.EQUIVALENT  # inside +-d, even though above 0
    assert word(-0.009, 0.009, 0.01) is Outcome.EQUIVALENT
    assert word(0.001, 0.03, 0.01) is Outcome.BETTER
    assert word(-0.03, -0.001, 0.01) is Outcome.WORSE
    assert word(-0.02, 0.005, 0.01) is Outcome.UNDECIDED
    assert word(None, None, 0.01) is Outcome.UNDECIDED


def test_a_look_draws_scipys_t_interval_at_the_bonferroni_level_of_its_share():
    rng = random.Random(3)
    values = campaign(rng, {"erm": 0.0, "a": 0.05, "b": 0.0}, pairs=5)
    design = Design((BALANCED, RARE), {BALANCED: 0.01, RARE: 0.05}, seeds=5, seeds_per_round=5, max_seeds=5)
    decisions = decide(values, ["erm", "a", "b"], design)
    assert decisions.looks == [5] and len(decisions.family) == 4 and decisions.next_pairs is None
    for (method, metric), cell in decisions.cells.items():
        differences = [values[method][metric][(0, s)] - values["erm"][metric][(0, s)] for s in range(5)]
        expected = scipy_stats.ttest_1samp(differences, 0.0).confidence_interval(1 - 0.05 / 4)  # all 5% at one look
        assert (cell.low, cell.high) == pytest.approx((expected.low, expected.high))
        assert cell.outcome is word(cell.low, cell.high, design.smallest_effect[metric])
    assert decisions.cells[("a", BALANCED)].outcome is Outcome.BETTER  # 5 points, noise of 1.4 on the difference


def test_each_look_spends_the_share_of_the_pairs_it_adds_and_the_shares_add_up_to_alpha():
    assert DESIGN.grid() == [5, 10, 15, 20, 25, 30]
    assert DESIGN.share(5, 0) == pytest.approx(0.05 * 5 / 30) and DESIGN.share(20, 5) == pytest.approx(0.05 * 15 / 30)
    looks = [0, 5, 20, 30]
    assert sum(DESIGN.share(b, a) for a, b in zip(looks, looks[1:])) == pytest.approx(0.05)
    rng = random.Random(5)
    values = campaign(rng, {"erm": 0.0, "close": 0.006}, pairs=30)
    decisions = decide(values, ["erm", "close"], DESIGN)
    first, second = decisions.looks[:2]
    cell = decisions.cells[("close", BALANCED)]  # decided at or after the second look: that look's share
    assert cell.pairs >= second and cell.level == pytest.approx(DESIGN.share(cell.pairs, decisions.looks[
        decisions.looks.index(cell.pairs) - 1]))
    assert cell.confidence == pytest.approx(1 - cell.level / 2)


def test_identical_runs_are_equivalent_and_a_constant_difference_goes_through_the_exact_test():
    erm = {BALANCED: {(0, s): 0.8 + 0.01 * s for s in range(10)}, RARE: {(0, s): 0.5 + 0.02 * s for s in range(10)}}
    same = {k: dict(v) for k, v in erm.items()}
    shifted = {k: {key: v + 0.03 for key, v in by_key.items()} for k, by_key in erm.items()}
    design = Design((BALANCED, RARE), {BALANCED: 0.01, RARE: 0.05}, seeds=5, seeds_per_round=5, max_seeds=10)
    decisions = decide({"erm": erm, "same": same, "shifted": shifted}, ["erm", "same", "shifted"], design)
    assert decisions.cells[("same", BALANCED)].outcome is Outcome.EQUIVALENT
    assert decisions.cells[("same", BALANCED)].exact and decisions.cells[("same", BALANCED)].pairs == 5
    shifted_cell = decisions.cells[("shifted", BALANCED)]
    # 3 points on every pair: never p = 0; the sign-flip test needs 2 / 2^n <= level / 4 cells: n >= 9 at 10 pairs
    assert shifted_cell.exact and shifted_cell.pairs == 10 and shifted_cell.outcome is Outcome.BETTER
    assert (shifted_cell.low, shifted_cell.high) == pytest.approx((0.03, 0.03))


def test_a_tie_on_one_metric_is_no_evidence_of_equivalence():
    # five pairs on which the method and ERM happen to score the same on the rare class (both 0 of 5 images) but
    # differ on the balanced accuracy: the rare class has no spread to test, so it stays undecided
    erm = {BALANCED: {(0, s): 0.80 + 0.01 * s for s in range(5)}, RARE: {(0, s): 0.0 for s in range(5)}}
    other = {BALANCED: {(0, s): 0.83 + 0.012 * s for s in range(5)}, RARE: {(0, s): 0.0 for s in range(5)}}
    erm[RARE][(0, 0)] = other[RARE][(0, 0)] = 0.2  # not every run the same: the metric stays in the family
    design = Design((BALANCED, RARE), {BALANCED: 0.01, RARE: 0.05}, seeds=5, max_seeds=10)
    cell = decide({"erm": erm, "m": other}, ["erm", "m"], design).cells[("m", RARE)]
    assert cell.outcome is Outcome.UNDECIDED and cell.low is None and "tied" in cell.why


def test_equal_count_differences_are_equal_despite_float_rounding():
    # 18/37 - 19/37 and 0/37 - 1/37 differ in the 17th digit as floats: no spread, so no t interval of width 1e-15
    erm = {RARE: {(0, 0): 1 / 37, (0, 1): 19 / 37}}
    other = {RARE: {(0, 0): 0 / 37, (0, 1): 18 / 37}}
    design = Design((RARE,), {RARE: 0.01}, seeds=2, seeds_per_round=2, max_seeds=2)
    cell = decide({"erm": erm, "m": other}, ["erm", "m"], design).cells[("m", RARE)]
    assert cell.exact and cell.outcome is Outcome.UNDECIDED


def test_a_metric_every_run_scored_the_same_on_leaves_the_family():
    rng = random.Random(1)
    values = campaign(rng, {"erm": 0.0, "a": 0.01}, pairs=5)
    for method in values:
        values[method][RARE] = {k: 0.0 for k in values[method][RARE]}  # nobody gets the rare class right
    design = Design((BALANCED, RARE), {BALANCED: 0.01, RARE: 0.05}, seeds=5, max_seeds=5)
    decisions = decide(values, ["erm", "a"], design, secondary=[BALANCED, RARE])
    assert decisions.constant == [RARE] and decisions.family == [("a", BALANCED)]
    assert decisions.cells[("a", BALANCED)].family == 1 and ("a", RARE) in decisions.secondary


def test_the_plan_asks_statsmodels_power_of_the_next_look():
    from statsmodels.stats.power import TTestPower

    s = spread([[0.02 + 0.01 * x for x in (-1.2, 0.3, 0.8, -0.5, 1.1, -0.4, 0.2)]])
    assert s.mean >= 0.01 / 2  # so the plan asks for power to show a difference of 1 point
    needed = pairs_needed(s, DESIGN, before=5, family=4, smallest=0.01)
    assert needed is not None and needed in DESIGN.grid()

    def power(n: int) -> float:  # statsmodels' one-sample t power at the level a look at n would have
        level = 0.05 * (n - 5) / 30 / 4
        return TTestPower().power(effect_size=0.01 / math.sqrt(s.within), nobs=n, alpha=level, alternative="two-sided")

    assert power(needed) >= 0.8 - 0.01
    earlier = [n for n in DESIGN.grid() if 5 < n < needed]
    assert not earlier or power(earlier[-1]) < 0.8 + 0.01


def test_rounds_go_on_only_for_open_cells_and_stop_when_decided():
    rng = random.Random(5)
    values = campaign(rng, {"erm": 0.0, "clear": 0.2, "close": 0.006}, pairs=30)
    decisions = decide(values, ["erm", "clear", "close"], DESIGN)
    assert decisions.pairs["clear"] == 5  # decided at the first look on both metrics: no more pairs
    assert all(decisions.cells[("clear", m)].outcome is Outcome.BETTER for m in (BALANCED, RARE))
    assert decisions.pairs["close"] > 5 and decisions.pairs["erm"] == decisions.pairs["close"]
    assert decisions.next_pairs is None and decisions.looks[0] == 5
    # the same values seen as the campaign sees them, with only the first round stored: the next round is planned
    first = {m: {k: {key: v for key, v in by_key.items() if key[1] < 5} for k, by_key in metrics.items()}
             for m, metrics in values.items()}
    planned = decide(first, ["erm", "clear", "close"], DESIGN, run_seconds={"erm": 2.0, "close": 3.0})
    assert planned.looks == [5] and planned.needing == ["close"] and planned.next_pairs == decisions.looks[1]
    assert planned.round_seconds == pytest.approx((2.0 + 3.0) * (planned.next_pairs - 5))


def test_futility_sets_aside_only_what_max_seeds_cannot_decide():
    rng = random.Random(2)
    # a true difference of half the smallest effect with much noise: neither equivalence nor a difference within 30
    values = campaign(rng, {"erm": 0.0, "a": 0.005}, pairs=30, sd=0.04)
    decisions = decide(values, ["erm", "a"], DESIGN)
    cell = decisions.cells[("a", BALANCED)]
    assert cell.outcome is Outcome.UNDECIDED and not cell.open
    assert cell.why.startswith(("set aside: max_seeds = 30 cannot decide it", "max_seeds = 30 reached"))
    assert cell.needed is None or cell.needed > 30


def test_the_time_budget_cuts_the_rounds():
    rng = random.Random(5)
    values = campaign(rng, {"erm": 0.0, "close": 0.006}, pairs=30)
    timed = Design(DESIGN.primary, DESIGN.smallest_effect, max_seeds=30, max_seconds=60.0)
    decisions = decide(values, ["erm", "close"], timed, run_seconds={"erm": 2.0, "close": 2.0})
    assert decisions.pairs["erm"] * 2 * 2.0 <= 60.0 and decisions.stopped in ("time", "decided")


def test_with_replicates_the_search_is_the_unit():
    rng = random.Random(9)
    values = campaign(rng, {"erm": 0.0, "a": 0.0}, pairs=5, replicates=3, search_sd=0.02)
    design = Design((BALANCED,), {BALANCED: 0.01}, seeds=5, max_seeds=5)
    cell = decide(values, ["erm", "a"], replace(design, searches=3, max_searches=3)).cells[("a", BALANCED)]
    means = [sum(values["a"][BALANCED][(r, s)] - values["erm"][BALANCED][(r, s)] for s in range(5)) / 5
             for r in range(3)]
    expected = scipy_stats.ttest_1samp(means, 0.0).confidence_interval(0.95)
    assert cell.units == 3 and (cell.low, cell.high) == pytest.approx((expected.low, expected.high))


@pytest.mark.parametrize("replicates, search_sd", [(1, 0.0), (3, 0.01)])
def test_no_true_difference_gives_a_wrong_word_at_most_at_the_nominal_rate(replicates, search_sd):
    # whole campaigns of ERM and three methods equal to it, the rounds as compare takes them: any "better" or
    # "worse" is wrong; the share of campaigns with one stays within Monte Carlo error of 5% (bench verdict measures
    # it on many more, and with the other words and intervals)
    rng, runs = random.Random(11 + replicates), 250
    design = Design((BALANCED, RARE), {BALANCED: 0.01, RARE: 0.05}, seeds=5, seeds_per_round=5, max_seeds=15)
    wrong = 0
    for _ in range(runs):
        values = campaign(rng, {"erm": 0.0, "a": 0.0, "b": 0.0, "c": 0.0}, pairs=15, replicates=replicates,
                          search_sd=search_sd)
        cells = decide(values, ["erm", "a", "b", "c"], replace(design, searches=replicates,
                                                               max_searches=replicates)).cells.values()
        wrong += any(c.outcome in (Outcome.BETTER, Outcome.WORSE) for c in cells)
    assert wrong / runs <= 0.05 + 3 * (0.05 * 0.95 / runs) ** 0.5


def test_equivalence_is_two_one_sided_tests_at_the_cells_level():
    # TOST at level l is the 1 - 2l interval inside +-d; reading it off the two-sided 1 - l interval is TOST at l/2
    rng = random.Random(21)
    erm = {BALANCED: {(0, s): 0.85 + rng.gauss(0, 0.01) for s in range(12)}}
    near = {BALANCED: {k: v + 0.002 + rng.gauss(0, 0.006) for k, v in erm[BALANCED].items()}}
    design = Design((BALANCED,), {BALANCED: 0.01}, seeds=12, seeds_per_round=12, max_seeds=12)
    cell = decide({"erm": erm, "near": near}, ["erm", "near"], design).cells[("near", BALANCED)]
    differences = [near[BALANCED][(0, s)] - erm[BALANCED][(0, s)] for s in range(12)]
    two_sided = scipy_stats.ttest_1samp(differences, 0.0).confidence_interval(1 - 0.05)
    one_sided_each = scipy_stats.ttest_1samp(differences, 0.0).confidence_interval(1 - 2 * 0.05)
    assert (cell.low, cell.high) == pytest.approx((two_sided.low, two_sided.high))
    assert cell.equivalence == pytest.approx((one_sided_each.low, one_sided_each.high))
    assert cell.outcome is word(cell.low, cell.high, 0.01, cell.equivalence)


def test_equal_search_means_are_equal_despite_float_rounding():
    # searches whose mean differences are equal counts (1/37 each way) differ in the 17th digit as floats: no spread,
    # so no t interval of width 1e-15 (and no false equivalent): the exact rule, which 3 searches cannot satisfy
    erm = {RARE: {(r, s): (19 if s else 1) / 37 for r in range(3) for s in range(2)}}
    other = {RARE: {(r, s): (18 if s else 0) / 37 for r in range(3) for s in range(2)}}
    design = Design((RARE,), {RARE: 0.05}, seeds=2, seeds_per_round=2, max_seeds=2, searches=3, max_searches=3)
    cell = decide({"erm": erm, "m": other}, ["erm", "m"], design).cells[("m", RARE)]
    assert cell.exact and cell.outcome is Outcome.UNDECIDED and cell.low is None


def test_yuens_trimmed_interval_is_scipys():
    from scipy.stats import mstats

    values = [0.01, 0.02, -0.01, 0.015, 0.03, -0.4, 0.0, 0.025, 0.012, 0.018]  # one collapsed pair
    mean, low, high, exact = interval([values], 0.95, trim=0.2)
    assert not exact and mean == pytest.approx(scipy_stats.trim_mean(values, 0.2))
    assert (low, high) == pytest.approx(tuple(mstats.trimmed_mean_ci(values, limits=(0.2, 0.2), alpha=0.05)))


def test_one_collapsed_run_does_not_undo_a_trimmed_decision():
    rng = random.Random(4)
    values = campaign(rng, {"erm": 0.0, "a": 0.03}, pairs=10)
    design = Design((BALANCED,), {BALANCED: 0.01}, seeds=10, seeds_per_round=10, max_seeds=10)
    clean = decide(values, ["erm", "a"], replace(design, trim=0.2)).cells[("a", BALANCED)]
    values["erm"][BALANCED][(0, 3)] = 0.3  # ERM's run on pair 3 collapsed: +55 points on that pair
    trimmed = decide(values, ["erm", "a"], replace(design, trim=0.2)).cells[("a", BALANCED)]
    plain = decide(values, ["erm", "a"], design).cells[("a", BALANCED)]
    assert clean.outcome is trimmed.outcome is Outcome.BETTER
    assert plain.outcome is Outcome.UNDECIDED  # the t interval over the pairs, its spread blown up by one pair


SEARCHES = Design((BALANCED, RARE), {BALANCED: 0.01, RARE: 0.05}, seeds=5, seeds_per_round=5, max_seeds=10,
                  searches=3, searches_per_round=2, max_searches=10, trim=0.2, search_cost=8)


def test_the_pilot_decides_nothing_and_plans_the_pairs_per_search_and_the_searches():
    assert SEARCHES.axis is Axis.SEARCHES and SEARCHES.search_grid() == [3, 5, 7, 9, 10]
    assert SEARCHES.search_share(3, 0) == 0  # the pilot spends nothing; the shares after it add up to alpha
    assert sum(SEARCHES.search_share(b, a) for a, b in [(3, 5), (5, 9), (9, 10)]) == pytest.approx(0.05)
    rng = random.Random(8)
    values = campaign(rng, {"erm": 0.0, "a": 0.02, "b": 0.0}, pairs=5, replicates=3, search_sd=0.005)
    decisions = decide(values, ["erm", "a", "b"], SEARCHES)
    assert decisions.looks == [3] and all(c.outcome is Outcome.UNDECIDED and c.open and c.low is None
                                          for c in decisions.cells.values())
    spreads = [(spread([[values[m][metric][(r, s)] - values["erm"][metric][(r, s)] for s in range(5)]
                        for r in range(3)], 0.2), SEARCHES.smallest_effect[metric])
               for m in ("a", "b") for metric in (BALANCED, RARE)]
    within = sum(s.within / d ** 2 for s, d in spreads) / 4
    between = sum(s.between / d ** 2 for s, d in spreads) / 4
    expected = 10 if between == 0 else max(5, min(10, round(math.sqrt(within / between * 8))))
    assert decisions.planned_pairs == planned_pairs(spreads, SEARCHES) == expected
    assert decisions.next_pairs == expected and decisions.needing == ["a", "b"]
    need = max(c.needed or 10 for c in decisions.cells.values())
    assert decisions.next_searches == min(n for n in SEARCHES.search_grid() if n > 3 and (n >= need or n == 10))
    assert decisions.round_searches == 3 * (decisions.next_searches - 3)  # every method's new searches
    assert decisions.round_runs == 3 * (decisions.next_searches * expected - 3 * 5)  # and the pilot's topped up


def test_the_searches_a_cell_needs_have_statsmodels_power_at_the_level_of_their_look():
    from statsmodels.stats.power import TTestPower

    s = spread([[0.02 + 0.01 * x + luck for x in (-1.2, 0.3, 0.8, -0.5, 1.1)] for luck in (0.0, 0.006, -0.004)])
    assert s.between > 0 and abs(s.mean) >= 0.005
    needed = searches_needed(s, SEARCHES, before=3, family=4, smallest=0.01, pairs=7)
    assert needed is not None

    def power(r: int) -> float:
        level = 0.05 * (r - 3) / max(r - 3, 7) / 4
        return TTestPower().power(effect_size=0.01 / math.sqrt(s.between + s.within / 7), nobs=r, alpha=level,
                                  alternative="two-sided")

    assert power(needed) >= 0.8 - 0.01
    earlier = [r for r in [*SEARCHES.search_grid(), *range(12, 201, 2)] if 3 < r < needed]
    assert not earlier or power(earlier[-1]) < 0.8 + 0.01


def test_rounds_of_searches_stop_for_decided_methods_and_erm_goes_on_with_the_open_ones():
    rng = random.Random(12)
    values = campaign(rng, {"erm": 0.0, "clear": 0.2, "close": 0.004}, pairs=10, replicates=10, search_sd=0.003)
    decisions = decide(values, ["erm", "clear", "close"], SEARCHES)
    assert decisions.looks[0] == 3 and len(decisions.looks) >= 2
    assert decisions.searches["clear"] == decisions.looks[1]  # decided at the first look after the pilot
    assert all(decisions.cells[("clear", m)].outcome is Outcome.BETTER for m in (BALANCED, RARE))
    assert decisions.searches["erm"] == decisions.searches["close"] >= decisions.searches["clear"]
    assert all(c.units == c.searches == decisions.searches[c.method] for c in decisions.cells.values())
