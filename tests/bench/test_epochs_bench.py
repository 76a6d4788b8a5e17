"""`bench prefixes`: the epochs benchmark on the committed per-epoch curves at a tiny budget, through real Ax
(the study's own generation strategy) and the real CLI."""
import math
import re

import pytest

from pipeline.library_logs import quiet_libraries


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    quiet_libraries(str(tmp_path_factory.mktemp("log") / "robust-tune.log"))
    from pipeline.bench.prefixes import replay_problem

    return replay_problem()


SEEDS = (0,)  # one search seed: the rules checked hold seed by seed


@pytest.fixture(scope="module")
def runs(problem):
    from pipeline.bench.prefixes import VARIANTS, run_variant

    return {(variant, seed): run_variant(problem, variant, seed, budget=40, initial=3, min_epochs=2)
            for variant in VARIANTS for seed in SEEDS}


def test_the_truth_of_a_configuration_is_reproducible_and_grows_nowhere_past_one(problem):
    from pipeline.bench.prefixes import epochs_problem
    from pipeline.bench.problems import read_curves

    configuration = {"beta": 3.0, "lr_head": 0.05, "lr_backbone": 0.05, "epochs": 12}
    again = epochs_problem(read_curves())  # fitted anew
    assert problem.truth(configuration) == again.truth(configuration)
    assert 0.1 < problem.truth(configuration) <= problem.best <= 1.0
    assert problem.truth({**configuration, "epochs": 2}) != problem.truth(configuration)


def test_prefixes_tell_ax_more_observations_than_trials(runs):
    for seed in SEEDS:
        for variant in ("prefix", "both"):
            run = runs[variant, seed]
            assert run.observations[-1] > run.trials
        assert runs["plain", seed].observations[-1] <= runs["plain", seed].trials


def test_stopping_trains_fewer_epochs_per_trial_than_plain_from_the_same_seed(runs):
    for seed in SEEDS:
        plain, stop = runs["plain", seed], runs["stop", seed]
        assert plain.trained == plain.proposed
        assert all(t <= p for t, p in zip(stop.trained, stop.proposed)) and stop.trained != stop.proposed
        assert stop.trained[:3] == plain.trained[:3]  # the same Sobol start, too few curves to stop against
        assert stop.total_epochs[-1] / stop.trials < plain.total_epochs[-1] / plain.trials


def test_the_recommendation_is_a_true_value_recorded_after_every_trial(runs):
    for run in runs.values():
        assert run.total_epochs == sorted(run.total_epochs) and run.total_epochs[-1] >= 40
        assert all(0.0 <= v <= 1.0 for v in run.true_values if not math.isnan(v))
        assert not math.isnan(run.true_values[-1])


def test_bench_prefixes_prints_the_table_within_80_columns_and_draws_the_picture(tmp_path, cli):
    from typer.testing import CliRunner

    from cli.main import app

    picture = tmp_path / "epochs.png"
    result = CliRunner().invoke(app, ["bench", "prefixes", "--seeds", "1", "--budget", "30", "--initial", "2",
                                      "--variant", "plain", "--variant", "both", "--plot", str(picture)],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "epochs to plain's final" in result.output and "both" in result.output
    cell = re.compile(r"\d+\.\d \(\d+\.\d–\d+\.\d\)")
    rows = [line for line in result.output.splitlines() if line.startswith(("plain ", "both "))]
    assert [len(cell.findall(line)) for line in rows[:2]] == [4, 4]  # each row whole on one line of 80
    assert picture.read_bytes()[:4] == b"\x89PNG"
    code, _, err = cli("bench", "prefixes", "--variant", "nope")
    assert code == 2 and "unknown variant 'nope'" in err and "Traceback" not in err


def test_the_gps_pick_is_measured_once_at_each_checkpoint_reached(problem):
    """At each checkpoint the epochs trained reach, the GP's pick is measured once: a true value in the problem's
    range (none for a checkpoint past the budget)."""
    from pipeline.bench.prefixes import run_variant

    run = run_variant(problem, "prefix", 0, budget=30, initial=3, min_epochs=2, checkpoints=(15, 30, 500))
    assert sorted(run.model_values) == [15, 30]
    assert all(0.0 < value <= problem.best for value in run.model_values.values())
