"""`bench verdict`: the generative model of a campaign's confirmation runs against its own definition (the split,
the seed, each method's search luck, the test images a pair's runs share, runs that collapse), the figures read off a
stored campaign, and whole simulated campaigns of the decision procedure through the real CLI: at a new campaign's
design, with a search's luck of 0.5 / 3 points and one run in 30 collapsing, the family-wise false-positive rate at
most 6%, every printed interval covering at least 93%, and 80% of the cells decided at twice the smallest effect."""
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from helpers import one_line, rare_class_run, robust_tune, snapshot
from pipeline.bench.verdict_model import (POINT, Model, default_model, draw_accuracies, estimate, expected_clipped,
                                          one_search, shared_share, with_figures)
from pipeline.spec.campaign_config import NEW_DESIGN, TRIM

MONTE_CARLO = 3  # a rate may pass its bound by this many Monte Carlo standard errors
COVERAGE = 0.93
METRICS = ("test_accuracy", "test_balanced_accuracy", "smallest_class_accuracy")


def only(model: Model, **figures: float) -> Model:
    """The model with every standard deviation 0, no binomial noise and no collapse, but the figures given."""
    zero = {name: {key: 0.0 for key in METRICS} for name in ("split_sd", "seed_sd", "interaction_sd", "search_sd",
                                                             "test_images")}
    for name, value in figures.items():
        zero[name] = {key: value for key in METRICS}
    return replace(with_figures(model, zero), collapse=(), image_correlation=0.0)


# --- the generative model ------------------------------------------------------------------------------------------

def test_the_binomial_noise_of_n_test_images_has_the_variance_p_1_minus_p_over_n():
    model = replace(only(default_model(1), test_images=20, level=0.3), max_searches=1, max_seeds=20_000)
    drawn = draw_accuracies(model, 0.0, np.random.default_rng(0))  # (metric, method, search, pair)
    values = drawn[2].ravel()
    assert set(np.round(values * 20, 9)) <= set(range(21))  # counts of 20 images
    assert values.mean() == pytest.approx(0.3, abs=0.005)
    assert values.var() == pytest.approx(0.3 * 0.7 / 20, rel=0.04)


def test_a_pairs_runs_share_their_test_images_as_the_copula_says():
    # each run keeps the binomial variance p(1 - p) / n, but two runs on the same images disagree less: the paired
    # difference's variance is 2 p(1 - p) / n (1 - phi), phi the copula's correlation of right-or-wrong on an image
    model = replace(only(default_model(1), test_images=37, level=0.7), image_correlation=0.6, max_searches=1,
                    max_seeds=20_000)
    drawn = draw_accuracies(model, 0.0, np.random.default_rng(7))[2]  # the rare class: (method, 1, pairs)
    assert drawn[0].var() == pytest.approx(0.7 * 0.3 / 37, rel=0.05)
    phi = shared_share(0.7, 0.6)
    assert 0.2 < phi < 0.6
    assert (drawn[1] - drawn[0]).var() == pytest.approx(2 * 0.7 * 0.3 / 37 * (1 - phi), rel=0.06)


def test_the_split_is_shared_by_a_pairs_methods_and_the_seed_is_each_runs_own():
    model = replace(only(default_model(2), split_sd=0.05), max_searches=1, max_seeds=5000)
    drawn = draw_accuracies(model, 0.0, np.random.default_rng(1))
    assert np.array_equal(drawn[:, 0], drawn[:, 1]) and np.array_equal(drawn[:, 0], drawn[:, 2])  # cancels
    assert drawn[2, 0].std() == pytest.approx(0.05, rel=0.05)  # the rare class, at 68%: nothing clipped
    model = replace(only(default_model(2), seed_sd=0.05), max_searches=1, max_seeds=5000)
    drawn = draw_accuracies(model, 0.0, np.random.default_rng(2))
    assert (drawn[2, 1] - drawn[2, 0]).std() == pytest.approx(0.05 * math.sqrt(2), rel=0.05)


def test_a_searchs_luck_is_one_shift_per_method_and_search_and_the_truth_moves_only_the_compared_methods():
    model = only(default_model(1))
    model = replace(model, metrics=tuple(replace(m, search_sd=(0.01, 0.04)) for m in model.metrics),
                    max_searches=4000, max_seeds=3)
    drawn = draw_accuracies(model, 2.0, np.random.default_rng(3))  # 2 smallest effects: +10 points on the rare class
    rare = drawn[2]  # (method, search, pair)
    assert np.all(rare[:, :, 0:1] == rare)  # the same value on every pair of a search
    assert rare[0, :, 0].std() == pytest.approx(0.01, rel=0.05) and rare[1, :, 0].std() == pytest.approx(0.04,
                                                                                                         rel=0.05)
    assert (rare[1] - rare[0]).mean() == pytest.approx(10 * POINT, abs=0.003)


