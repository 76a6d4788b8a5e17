"""Tuned values on a bound of their range, checked against the position worked out by hand."""
import math

from pipeline.search.bounds import BoundFlag, bound_flags
from pipeline.params import Choice, Range


def flagged(search, parameters):
    return [(f.parameter, f.bound) for f in bound_flags(search, parameters)]


def test_linear_range_flags_values_within_two_percent_of_either_end():
    search = {"alpha": Range(0.0, 0.5)}  # 2% of the width is 0.01
    assert flagged(search, {"alpha": 0.0095}) == [("alpha", "lower")]  # 1.9% in
    assert flagged(search, {"alpha": 0.0105}) == []  # 2.1% in
    assert flagged(search, {"alpha": 0.4905}) == [("alpha", "upper")]  # 1.9% from the top
    assert flagged(search, {"alpha": 0.4895}) == []  # 2.1% from the top
    assert flagged(search, {"alpha": 0.5}) == [("alpha", "upper")]


def test_log_range_measures_the_position_in_log_scale():
    search = {"beta": Range(0.1, 1000.0, log=True)}  # 4 decades: 2% is 0.08 of a decade
    at = {share: 0.1 * 10 ** (4 * share) for share in (0.019, 0.021, 0.979, 0.981)}
    assert flagged(search, {"beta": at[0.019]}) == [("beta", "lower")]
    assert flagged(search, {"beta": at[0.021]}) == []
    assert flagged(search, {"beta": at[0.979]}) == []
    assert flagged(search, {"beta": at[0.981]}) == [("beta", "upper")]
    # 2% of the linear width (20) would flag beta = 15; in log scale it sits at 54% of the range
    assert (math.log(15) - math.log(0.1)) / (math.log(1000) - math.log(0.1)) > 0.5
    assert flagged(search, {"beta": 15.0}) == []


def test_integer_ranges_follow_the_same_rule():
    assert flagged({"T": Range(1, 15)}, {"T": 1}) == [("T", "lower")]
    assert flagged({"T": Range(1, 15)}, {"T": 2}) == []  # 1/14 = 7% in: only the bound itself on a short range
    assert flagged({"T": Range(1, 15)}, {"T": 15}) == [("T", "upper")]
    assert flagged({"epochs": Range(21, 60)}, {"epochs": 60}) == [("epochs", "upper")]
    assert flagged({"epochs": Range(1, 1000)}, {"epochs": 20}) == [("epochs", "lower")]  # 1.9% in


def test_choices_and_unsearched_or_missing_values_are_ignored():
    search = {"importance_sampling": Choice((False, True)), "loss": Choice(("ce", "ls")), "alpha": Range(0.0, 0.5)}
    assert bound_flags(search, {"importance_sampling": True, "loss": "ce", "beta": 0.0}) == []


def test_a_value_near_both_ends_of_a_narrow_range_is_on_the_nearer_one():
    search = {"lr_head": Range(0.01, 0.0101, log=True)}
    assert flagged(search, {"lr_head": 0.01}) == [("lr_head", "lower")]
    assert flagged(search, {"lr_head": 0.0101}) == [("lr_head", "upper")]


def test_the_flag_names_owner_value_bound_and_range():
    (flag,) = bound_flags({"lr_head": Range(0.01, 0.2, log=True), "T": Range(1, 3)}, {"lr_head": 0.2, "T": 2})
    assert flag == BoundFlag("lr_head", 0.2, "upper", 0.01, 0.2, True)
    assert flag.text("erm") == ("erm: lr_head = 0.2 sits on the upper bound of [0.01, 0.2]: its best may lie "
                                "outside; widen the range")
    assert BoundFlag("T", 1, "lower", 1, 15, False).text("s") == ("s: T = 1 sits on the lower bound of [1, 15]: "
                                                                  "its best may lie outside; widen the range")
