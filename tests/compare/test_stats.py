"""The statistics against their definitions: Holm by hand, the paired t test against scipy's, Bonferroni
intervals wider than unadjusted ones, the exact sign-flip test without spread, P(A > B) with Clopper-Pearson's
interval against statsmodels' and its coverage simulated."""
import math

import pytest
from scipy import stats as scipy_stats

from pipeline.compare.replicate_simulation import false_positive_rates, layout_rates
from pipeline.compare.stats import (clustered_difference, holm, mean_interval, paired_difference,
                                    paired_improvement, sign_test_p, simultaneous_confidence, trimmed)


def test_holm_against_a_hand_computation():
    # p sorted: 0.01 (x4 = 0.04), 0.02 (x3 = 0.06), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> running max 0.06)
    assert holm([0.04, 0.01, 0.03, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert holm([0.9, 0.8, 0.7]) == pytest.approx([1.0, 1.0, 1.0])  # capped at 1 (0.7 x 3 = 2.1)
    assert holm([]) == []


def test_holm_never_below_the_raw_p_and_never_above_bonferroni():
    raw = [0.001, 0.2, 0.03, 0.004, 0.5]
    for p, adjusted in zip(raw, holm(raw)):
        assert p <= adjusted <= min(1.0, len(raw) * p)


def test_paired_difference_is_scipys_paired_t_test():
    a, b = [0.91, 0.88, 0.93, 0.90, 0.89], [0.90, 0.85, 0.90, 0.91, 0.86]
    result = paired_difference(a, b)
    expected = scipy_stats.ttest_rel(a, b)
    assert result.p_value == pytest.approx(expected.pvalue)
    assert result.mean == pytest.approx(sum(a) / 5 - sum(b) / 5)
    interval = expected.confidence_interval(0.95)
    assert result.mean - result.half_width(0.95) == pytest.approx(interval.low)
    assert result.mean + result.half_width(0.95) == pytest.approx(interval.high)


def test_paired_difference_without_spread_or_with_one_pair():
    assert paired_difference([0.5, 0.6], [0.5, 0.6]).p_value == 1.0
    # no spread: the exact sign-flip test, 2 of the 2^n sign patterns as extreme (never p = 0)
    assert paired_difference([0.75, 0.5], [0.5, 0.25]).p_value == 0.5
    assert paired_difference([0.6] * 6, [0.5] * 6).p_value == pytest.approx(2 / 2 ** 6)
    # equal counts that differ in the 17th digit as floats: three differences of -1/37 are the exact sign test's 0.25,
    # not a t test's p of 1e-31
    a, b = [0 / 37, 18 / 37, 35 / 37], [1 / 37, 19 / 37, 36 / 37]
    assert len({x - y for x, y in zip(a, b)}) > 1  # as floats they differ
    assert paired_difference(a, b).p_value == pytest.approx(0.25)
    single = paired_difference([0.6], [0.5])
    assert single.p_value is None and single.half_width() is None
    with pytest.raises(ValueError):
        paired_difference([0.1, 0.2], [0.1])


def test_simultaneous_intervals_are_wider_than_unadjusted_ones():
    result = paired_difference([0.91, 0.88, 0.93, 0.90, 0.89], [0.90, 0.85, 0.90, 0.91, 0.86])
    family = 12
    assert simultaneous_confidence(family) == pytest.approx(1 - 0.05 / 12)
    assert result.half_width(simultaneous_confidence(family)) > result.half_width(0.95)
    assert simultaneous_confidence(1) == pytest.approx(0.95)


def test_mean_interval_is_the_t_interval():
    mean, half = mean_interval([0.80, 0.84, 0.86])
    sd = math.sqrt(((0.80 - mean) ** 2 + (0.84 - mean) ** 2 + (0.86 - mean) ** 2) / 2)
    assert half == pytest.approx(scipy_stats.t.ppf(0.975, 2) * sd / math.sqrt(3))


def test_clustered_difference_against_a_hand_computation():
    # two searches: differences 1, 2, 3 in the first (mean 2) and -1, 1 in the second (mean 0); the test is the
    # one-sample t test of the two cluster means, 2 and 0: mean 1, sd sqrt(2), se 1, t 1 on 1 degree of freedom
    a, b, clusters = [1.0, 2.0, 3.0, -1.0, 1.0], [0.0] * 5, [0, 0, 0, 1, 1]
    d = clustered_difference(a, b, clusters)
    assert d.n == 2 and d.mean == pytest.approx(1.0) and d.standard_error == pytest.approx(1.0)
    assert d.p_value == pytest.approx(2 * scipy_stats.t.sf(1.0, 1)) == pytest.approx(0.5)
    assert d.p_value == pytest.approx(scipy_stats.ttest_1samp([2.0, 0.0], 0.0).pvalue)


def test_probability_of_improvement_is_the_paired_share_with_ties_half_and_clopper_pearsons_interval():
    from statsmodels.stats.proportion import proportion_confint

    a, b = [0.9, 0.8, 0.7, 0.6, 0.5], [0.8, 0.8, 0.9, 0.5, 0.4]  # wins, tie, loss, win, win
    i = paired_improvement(a, b)
    assert i.probability == pytest.approx((1 + 0.5 + 0 + 1 + 1) / 5) and i.units == 5
    assert (i.low, i.high) == pytest.approx(proportion_confint(3.5, 5, alpha=0.05, method="beta"))
    clustered = paired_improvement(a, b, [0, 0, 1, 1, 1])  # shares 0.75 and 2/3, each search a unit
    assert clustered.probability == pytest.approx((0.75 + 2 / 3) / 2) and clustered.units == 2
    # every pair won: an interval all the same, never of zero width ([48, 100] for 5 of 5)
    every = paired_improvement([1.0] * 5, [0.0] * 5)
    assert every.probability == 1.0 and every.high == 1.0 and every.low == pytest.approx(0.0250 ** (1 / 5), abs=1e-4)
    assert every.low == pytest.approx(0.478, abs=1e-3)
    none = paired_improvement([0.0] * 5, [1.0] * 5)
    assert none.low == 0.0 and none.high == pytest.approx(1 - 0.478, abs=1e-3)


@pytest.mark.parametrize("pairs", [5, 10, 30])
@pytest.mark.parametrize("share", [0.5, 0.8, 0.9])
def test_p_improvement_interval_covers_at_least_95_percent(pairs, share):
    # the review's cases: the percentile bootstrap covered 67% (5 pairs, 0.8), 40% (5, 0.9) and 65% (10, 0.9)
    import random

    rng = random.Random(pairs * 100 + int(share * 10))
    runs, covered = 2000, 0
    for _ in range(runs):
        wins = [1.0 if rng.random() < share else 0.0 for _ in range(pairs)]
        i = paired_improvement(wins, [0.5] * pairs)
        covered += i.low <= share <= i.high
    assert covered / runs >= 0.95 - 3 * (0.05 * 0.95 / runs) ** 0.5


def test_with_search_luck_the_pooled_test_declares_false_differences_and_the_clustered_one_does_not():
    # no true difference; each search's luck as large as the run-to-run noise: counting the runs of one search as
    # independent pairs declares a difference far more often than 5%, the search as the unit does not
    rates = false_positive_rates(replicates=3, seeds=5, search_sd=1.0, campaigns=1500, seed=1)
    assert rates.pooled > 0.15
    assert rates.clustered <= 0.05 + 3 * (0.05 * 0.95 / 1500) ** 0.5
    without_luck = false_positive_rates(replicates=3, seeds=5, search_sd=0.0, campaigns=1500, seed=2)
    assert without_luck.pooled <= 0.05 + 3 * (0.05 * 0.95 / 1500) ** 0.5


def test_with_a_method_by_split_interaction_only_replicates_on_splits_of_their_own_keep_the_clustered_test_at_5():
    # no true difference; the method's difference to ERM moves by twice the run-to-run noise from split to split:
    # replicates re-using each other's splits (the layout stored by 0.9.0) declare a difference far more often
    # than 5%, replicates each on splits of its own do not; with a true difference the test finds it
    rates = layout_rates(replicates=5, seeds=5, search_sd=0.5, split_sd=2.0, campaigns=1500, seed=1)
    assert rates.shared > 0.15
    assert rates.apart <= 0.05 + 3 * (0.05 * 0.95 / 1500) ** 0.5
    power = layout_rates(replicates=5, seeds=5, search_sd=0.5, split_sd=0.5, effect=2.0, campaigns=300, seed=2)
    assert power.apart > 0.9


def test_the_sign_test_is_scipys_binomial_test_on_the_signs():
    differences = [0.02, 0.01, -0.005, 0.03, 0.0, 0.01, 0.02]  # 5 above, 1 below, one tie dropped
    assert sign_test_p(differences) == pytest.approx(scipy_stats.binomtest(5, 6).pvalue)
    assert sign_test_p([0.01] * 4) == pytest.approx(2 / 2 ** 4) and sign_test_p([0.0, 0.0]) == 1.0


def test_yuens_trimmed_mean_and_its_standard_error_are_scipys():
    from scipy.stats import mstats

    values = [0.91, 0.93, 0.35, 0.92, 0.95, 0.94, 0.90, 0.93, 0.92, 0.96]  # one collapsed run
    mean, se, df = trimmed(values, 0.2)
    assert mean == pytest.approx(scipy_stats.trim_mean(values, 0.2)) and df == 10 - 2 * 2 - 1
    assert se == pytest.approx(float(mstats.trimmed_stde(values, limits=(0.2, 0.2))))
    plain = trimmed(values, 0.0)
    assert plain[0] == pytest.approx(sum(values) / 10) and plain[1] == pytest.approx(scipy_stats.sem(values))