def test_a_run_collapses_at_its_methods_rate_to_about_the_collapsed_level():
    model = replace(only(default_model(1)), collapse=(0.0, 0.1), max_searches=1, max_seeds=20_000)
    drawn = draw_accuracies(model, 0.0, np.random.default_rng(9))[1]  # balanced: (method, 1, pairs)
    fallen = drawn[1] < 0.7
    assert not np.any(drawn[0] < 0.7) and fallen.mean() == pytest.approx(0.1, abs=0.01)
    assert drawn[1][fallen].mean() == pytest.approx(model.metric("test_balanced_accuracy").collapsed, abs=0.01)


def test_the_default_is_the_digits_campaigns_and_a_new_campaigns_design():
    model = default_model(4)
    assert (model.searches, model.searches_per_round, model.max_searches) == (
        NEW_DESIGN["replicates"], NEW_DESIGN["replicates_per_round"], NEW_DESIGN["max_replicates"])
    assert (model.seeds, model.max_seeds, model.trim) == (NEW_DESIGN["seeds"], NEW_DESIGN["max_seeds"], TRIM)
    assert model.metric("smallest_class_accuracy").search_sd == (3 * POINT,) * 5
    assert model.metric("test_balanced_accuracy").search_sd == (0.5 * POINT,) * 5
    assert model.collapse == (1 / 30,) * 5 and model.image_correlation > 0


def test_the_expected_accuracy_of_a_clipped_normal_matches_draws():
    draws = np.clip(np.random.default_rng(4).normal(0.95, 0.04, 1_000_000), 0, 1)
    assert expected_clipped(0.95, 0.04) == pytest.approx(draws.mean(), abs=2e-4)
    assert expected_clipped(1.2, 0.0) == 1.0 and expected_clipped(0.5, 0.1) == pytest.approx(0.5)


def test_the_figures_estimated_from_runs_drawn_by_the_model_are_the_models():
    truth = with_figures(default_model(2), {"interaction_sd": {"smallest_class_accuracy": 3 * POINT}})
    truth = replace(truth, metrics=tuple(replace(m, search_sd=(0.005, 0.01, 0.02)) for m in truth.metrics),
                    max_searches=40, max_seeds=40)
    drawn = draw_accuracies(truth, 0.0, np.random.default_rng(5))
    keys = [(r, s) for r in range(40) for s in range(40)]
    values = {method: {m.key: dict(zip(keys, drawn[i, j].ravel().tolist())) for i, m in enumerate(truth.metrics)}
              for j, method in enumerate(truth.methods)}
    found = estimate(values, truth.methods, 40, {m.key: m.test_images for m in truth.metrics},
                     {m.key: m.smallest for m in truth.metrics}, truth.image_correlation)
    rare = next(m for m in found.metrics if m.key == "smallest_class_accuracy")
    assert rare.level == pytest.approx(0.68, abs=0.02)
    assert rare.split_sd == pytest.approx(8 * POINT, rel=0.1)
    assert math.hypot(rare.seed_sd * math.sqrt(2), max(rare.interaction_sd)) == pytest.approx(
        math.hypot(4 * POINT * math.sqrt(2), 3 * POINT), rel=0.15)  # seed and method-by-split together
    balanced = next(m for m in found.metrics if m.key == "test_balanced_accuracy")
    assert balanced.search_sd == pytest.approx((0.005, 0.01, 0.02), rel=0.3)  # each method's own luck (40 searches)
    assert found.collapse == pytest.approx((1 / 30,) * 3, abs=0.012)
    assert found.correlation == pytest.approx(0.5, abs=0.15)
    assert any("cannot tell them apart" in note for note in found.notes)


# --- whole campaigns through the CLI -------------------------------------------------------------------------------

def bench(*args: str) -> dict[str, list[dict]]:
    """`robust-tune bench verdict ARGS --format json`: its tables' records by the title's first word."""
    done = robust_tune("bench", "verdict", *args, "--format", "json", threads=1)
    assert done.returncode == 0, done.stderr
    return {table["title"].split()[0].rstrip(":"): table["rows"] for table in json.loads(done.stdout)}


