"""Campaigns of several tasks: tasks in the campaign file, the verdict across five tasks built from inserted records
against autorank's recorded numbers, scipy and scikit-posthocs on the same matrix, the critical difference against
Demsar's table, and the budget curves' estimator against a hand computation (tests/compare/test_campaign_tasks.py
trains real ones)."""
import itertools
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.compare.across_tasks import (MIN_TASKS, AcrossTasks, aggregate, across_reading, mann_whitney_share,
                                          rank_methods, take_across_tasks)
from pipeline.compare.budget_curves import BudgetCurve, budget_curve, budget_note, expected_max, order_at
from pipeline.spec.campaign_config import parse_campaign
from pipeline.store import Store
from pipeline.compare.verdict import METRICS
from helpers import DATA, ROBUST_TUNE, TWO_TASKS, rare_class_run, run_result, stored_before_rare_kept



def robust_tune(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([ROBUST_TUNE, *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "80", "OMP_NUM_THREADS": "1", **(env or {})})


# --- tasks in the campaign file ---------------------------------------------------------------------------------

def test_each_task_overrides_data_and_model_fields_and_names_its_studies_campaign_task_method():
    raw = {"name": "c", "methods": ["cb"], "data": {"name": "digits", "imbalance_keep": 0.1},
           "params": {"epochs": 1, "lr_head": {"low": 0.01, "high": 0.2}},
           "tasks": {"r3": {"data": {"imbalance_class": "3"}},
                     "r8": {"data": {"imbalance_class": "8"}, "model": {"backbone": "resnet18"}}}}
    campaign = parse_campaign(raw, "c.toml")
    tasks = dict(campaign.task_campaigns())
    assert list(tasks) == ["r3", "r8"]
    assert tasks["r3"].study("cb").name == "c.r3.cb" and tasks["r8"].study("erm").name == "c.r8.erm"
    assert tasks["r3"].studies["cb"].data.imbalance_class == "3" and tasks["r3"].studies["cb"].backbone == "small_cnn"
    assert tasks["r8"].studies["erm"].data.imbalance_class == "8" and tasks["r8"].studies["erm"].backbone == "resnet18"
    assert tasks["r8"].studies["erm"].data.imbalance_keep == 0.1  # what the task leaves is the campaign's [data]
    assert sorted(s.name for s in campaign.all_studies()) == ["c.r3.cb", "c.r3.erm", "c.r8.cb", "c.r8.erm"]
    assert set(campaign.to_dict()["tasks"]) == {"r3", "r8"} and "studies" not in campaign.to_dict()


def test_a_campaign_without_tasks_is_stored_and_fingerprinted_as_before():
    raw = {"name": "c", "methods": ["cb"], "params": {"epochs": 1, "lr_head": {"low": 0.01, "high": 0.2}}}
    campaign = parse_campaign(raw, "c.toml")
    assert campaign.tasks == {} and [t for t, _ in campaign.task_campaigns()] == [None]
    assert "tasks" not in campaign.to_dict() and set(campaign.to_dict()["studies"]) == {"erm", "cb"}
    assert campaign.task_campaigns()[0][1] is campaign
    from pipeline.spec.campaign_config import load_campaign

    old = stored_before_rare_kept(load_campaign(DATA / "old-trio.toml").settle_resplit(None))
    assert old.fingerprint() == "857ecf1b48274c7c"  # what 0.7.0 computed for the same file


@pytest.mark.parametrize("tables, problem", [
    ('[tasks.a.data]\nimbalance_class = "3"\n[tasks.a.data]\nimbalance_class = "8"', "not valid TOML"),
    ('[tasks.a.data]\nnope = 1', "tasks.a.data.nope: unknown field"),
    ('[tasks.a.model]\nlayers = 3', "tasks.a.model.layers: unknown field"),
    ('[tasks.a.params]\nepochs = 2', "tasks.a.params: a task overrides only [data] and [model]"),
    ('[tasks.a.data]\nimbalance_class = "3"\n[tasks.A.data]\nimbalance_class = "8"', "must differ in more than case"),
    ('[tasks.a.data]\nimbalance_class = "3"\n[tasks.b.data]\nimbalance_class = "3"', "the same data and model as"),
    ('[tasks."a.b".data]\nimbalance_class = "3"', "a task's name must be letters"),
    ('[tasks.a]', "must override [data] or [model] fields"),
    ('[tasks.a.data]\nimbalance_class = 3.5', "(task a, method erm): data.imbalance_class: must be"),
    ('[tasks.a.model]\nbackbone = "resnet99"', "unknown backbone"),
])
def test_a_bad_task_table_is_one_line_and_exit_2_and_creates_nothing(tmp_path, cli, tables, problem):
    text = TWO_TASKS.split("[tasks.rare3.data]")[0] + tables + "\n" + TWO_TASKS.split('imbalance_class = "8"\n')[1]
    path = tmp_path / "bad.toml"
    path.write_text(text)
    code, out, err = cli("compare", str(path), "--db", str(tmp_path / "c.db"), "--device", "cpu")
    assert code == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and problem in err and str(path) in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


# --- five tasks from inserted records, against the libraries ------------------------------------------------------

# per task, each method's test accuracy on seeds 0-2 (pair k the same split for all): cb leads on four tasks
FIVE = {
    "t1": {"erm": [0.70, 0.72, 0.71], "ls": [0.74, 0.73, 0.75], "cb": [0.80, 0.79, 0.81]},
    "t2": {"erm": [0.60, 0.61, 0.62], "ls": [0.63, 0.66, 0.64], "cb": [0.70, 0.69, 0.72]},
    "t3": {"erm": [0.50, 0.52, 0.51], "ls": [0.55, 0.53, 0.54], "cb": [0.58, 0.57, 0.60]},
    "t4": {"erm": [0.80, 0.82, 0.81], "ls": [0.83, 0.85, 0.84], "cb": [0.86, 0.88, 0.87]},
    "t5": {"erm": [0.40, 0.42, 0.41], "ls": [0.49, 0.48, 0.50], "cb": [0.45, 0.44, 0.46]},
}


@pytest.fixture(scope="module")
def five_tasks(tmp_path_factory) -> Path:
    """A stored five-task campaign of erm, ls and cb: studies, trials and re-trained runs inserted, nothing trained."""
    db = tmp_path_factory.mktemp("five") / "five.db"
    tasks = {t: {"data": {"imbalance_class": str(i)}} for i, t in enumerate(FIVE, start=1)}
    campaign = parse_campaign({"name": "five", "methods": ["ls", "cb"], "objective": "val_balanced_accuracy",
                               "params": {"epochs": 1, "lr_head": {"low": 0.01, "high": 0.2}},
                               "budget": {"trials": 4, "initial": 2}, "evaluate": {"seeds": 3}, "tasks": tasks},
                              "five.toml").settle_resplit(None)
    store = Store(str(db))
    store.save_campaign(campaign)
    counts = {str(c): 100 for c in range(10)} | {"3": 5}
    for task, config in campaign.task_campaigns():
        for method in config.methods:
            study = store.create_study(config.study(method))
            for index, score in enumerate([0.5, 0.7, 0.6, 0.8] if method == "cb" else [0.65, 0.66, 0.64, 0.67]):
                trial = store.start_trial(study.id, index, {"lr_head": 0.05}, 0, 0.1)
                store.complete_trial(trial, run_result({"val_balanced_accuracy": score}, settings={"method": method},
                                                        epoch_train_loss=[0.5], epoch_val_accuracy=[score]))
            for seed, value in enumerate(FIVE[task.removeprefix("five.")][method]):
                store.add_evaluation(study.id, "tuned", seed, 0, {}, rare_class_run(value, value / 2), counts)
    return db


def _matrix():
    """The per-task means of FIVE's test accuracy: tasks in rows, methods in columns."""
    import pandas as pd

    return pd.DataFrame([[sum(FIVE[t][m]) / 3 for m in ("erm", "ls", "cb")] for t in FIVE], columns=["erm", "ls", "cb"])


# autorank 1.3.0's numbers for _matrix() (force_mode="nonparametric"), from when it made this test: it is no dependency
# since it and baycomp install a top-level package named `tests`
AUTORANK = {"pvalue": 0.01499557682047766, "cd": 1.4822885537191792, "meanrank": {"cb": 1.2, "ls": 1.8, "erm": 3.0}}


def test_five_tasks_rank_as_autorank_scipy_and_scikit_posthocs_rank_the_same_matrix(five_tasks):
    import scikit_posthocs
    from scipy.stats import friedmanchisquare

    store = Store(str(five_tasks), create=False)
    result = take_across_tasks(store, store.require_campaign("five"))
    assert result.tasks == list(FIVE) and len(result.tasks) >= MIN_TASKS
    ranking = next(r for r in result.rankings if r.metric == "test_accuracy")
    matrix = _matrix()
    assert ranking.test == "friedman"
    assert ranking.statistic == pytest.approx(friedmanchisquare(*[matrix[m] for m in matrix]).statistic)
    assert ranking.statistic == pytest.approx(8.4)  # rank totals 15, 9, 6 over 5 tasks: 12/60 * 342 - 60
    assert ranking.p_value == pytest.approx(AUTORANK["pvalue"], rel=1e-12) and ranking.p_value < 0.05
    assert ranking.mean_ranks == pytest.approx(AUTORANK["meanrank"])
    assert ranking.critical_difference == pytest.approx(AUTORANK["cd"], rel=1e-12)
    nemenyi = scikit_posthocs.posthoc_nemenyi_friedman(matrix.to_numpy())
    separated = {frozenset((matrix.columns[i], matrix.columns[j])) for i, j in itertools.combinations(range(3), 2)
                 if nemenyi.iloc[i, j] < 0.05}
    assert {frozenset(pair) for pair in ranking.differ} == separated == {frozenset(("cb", "erm"))}
    assert ranking.differ == [("cb", "erm")]
    assert "Nemenyi separates cb > erm" in result.reading


DEMSAR_Q = [1.960, 2.343, 2.569, 2.728, 2.850, 2.949, 3.031, 3.102, 3.164]  # q_0.05 for k = 2 to 10


@pytest.mark.parametrize("k, q", list(enumerate(DEMSAR_Q, start=2)))
def test_the_critical_difference_is_demsars_table_5(k, q):
    """Demsar (2006), Table 5(a): q_0.05 of the two-tailed Nemenyi test for k methods; CD = q sqrt(k (k + 1) / 6N).
    His example: four methods over 14 data sets, CD 1.25."""
    rng = random.Random(k)
    scores = {f"t{t}": {f"m{m}": rng.random() for m in range(k)} for t in range(14)}
    ranking = rank_methods("test_accuracy", scores, [f"m{m}" for m in range(k)])
    if k == 2:  # two methods: the Wilcoxon signed-rank test, no critical difference
        assert ranking.test == "wilcoxon" and ranking.critical_difference is None
        return
    assert ranking.critical_difference == pytest.approx(q * math.sqrt(k * (k + 1) / (6 * 14)), abs=6e-4)
    if k == 4:
        assert round(ranking.critical_difference, 2) == 1.25


def test_five_tasks_aggregate_the_differences_to_erm_as_rliable_estimates_them(five_tasks):
    from scipy.stats import mannwhitneyu

    store = Store(str(five_tasks), create=False)
    result = take_across_tasks(store, store.require_campaign("five"))
    found = {(a.method, a.metric): a for a in result.aggregates}
    for method in ("ls", "cb"):
        a = found[(method, "test_accuracy")]
        differences = [sum(x - y for x, y in zip(FIVE[t][method], FIVE[t]["erm"])) / 3 for t in FIVE]
        assert a.difference == pytest.approx(sum(differences) / 5)
        # rliable's probability_of_improvement: per task Mann-Whitney U / (n m), averaged over tasks
        shares = [mannwhitneyu(FIVE[t][method], FIVE[t]["erm"], alternative="greater").statistic / 9 for t in FIVE]
        assert a.improvement == pytest.approx(sum(shares) / 5) == 1.0
        assert a.low <= a.difference <= a.high and a.low > 0 and a.tasks == 5
    assert "cb is above ERM over the tasks on test accuracy (+" in result.reading


def test_the_five_task_page_holds_a_critical_difference_diagram_per_metric_and_renders_in_chromium(five_tasks,
                                                                                                   tmp_path):
    page = robust_tune("report", "--verdict", "five", "--db", str(five_tasks), "--format", "html")
    assert page.returncode == 0, page.stderr
    assert 'id="picture-five-ranks-test_accuracy"' in page.stdout and 'id="picture-five-t5-budget"' in page.stdout
    from helpers import CHROMIUM, rendered

    if CHROMIUM is not None:  # .ci/run installs it; the page's own checks above hold without it
        (tmp_path / "five.html").write_text(page.stdout)
        dom = rendered(tmp_path / "five.html", tmp_path)
        assert int(dom["body"]["data-images"]) == len(dom["images"]) == 5 * 2 + len(METRICS)
        assert all(int(image["data-decoded"]) > 100 for image in dom["images"])
        assert any(c.startswith("Campaign five across its 5 tasks: mean rank") for c in dom["captions"])
    shown = robust_tune("report", "--verdict", "five", "--db", str(five_tasks))
    assert shown.returncode == 0 and "Friedman p=0.015, CD 1.48" in shown.stdout, shown.stdout
    assert max(len(line) for line in shown.stdout.splitlines()) <= 80


def test_the_stratified_bootstrap_resamples_within_tasks_and_keeps_rliables_tie_rule():
    same = aggregate("a", "m", {"t": ([0.5, 0.6], [0.5, 0.6])})
    assert (same.difference, same.low, same.high) == (0.0, 0.0, 0.0)
    assert same.improvement == 0.5  # rliable: identical runs score a half; resampled apart, they may differ
    assert same.improvement_low < 0.5 < same.improvement_high
    assert mann_whitney_share([1.0, 2.0], [2.0, 0.0]) == pytest.approx((0.5 + 1 + 0 + 1) / 4)
    mixed = aggregate("a", "m", {"t1": ([0.9, 0.8, 0.7], [0.5, 0.6, 0.9]), "t2": ([0.1, 0.2, 0.3], [0.2, 0.2, 0.2])})
    assert mixed == aggregate("a", "m", {"t1": ([0.9, 0.8, 0.7], [0.5, 0.6, 0.9]),
                                         "t2": ([0.1, 0.2, 0.3], [0.2, 0.2, 0.2])})  # seeded: the same every time
    assert mixed.low < mixed.difference < mixed.high


@pytest.mark.parametrize("tasks", [5, 20])
def test_two_methods_over_tasks_take_scipys_two_sided_wilcoxon_test_at_its_nominal_rate(tasks):
    """2,000 sets of `tasks` tasks, two methods with no true difference: each ranking's test is scipy's two-sided
    Wilcoxon signed-rank test on the per-task scores, and it declares a difference in at most 5% of the sets (within
    3 Monte Carlo standard errors). autorank's one-sided test, in the direction of the larger median, declared one in
    about 5.5% at 5 tasks and 10% at 20."""
    from scipy.stats import wilcoxon

    rng, sets, declared = random.Random(tasks), 2000, 0
    for k in range(sets):
        scores = {f"t{i}": {"erm": rng.gauss(0.7, 0.05), "cb": rng.gauss(0.7, 0.05)} for i in range(tasks)}
        ranking = rank_methods("test_accuracy", scores, ["erm", "cb"])
        assert ranking.test == "wilcoxon" and ranking.critical_difference is None
        if k % 10 == 0:  # against scipy directly, on every tenth set (scipy's test is most of the time)
            expected = wilcoxon([s["erm"] for s in scores.values()], [s["cb"] for s in scores.values()],
                                alternative="two-sided")
            assert (ranking.statistic, ranking.p_value) == pytest.approx((expected.statistic, expected.pvalue))
            assert bool(ranking.differ) == (expected.pvalue < 0.05)
        declared += bool(ranking.differ)
    assert declared / sets <= 0.05 + 3 * (0.05 * 0.95 / sets) ** 0.5


def test_two_methods_differ_by_the_side_their_signed_ranks_favour_and_five_tasks_are_said_too_few():
    ahead = {f"t{i}": {"erm": 0.5, "cb": 0.6 + 0.01 * i} for i in range(8)}  # cb ahead on all eight: p = 2 / 2^8
    ranking = rank_methods("test_accuracy", ahead, ["erm", "cb"])
    assert ranking.p_value == pytest.approx(2 / 2 ** 8) and ranking.differ == [("cb", "erm")]
    assert ranking.methods == ["cb", "erm"] and ranking.mean_ranks == {"erm": 2.0, "cb": 1.0}
    reading = across_reading(AcrossTasks("c", list(ahead), {}, [ranking], []))
    assert reading.startswith("On test accuracy the two methods differ over the tasks (two-sided Wilcoxon "
                              "signed-rank p = 0.008); cb > erm.")
    five = {t: s for t, s in list(ahead.items())[:5]}  # the same on five tasks: the smallest p is 2 / 2^5
    ranking = rank_methods("test_accuracy", five, ["erm", "cb"])
    assert ranking.p_value == pytest.approx(0.0625) and ranking.differ == []
    assert across_reading(AcrossTasks("c", list(five), {}, [ranking], [])) == (
        "On test accuracy the two-sided Wilcoxon signed-rank test detects no difference between the two methods "
        "over the tasks (p = 0.062); on 5 tasks where they differ it cannot go below p = 0.0625, so only more tasks "
        "could decide.")
    same = rank_methods("test_accuracy", {f"t{i}": {"erm": 0.5, "cb": 0.5} for i in range(5)}, ["erm", "cb"])
    assert (same.statistic, same.p_value, same.differ) == (None, 1.0, [])


# --- budget curves -------------------------------------------------------------------------------------------------

def test_expected_best_of_n_trials_is_dodge_et_al_s_estimator_by_hand_and_by_enumeration():
    scores = [0.5, 0.2, 0.9]
    assert expected_max(scores, 1) == pytest.approx(((0.2 + 0.5 + 0.9) / 3, 0.2867442))
    # n = 2: the best of two draws is 0.2 with 1/9, 0.5 with 4/9 - 1/9, 0.9 with 1 - 4/9
    mean, sd = expected_max(scores, 2)
    assert mean == pytest.approx((0.2 * 1 + 0.5 * 3 + 0.9 * 5) / 9)
    assert sd == pytest.approx(((0.04 * 1 + 0.25 * 3 + 0.81 * 5) / 9 - mean ** 2) ** 0.5)
    for n in (1, 2, 3, 4):
        draws = list(itertools.product(scores, repeat=n))
        assert expected_max(scores, n)[0] == pytest.approx(sum(max(d) for d in draws) / len(draws))
    assert expected_max(scores, 200)[0] == pytest.approx(0.9)
    curve = budget_curve("m", "val_accuracy", scores, [0.5, 0.2, 0.9], 3)
    assert curve.observed == (0.5, 0.5, 0.9) and curve.expected[1] == pytest.approx(mean)
    assert all(0.2 <= low <= e <= high <= 0.9 for low, e, high in zip(curve.low, curve.expected, curve.high))


def test_the_note_says_when_the_order_at_half_the_budget_is_not_the_order_at_the_full_budget():
    steady = budget_curve("steady", "val_accuracy", [0.60, 0.61, 0.62, 0.63], [0.6], 4)
    gambler = budget_curve("gambler", "val_accuracy", [0.20, 0.25, 0.30, 0.90], [0.3], 4)
    assert order_at([steady, gambler], 2) == [("steady",), ("gambler",)]
    assert order_at([steady, gambler], 4) == [("gambler",), ("steady",)]
    note = budget_note([steady, gambler])
    assert "changes with the budget: steady > gambler at 2 trials, gambler > steady at 4" in note
    assert "is the same at 2 and 4 trials" in budget_note([steady, budget_curve("low", "v", [0.1], [0.1], 4)])
    assert budget_note([steady]) == "" and isinstance(steady, BudgetCurve)


def _curve(method: str, at_half: float, at_full: float) -> BudgetCurve:
    """A curve over 4 trials with the given expected best at 2 (half the budget) and at 4."""
    expected = (at_half - 0.05, at_half, (at_half + at_full) / 2, at_full)
    return BudgetCurve(method, "val_accuracy", 4, 4, expected, expected, expected, expected)


def test_methods_that_swap_by_less_than_half_a_point_are_a_tie_and_by_two_points_a_change_of_order():
    swapped = [_curve("ls", 0.80005, 0.8), _curve("cb", 0.8, 0.80005)]  # 0.005 points apart, swapped
    assert order_at(swapped, 2) == order_at(swapped, 4) == [("ls", "cb")]  # take_verdict: no change to read out
    assert budget_note(swapped) == ("the order by expected best validation score is the same at 2 and 4 trials "
                                    "(ls = cb; = marks expected bests within 0.5 points of each other, a tie)")
    apart = [_curve("ls", 0.82, 0.8), _curve("cb", 0.8, 0.82)]  # 2 points apart, swapped
    assert order_at(apart, 2) == [("ls",), ("cb",)] and order_at(apart, 4) == [("cb",), ("ls",)]
    assert budget_note(apart).startswith("the order by expected best validation score changes with the budget: "
                                         "ls > cb at 2 trials, cb > ls at 4; a method that gains")
    joined = [_curve("ls", 0.82, 0.8), _curve("cb", 0.8, 0.80005), _curve("erm", 0.7, 0.7)]  # a lead becomes a tie
    assert budget_note(joined).startswith("the order by expected best validation score changes with the budget: "
                                          "ls > cb > erm at 2 trials, ls = cb > erm at 4 (= marks")


def test_reading_the_verdict_across_tasks_never_imports_torch_or_ax(five_tasks):
    probe = ("import sys\nfrom cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in ('torch', 'torchvision', 'ax') if m in sys.modules), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe, "report", "--verdict", "five", "--db", str(five_tasks),
                           "--format", "json"], capture_output=True, text=True, timeout=300)
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr
    assert '"test": "friedman"' in done.stdout  # the test on ranks ran, without torch
