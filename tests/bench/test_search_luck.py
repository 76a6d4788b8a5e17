"""The search's luck in `bench search`: every pick rule's spread (SD, IQR) over search seeds, checked against numpy;
racing the top three on extra trainings; half the epochs; the split term; the widening options. Tiny budgets."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pipeline.bench.problems import Problem, SplitTerm, declared
from pipeline.params import Range


def peaked(half: bool = False) -> Problem:
    """One learning rate, its best inside the box, observed with noise (with `half`: an epochs problem whose runs at
    half the epochs read 0.1 lower)."""
    search = {"lr_head": Range(0.01, 1.0, log=True)}

    def truth(parameters):
        return float(0.9 - 0.1 * (np.log10(parameters["lr_head"]) + 1) ** 2)

    def observe(parameters, rng):
        return truth(parameters) + rng.normal(0, 0.02)

    return Problem("peaked", "", search, {"lr_head": "float"}, truth, observe, 0.9, declared("erm"),
                   (lambda p, rng: observe(p, rng) - 0.1) if half else None)


@pytest.fixture(scope="module")
def quiet():
    from pipeline.library_logs import quiet_libraries

    quiet_libraries("/dev/null")


def test_a_race_keeps_three_trainings_back_and_picks_among_the_top_three_by_the_models_mean(quiet):
    """At k trainings the race's search stopped 3 short: its contenders are the top 3 of the GP fitted then, and the
    winner has the best mean of its search trial and its one extra training; race-observed races the top 3 by
    observed value."""
    from pipeline.bench.search import PICKS, run_search

    run = run_search(peaked(), "gp", 0, 7, 5, (7,))
    assert set(run.picks) == {"model", "lower", "race", "race-observed"} <= set(PICKS)
    searched = run.fits[4]  # 7 - 3 trainings
    assert len(run.fits[7]) == 7 and len(searched) == 4
    top = [index for index, _, _ in sorted(searched, key=lambda row: -row[1])[:3]]
    assert run.picks["race"][7] in top
    by_observed = sorted(range(4), key=lambda i: -run.observed[i])[:3]
    assert run.picks["race-observed"][7] in by_observed
    assert run.picks["model"][7] == max(run.fits[7], key=lambda row: row[1])[0]
    assert run.picks["lower"][7] == max(run.fits[7], key=lambda row: row[1] - 1.96 * row[2])[0]
    assert run.true_value(7, "race") == run.truths[run.picks["race"][7]]
    assert math.isnan(run.true_value(3, "race"))  # no checkpoint there


def test_the_race_winner_has_the_best_mean_and_a_failed_training_puts_a_contender_out():
    from pipeline.search.racing import contenders, race_cost, race_winner

    assert contenders({0: 0.5, 1: 0.9, 2: 0.7, 3: 0.9}) == [1, 3, 2] and race_cost() == 3
    assert race_winner({1: [0.9, 0.6], 3: [0.9, 0.8], 2: [0.7, 0.7]}) == 3
    assert race_winner({1: [0.9, None], 3: [0.8, 0.7]}) == 3
    assert race_winner({1: [0.9, None], 3: [None]}) == 1
    assert race_winner({1: [0.8], 3: [0.8]}) == 1


def test_half_the_epochs_runs_twice_the_trials_and_races_on_whole_trainings_alone(quiet):
    from pipeline.bench.search import run_search, runnable

    run = run_search(peaked(half=True), "gp-lowfi", 0, 5, 4, (5,))
    assert len(run.truths) == 10 and run.trial_cost == 0.5 and run.trials_within(2) == 4
    assert all(value < 0.85 for value in run.observed)  # every trial read at half the epochs
    assert run.picks["race"][5] in range(4) and not runnable(peaked(), "gp-lowfi")
    with pytest.raises(ValueError):
        run_search(peaked(), "gp-lowfi", 0, 4, 1, (4,))


def test_the_spread_over_search_seeds_is_numpys_sd_and_interquartile_range():
    """summarise's SD (ddof 1) and IQR of each pick's true value, a seed without a pick left out."""
    from pipeline.bench.search import SearchRun, summarise

    rng = np.random.default_rng(0)
    runs = []
    for seed in range(7):
        truths = list(rng.uniform(0.5, 0.9, 8))
        run = SearchRun("p", "gp", seed, 1.0, 2, observed=list(rng.uniform(0, 1, 8)), truths=truths,
                        proposal_seconds=[0.1] * 8)
        run.picks = {"model": {8: int(rng.integers(8))} if seed else {}, "race": {8: 0}}
        runs.append(run)
    summaries = {s.pick: s for s in summarise(runs, (8,), {"p": 0.9})}
    observed = np.array([r.truths[r.observed_pick(8)] for r in runs])
    model = np.array([r.truths[r.picks["model"][8]] for r in runs[1:]])
    for pick, values in (("observed", observed), ("model", model)):
        s = summaries[pick]
        q25, q50, q75 = np.percentile(values, [25, 50, 75])
        assert s.sds[8] == pytest.approx(np.std(values, ddof=1)) and s.iqr(8) == pytest.approx(q75 - q25)
        assert s.quartiles[8][1] == pytest.approx(q50)
    assert summaries["race"].sds[8] == pytest.approx(np.std([r.truths[0] for r in runs], ddof=1))
    record = summaries["model"].record()["trainings"]["8"]
    assert record["values"][0] is None and record["sd"] == pytest.approx(np.std(model, ddof=1), abs=1e-6)


def test_the_json_gives_every_seeds_value_and_its_sd_and_iqr_with_a_split_term(cli):
    code, out, err = cli("bench", "search", "--problem", "hws-synthetic", "--strategy", "random", "--seeds", "3",
                         "--trials", "8", "--initial", "2", "--splits", "--format", "json")
    assert code == 0, err
    tables = json.loads(out)
    record = tables[0]["rows"][0]
    assert (record["strategy"], record["pick"], record["seeds"]) == ("random", "observed", 3)
    for k in ("5", "8"):
        values = np.array(record["trainings"][k]["values"])
        q25, q75 = np.percentile(values, [25, 75])
        assert record["trainings"][k]["sd"] == pytest.approx(np.std(values, ddof=1), abs=1e-6)
        assert record["trainings"][k]["iqr"] == pytest.approx(q75 - q25, abs=1e-6)
        assert record["trainings"][k]["median"] == pytest.approx(np.median(values), abs=1e-6)
    luck = tables[1]
    assert "luck" in luck["title"] and set(luck["rows"][0]) == {"strategy", "pick", "8"}
    assert any("base split of its own" in note for table in tables for note in table["notes"])

    code, out, err = cli("bench", "search", "--problem", "hws-synthetic", "--strategy", "random", "--seeds", "2",
                         "--trials", "8", "--initial", "2", "--format", "markdown")
    assert code == 0, err
    assert "| strategy | median at 8 | SD at 8 | IQR at 8 |" in out
    code, out, err = cli("bench", "search", "--pick", "luckiest")
    assert code == 2 and "unknown pick rule 'luckiest'" in err


def test_a_split_term_is_one_smooth_function_per_split_with_its_sd():
    problem = peaked()
    term = SplitTerm(0.01, 0.25)
    one, again = (term.draw(problem, np.random.default_rng(5)) for _ in range(2))
    points = [{"lr_head": float(x)} for x in np.geomspace(0.01, 1.0, 5)]
    assert [one(p) for p in points] == [again(p) for p in points]
    draws = [term.draw(problem, np.random.default_rng(seed))({"lr_head": 0.1}) for seed in range(2000)]
    assert np.std(draws) == pytest.approx(0.01, rel=0.1)
    assert abs(one({"lr_head": 0.1}) - one({"lr_head": 0.1001})) < 1e-4  # smooth


def test_the_configuration_by_split_term_is_recovered_from_a_table_of_runs(tmp_path):
    """split_sd's analysis of variance on a table with known parts: configuration-by-split SD 0.02, split 0.03,
    seed 0.01."""
    from pipeline.bench.problems import split_sd

    rng = np.random.default_rng(1)
    configs, splits, seeds = 60, 6, 3
    config_effect = rng.normal(0, 0.05, configs)
    split_effect = rng.normal(0, 0.03, splits)
    lines = ["# a test table", "config,split,seed,status,val_balanced_accuracy"]
    for c in range(configs):
        for s in range(splits):
            cell = 0.8 + config_effect[c] + split_effect[s] + rng.normal(0, 0.02)
            lines += [f"{c},{s},{t},completed,{cell + rng.normal(0, 0.01)}" for t in range(seeds)]
    lines.append(f"{configs},0,0,failed,")  # a configuration with a failed or collapsed run is left out
    lines += [f"{configs + 1},{s},{t},completed,{0.15 if (s, t) == (0, 0) else 0.8}" for s in range(splits)
              for t in range(seeds)]
    path = tmp_path / "splits.csv"
    path.write_text("\n".join(lines) + "\n")
    found = split_sd(path)
    assert found["configurations"] == configs and (found["splits"], found["seeds"]) == (splits, seeds)
    assert (found["collapsed"], found["completed"]) == (1, (configs + 1) * splits * seeds)
    assert found["interaction"] == pytest.approx(0.02, rel=0.15)
    assert found["seed"] == pytest.approx(0.01, rel=0.1)


def test_widening_by_two_and_never_at_an_end_where_a_trial_failed():
    from pipeline.search.bounds import widenings

    search = {"lr_head": Range(0.01, 0.2, log=True), "lr_backbone": Range(0.01, 0.2, log=True)}
    hparams = declared("erm")
    best = {"lr_head": 0.2, "lr_backbone": 0.01}
    assert [(w.parameter, w.after) for w in widenings(search, hparams, best, 3, 4)] == [
        ("lr_head", Range(0.01, 0.8, log=True)), ("lr_backbone", Range(0.0025, 0.2, log=True))]
    assert [(w.parameter, w.after) for w in widenings(search, hparams, best, 3, 4, factor=2.0)] == [
        ("lr_head", Range(0.01, 0.4, log=True)), ("lr_backbone", Range(0.005, 0.2, log=True))]
    failed = [{"lr_head": 0.199, "lr_backbone": 0.05}]  # failed on the head's upper end
    assert [w.parameter for w in widenings(search, hparams, best, 3, 4, failed=failed)] == ["lr_backbone"]


def test_a_search_that_widens_on_the_models_pick_or_by_two(quiet):
    """A lucky trial on the upper bound is the best observed, while its replicate there reads low: the study's rule
    widens there (x2: to 0.4, in Ax's own space), the model's pick lies inside and does not."""
    from pipeline.bench.search import AxSearch, known_strategy, widen_options

    assert widen_options("gp+widen-model-x2") == {"model", "x2"} and widen_options("gp") is None
    assert known_strategy("gp+widen-model-x2-safe") and not known_strategy("gp+widen-model-model")
    assert not known_strategy("gp+widen-wide") and not known_strategy("gp+model")
    box = {"lr_head": Range(0.01, 0.2, log=True)}
    flat = Problem("flat", "", box, {"lr_head": "float"}, lambda p: 0.8, lambda p, rng: 0.8, 0.8, declared("erm"))

    def widened(strategy):
        search, moved = AxSearch(flat, strategy, 0, 1), []
        for x, value in [(0.03, 0.70), (0.06, 0.80), (0.08, 0.81), (0.1, 0.80), (0.2, 0.66), (0.2, 0.83)]:
            search.index = search.client.attach_trial(parameters={"lr_head": x})
            search.parameters[search.index] = {"lr_head": x}
            moved += search.tell([value])
        return [(w.side, w.after) for w in moved], search.client._experiment.search_space.parameters["lr_head"].upper

    assert widened("sobol+widen-x2") == ([("upper", Range(0.01, 0.4, log=True))], pytest.approx(0.4))
    assert widened("sobol+widen-model") == ([], pytest.approx(0.2))