@pytest.fixture(scope="module")
def new_design():
    """The issue's check: a new campaign's design, four methods, the digits' figures with a search's luck of 0.5 / 3
    points and one run in 30 collapsing (the defaults)."""
    return bench("--campaigns", "200", "--truth", "0", "--truth", "2", "--seed", "3")


@pytest.fixture(scope="module")
def one_search_each():
    """Two methods against ERM, one search each (rounds of 5 pairs up to 20), no search luck: its intervals are about
    the configurations, and hold."""
    return bench("--methods", "2", "--replicates", "1", "--max-seeds", "20", "--search-sd", "0", "--campaigns",
                 "200", "--truth", "0", "--truth", "1", "--truth", "2", "--seed", "1")


def within(rate: dict, bound: float) -> bool:
    """Whether a rate is at most `bound` give or take its Monte Carlo error."""
    return rate["value"] <= bound + MONTE_CARLO * rate["se"]


@pytest.mark.parametrize("tables", ["new_design", "one_search_each"])
def test_any_wrong_word_is_at_most_6_percent_with_no_true_difference(tables, request):
    errors = {row["truth"]: row for row in request.getfixturevalue(tables)["Wrong"]}
    assert within(errors[0.0]["any_wrong"], 0.06), errors[0.0]  # the family-wise false-positive rate
    assert all(within(row["any_wrong"], 0.06) for row in errors.values()), errors


def test_at_the_smallest_effect_a_false_equivalent_is_at_most_5_percent(one_search_each):
    errors = {row["truth"]: row for row in one_search_each["Wrong"]}
    assert within(errors[1.0]["false_equivalent"], 0.05), errors[1.0]


@pytest.mark.parametrize("tables", ["new_design", "one_search_each"])
def test_every_interval_the_verdict_prints_covers_at_least_93_percent(tables, request):
    shown = {(row["interval"], row["truth"]): row["coverage"] for row in request.getfixturevalue(tables)["Coverage"]}
    assert {kind for kind, _ in shown} == {"primary", "family", "secondary", "improvement", "mean"}
    low = {key: rate for key, rate in shown.items() if rate["value"] + 2 * rate["se"] < COVERAGE}
    assert not low, low


def test_at_a_new_campaigns_design_80_percent_of_cells_are_decided_at_twice_the_smallest_effect(new_design):
    at_two = [row for row in new_design["Power"] if row["truth"] == 2.0]
    assert len(at_two) == 8  # 4 methods x 2 primary metrics
    decided = sum(row["decided"]["value"] for row in at_two) / len(at_two)
    assert decided >= 0.8, [(row["method"], row["metric"], row["decided"]["value"]) for row in at_two]


def test_power_grows_with_the_true_difference(one_search_each):
    right: dict[tuple[str, str], dict[float, float]] = {}
    for row in one_search_each["Power"]:
        right.setdefault((row["method"], row["metric"]), {})[row["truth"]] = row["right"]["value"]
    assert len(right) == 4  # 2 methods x 2 primary metrics
    for cell, by_truth in right.items():
        assert by_truth[1.0] < by_truth[2.0], (cell, by_truth)
    assert all(by_truth[2.0] > 0.5 for by_truth in right.values()), right


def test_the_runs_used_stay_within_the_design_and_erm_trains_the_most(new_design, one_search_each):
    for tables, (searches, pairs) in ((new_design, (NEW_DESIGN["max_replicates"], NEW_DESIGN["max_seeds"])),
                                      (one_search_each, (1, 20))):
        used = {(row["method"], row["truth"]): (row["searches"]["value"], row["pairs"]["value"])
                for row in tables["Runs"]}
        assert all(1 <= s <= searches and 1 <= p <= pairs for s, p in used.values()), used
        assert all(used[("erm", truth)][0] >= used[(method, truth)][0] for method, truth in used), used


def test_the_table_fits_80_columns_and_says_the_figures_and_design_used():
    done = robust_tune("bench", "verdict", "--methods", "2", "--campaigns", "10", "--truth", "0", "--max-replicates",
                       "4", columns=80, threads=1)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Figures simulated (given)"), done.stdout
    assert all(len(line) <= 80 for line in done.stdout.splitlines()), done.stdout
    assert "rare class  primary  68.0      37    8.0   4.0        3.0     3.0     5.0" in done.stdout
    text = " ".join(done.stdout.split())
    assert "a pilot of 3 searches per method" in text and "up to 4" in text and f"{100 * TRIM:g}% trimmed" in text


