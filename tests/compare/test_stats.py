"""The statistics against their definitions: Holm by hand, the paired t test against scipy's, Bonferroni
intervals wider than unadjusted ones, the alpha-spending shares summing to alpha."""
import math

import pytest
from scipy import stats as scipy_stats

from pipeline.compare.replicate_simulation import false_positive_rates, layout_rates
from pipeline.compare.stats import (Improvement, clustered_difference, holm, look_alphas, mean_interval,
                                    paired_difference, probability_of_improvement, simultaneous_confidence, spent_alpha)


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
    assert paired_difference([0.6, 0.7], [0.5, 0.6]).p_value == 0.0
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


def test_alpha_spending_shares_sum_to_alpha_and_grow_with_information():
    assert spent_alpha(1.0) == pytest.approx(0.05)
    assert spent_alpha(0.0) == 0.0
    shares = look_alphas([5, 10, 15, 20])
    assert sum(shares) == pytest.approx(0.05)
    assert all(share > 0 for share in shares)
    assert look_alphas([5]) == pytest.approx([0.05])  # one look: the whole rate
    with pytest.raises(ValueError):
        look_alphas([10, 5])


def test_obrien_fleming_spending_against_its_formula():
    # alpha(t) = 2 - 2 Phi(z_0.975 / sqrt(t)): at t = 1/2, z = 1.959964 * sqrt(2) = 2.771808, 2 - 2 Phi(z) = 0.005575
    assert spent_alpha(0.5) == pytest.approx(0.005575, abs=1e-6)
    assert spent_alpha(0.25) == pytest.approx(2 - 2 * scipy_stats.norm.cdf(1.959964 * 2), rel=1e-5)
    assert look_alphas([5, 10]) == pytest.approx([0.005575, 0.05 - 0.005575], abs=1e-6)


def test_clustered_difference_against_a_hand_computation():
    # two searches: differences 1, 2, 3 in the first (mean 2) and -1, 1 in the second (mean 0); the test is the
    # one-sample t test of the two cluster means, 2 and 0: mean 1, sd sqrt(2), se 1, t 1 on 1 degree of freedom
    a, b, clusters = [1.0, 2.0, 3.0, -1.0, 1.0], [0.0] * 5, [0, 0, 0, 1, 1]
    d = clustered_difference(a, b, clusters)
    assert d.n == 2 and d.mean == pytest.approx(1.0) and d.standard_error == pytest.approx(1.0)
    assert d.p_value == pytest.approx(2 * scipy_stats.t.sf(1.0, 1)) == pytest.approx(0.5)
    assert d.p_value == pytest.approx(scipy_stats.ttest_1samp([2.0, 0.0], 0.0).pvalue)


def test_probability_of_improvement_is_the_paired_share_with_ties_half_and_a_scipy_bootstrap_interval():
    from scipy.stats import bootstrap
    import numpy as np

    a, b = [0.9, 0.8, 0.7, 0.6, 0.5], [0.8, 0.8, 0.9, 0.5, 0.4]  # wins, tie, loss, win, win
    i = probability_of_improvement(a, b)
    assert i.probability == pytest.approx((1 + 0.5 + 0 + 1 + 1) / 5) and i.units == 5
    expected = bootstrap((np.array([1, 0.5, 0, 1, 1]),), np.mean, method="percentile", n_resamples=4000,
                         random_state=0).confidence_interval
    assert (i.low, i.high) == pytest.approx((expected.low, expected.high))
    assert i.low <= i.probability <= i.high and i == probability_of_improvement(a, b)  # the same every time
    clustered = probability_of_improvement(a, b, [0, 0, 1, 1, 1])  # shares 0.75 and 2/3, averaged
    assert clustered.probability == pytest.approx((0.75 + 2 / 3) / 2) and clustered.units == 2
    assert probability_of_improvement([1.0, 1.0], [0.0, 0.0]) == Improvement(1.0, 1.0, 1.0, 2)


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
