"""`bench search`'s problems with the best outside the declared box or before a cliff, and its searches that widen a
range as a study does: tiny budgets."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline.bench.problems import CHANCE, ERM_CUT_SPACE, Problem, cliff_synthetic, declared
from pipeline.params import Range


def erm_table(tmp_path):
    """A table as `tools/replay_trials.py --problem erm` writes it: a known function rising with both rates."""
    rng = np.random.default_rng(0)
    lines = ["# a test table", "config,lr_head,lr_backbone,seed,status,val_balanced_accuracy,error"]
    for config in range(24):
        head, backbone = 10 ** rng.uniform(np.log10(0.003), 0, size=2)
        truth = 0.9 + 0.02 * np.log10(head) + 0.01 * np.log10(backbone)
        lines += [f"{config},{head},{backbone},{seed},completed,{truth + rng.normal(0, 0.002):.4f},"
                  for seed in range(2)]
    path = tmp_path / "erm.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_outside_replay_searches_the_campaign_box_and_is_judged_against_the_best_beyond_it(tmp_path):
    """Searched over [0.01, 0.2] with learning rates soft on both ends, judged against the table box's best (which
    lies outside); beyond the table's box a point takes the value of the box's nearest point."""
    from pipeline.bench.problems import read_replay, replay_problem

    table = read_replay(erm_table(tmp_path))
    cut = replay_problem(table, "cut", "", ERM_CUT_SPACE)
    outside = replay_problem(table, "outside", "", ERM_CUT_SPACE, best_anywhere=True)
    assert outside.search == ERM_CUT_SPACE and outside.best > cut.best + 0.01
    assert outside.truth({"lr_head": 0.2, "lr_backbone": 0.2}) < outside.best - 0.01
    assert outside.truth({"lr_head": 3.2, "lr_backbone": 0.8}) == outside.truth({"lr_head": 1.0, "lr_backbone": 0.8})
    assert all(outside.declared[name].soft == "both" for name in ERM_CUT_SPACE)


def test_the_cliff_problem_fails_past_the_cliff_and_has_its_best_inside_just_before_it():
    problem = cliff_synthetic(0.017)
    rng = np.random.default_rng(0)
    before, past = ({"lr_head": head, "lr_backbone": 0.016, "beta": 3.0} for head in (0.18, 0.25))
    assert problem.observe(past, rng) is None and problem.truth(past) == CHANCE
    assert problem.observe(before, rng) is not None and problem.truth(before) > problem.best - 0.02
    assert problem.best > 0.9 and not problem.on_edge(before)
    assert problem.truth({"lr_head": 0.01, "lr_backbone": 0.016, "beta": 3.0}) < problem.best - 0.1


def rising() -> Problem:
    """One learning rate, its best far above the declared [0.01, 0.2]."""
    search = {"lr_head": Range(0.01, 0.2, log=True)}

    def truth(parameters):
        return float(0.5 + 0.1 * np.log10(min(parameters["lr_head"], 3.0) / 0.01))

    return Problem("rising", "", search, {"lr_head": "float"}, truth, lambda p, rng: truth(p), truth({"lr_head": 3.0}),
                   declared("erm"))


def test_a_search_with_widen_widens_the_soft_end_its_best_trial_sits_on_and_searches_beyond_it():
    """gp+widen on a value rising past the declared upper bound: the GP's best trial comes to the bound, the range
    widens (x4 on a log scale, as a study widens it) in Ax's own search space, held in memory (the benchmark's
    client has no storage), and proposals go past 0.2."""
    from pipeline.library_logs import quiet_libraries

    quiet_libraries("/dev/null")
    from pipeline.bench.search import AxSearch, run_search

    run = run_search(rising(), "gp+widen", 0, 8, 2, (8,))
    assert run.widened and run.widened[0][1:] == ("lr_head", "upper")
    assert max(run.truths) > rising().truth({"lr_head": 0.2}) + 0.01

    search = AxSearch(rising(), "sobol+widen", 0, 1)
    search.ask()
    search.parameters[search.index] = {"lr_head": 0.2}  # as if proposed on the bound
    moved = search.tell([0.9])
    assert [(w.side, w.after) for w in moved] == [("upper", Range(0.01, 0.8, log=True))]
    assert search.client._experiment.search_space.parameters["lr_head"].upper == pytest.approx(0.8)


def test_the_benchmark_names_a_widening_strategy_and_refuses_one_it_cannot_run():
    from pipeline.bench.search import known_strategy, strategy_order

    assert known_strategy("gp+widen") and known_strategy("random+widen") and known_strategy("gp-trust")
    assert not known_strategy("tpe+widen") and not known_strategy("gp+widen+widen") and not known_strategy("gp-x")
    assert strategy_order("gp") < strategy_order("gp+widen") < strategy_order("gp-rbf")