# --- figures from a stored campaign ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A stored campaign of erm, cb and ls, one search each, 8 pairs drawn from the digits' model, nothing trained."""
    from pipeline.spec.campaign_config import parse_campaign
    from pipeline.store import Store

    folder = tmp_path_factory.mktemp("stored")
    db = folder / "c.db"
    campaign = parse_campaign({"name": "c", "methods": ["cb", "ls"], "objective": "val_balanced_accuracy",
                               "replicates": 1, "params": {"epochs": 1, "lr_head": {"low": 0.01, "high": 0.2}},
                               "budget": {"trials": 2, "initial": 1}, "evaluate": {"seeds": 8, "max_seeds": 8}},
                              "c.toml").settle_resplit(None).settle_design(None)
    store = Store(str(db))
    store.save_campaign(campaign)
    model = replace(default_model(2), max_searches=1, max_seeds=8, collapse=())
    drawn = draw_accuracies(model, 0.0, np.random.default_rng(6))
    train = {str(c): 100 for c in range(10)} | {"3": 5}
    test = {"test": {str(c): 40 for c in range(10)} | {"3": 37}}
    for j, method in enumerate(campaign.methods):
        study = store.create_study(campaign.study(method))
        for seed in range(8):
            accuracy, balanced, rare = (float(drawn[i, j, 0, seed]) for i in range(3))
            store.add_evaluation(study.id, "tuned", seed, 0, {}, rare_class_run(accuracy, rare, balanced=balanced),
                                 train, split_counts=test)
    return db


def test_from_a_stored_campaign_the_figures_are_its_runs_and_nothing_is_written(stored):
    before = snapshot(stored.parent)
    done = robust_tune("bench", "verdict", "--from", "c", "--db", str(stored), "--campaigns", "10", "--truth", "0",
                       "--format", "json", threads=1)
    assert done.returncode == 0, done.stderr
    tables = {table["title"].split()[0]: table for table in json.loads(done.stdout)}
    figures = tables["Figures"]
    assert "from campaign c, 8 pairs" in json.loads(done.stdout)[0]["title"]
    rare = next(row for row in figures["rows"] if row["metric"] == "smallest_class_accuracy")
    assert rare["test_images"] == 37 and len(rare["interaction_sd"]) == 2
    assert rare["search_sd"] == [0.03] * 3  # one search each: the digits campaigns' luck, said in the notes
    balanced = next(row for row in figures["rows"] if row["metric"] == "test_balanced_accuracy")
    assert balanced["test_images"] == round(100 / (9 / 40 + 1 / 37))  # K^2 / sum(1 / n_c)
    notes = " ".join(figures["notes"])
    assert "cannot tell them apart" in notes and "one search per method cannot measure it" in notes
    assert "1 search each; pairs 8" in notes  # the stored campaign's design
    assert {row["method"] for row in tables["Runs"]["rows"]} == {"erm", "cb", "ls"}
    assert snapshot(stored.parent) == before


def test_one_search_is_about_the_configurations_and_says_so():
    assert one_search(default_model(2)).design().max_searches == 1
    done = robust_tune("bench", "verdict", "--methods", "1", "--replicates", "1", "--campaigns", "10", "--truth",
                       "0", "--max-seeds", "5", threads=1)
    assert done.returncode == 0, done.stderr
    assert "cover the search's result, not the method's" in " ".join(done.stdout.split())


@pytest.mark.parametrize("args, problem", [
    (["--from", "nope"], "no campaign named 'nope'"),
    (["--from", "c", "--methods", "3"], "--methods: with --from"),
    (["--seed-sd", "rare=x"], "--seed-sd rare=x: give a number"),
    (["--split-sd", "worst=2"], "unknown metric 'worst'"),
    (["--primary", "balanced,balanced"], "each once"),
    (["--seeds", "10", "--max-seeds", "5"], "--seeds 10 is more than --max-seeds 5"),
    (["--level", "rare=120"], "over 100"),
    (["--format", "csv"], "unknown format 'csv'"),
])
def test_bad_input_is_one_line_and_exit_2_and_changes_nothing(stored, args, problem):
    before = snapshot(stored.parent)
    done = robust_tune("bench", "verdict", "--db", str(stored), "--campaigns", "10", *args)
    assert done.returncode == 2 and problem in one_line(done.stderr), done.stderr
    assert snapshot(stored.parent) == before
