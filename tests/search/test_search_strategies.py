"""Search strategies and noise-aware trials: the study file's [search] strategy and budget.seeds_per_trial,
through real Ax, real PyTorch and a real SQLite database; and `bench search` at a tiny size."""
import json
import math

import numpy as np
import pytest

from pipeline.bench.problems import Choice, gils_synthetic, hws_synthetic
from pipeline.store import Store
from pipeline.spec.study_config import load_study

STUDY = """
name = "{name}"
[data]
name = "digits"
[method]
name = "hws"
[params]
beta = {{ low = 0.1, high = 1000, log = true }}
importance_sampling = {{ values = [false, true] }}
epochs = {{ low = 1, high = 2 }}
{search}
[budget]
trials = {trials}
initial = 2
{budget}
"""


def study_file(tmp_path, name="s", search="", budget="", trials=3):
    path = tmp_path / f"{name}.toml"
    path.write_text(STUDY.format(name=name, search=search, budget=budget, trials=trials))
    return path


@pytest.mark.parametrize("strategy", ["gp", "sobol", "random"])
def test_each_strategy_proposes_within_bounds_and_types_and_is_reproducible_for_a_search_seed(strategy):
    from pipeline.library_logs import quiet_libraries

    quiet_libraries("/dev/null")
    from pipeline.bench.search import AxSearch

    for problem in (gils_synthetic(0.02), hws_synthetic(0.02)):
        proposals = []
        for _ in range(2):
            search, made = AxSearch(problem, strategy, seed=3, initial=2), []
            for _ in range(4):
                parameters = search.ask()
                search.tell([problem.truth(parameters)])
                made.append(parameters)
            proposals.append(made)
        assert proposals[0] == proposals[1]  # the same search seed, the same proposals
        for parameters in proposals[0]:
            for name, space in problem.search.items():
                value = parameters[name]
                if isinstance(space, Choice):
                    assert value in space.values
                else:
                    assert space.low <= value <= space.high
                    assert isinstance(value, int if problem.kinds[name] == "int" else float)
        other = AxSearch(problem, strategy, seed=4, initial=2)
        assert other.ask() != proposals[0][0]  # another seed, another first proposal


def test_a_random_search_study_never_fits_a_gp_and_is_stored_and_reported_as_such(tmp_path, cli):
    db = str(tmp_path / "runs.db")
    path = study_file(tmp_path, "rand", search='[search]\nstrategy = "random"', trials=4)
    code, out, err = cli("run", str(path), "--db", db, "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    stored = Store(db).study("rand")
    assert stored.study.strategy == "random"
    from pipeline.search import ax as search
    client = search.load_client(load_study(path), Store(db).url)
    nodes = {client._experiment.trials[i].generator_runs[0]._generation_node_name for i in range(4)}
    assert nodes and not any("BoTorch" in n for n in nodes)
    assert all(run._generator_key == "Uniform" for t in client._experiment.trials.values()
               for run in t.generator_runs)
    code, out, _ = cli("report", "rand", "--db", db, "--all-trials", "--format", "json")
    best, *_, trials = json.loads(out)
    assert best["rows"][0]["strategy"] == "random" and "search random" in trials["title"]
    code, out, err = cli("run", str(study_file(tmp_path, "rand", trials=4)), "--db", db, "--device", "cpu",
                         "--log-file", str(tmp_path / "ax.log"))  # the same study searched by the GP is another
    assert code == 2 and "strategy" in err and len(err.strip().splitlines()) == 1


def test_a_study_stored_before_search_strategies_is_the_same_study_searched_by_the_gp(tmp_path):
    study = load_study(study_file(tmp_path))
    stored = json.loads(json.dumps(study.to_dict()))
    del stored["strategy"], stored["budget"]["seeds_per_trial"]  # as 0.3.0 stored it
    from pipeline.spec.study_config import StudyConfig

    old = StudyConfig.from_dict(stored)
    assert old.strategy == "gp" and old.budget.seeds_per_trial == 1 and not old.differences(study)
    assert old.fingerprint() == study.fingerprint()  # a stored campaign's fingerprint keeps


@pytest.mark.parametrize("line, problem", [
    ('[search]\nstrategy = "tpe"', "search.strategy: must be one of gp, gp-rbf, gp-warp, gp-power, gp-centre, "),
    ('[search]\nstrategy = "gp"\nwhat = 1', "search.what: unknown field"),
    ("", "budget.seeds_per_trial: must be between 1 and 100, got 0"),
])
def test_a_bad_search_table_or_seed_count_is_one_line_and_exit_2(tmp_path, cli, line, problem):
    budget = "seeds_per_trial = 0" if not line else ""
    path = study_file(tmp_path, search=line, budget=budget)
    db = tmp_path / "runs.db"
    code, out, err = cli("run", str(path), "--db", str(db), "--device", "cpu")
    assert code == 2 and problem in err and len(err.strip().splitlines()) == 1 and not db.exists()


def test_seeds_per_trial_stores_every_seed_and_tells_ax_their_mean_and_standard_error(tmp_path, cli):
    db = str(tmp_path / "runs.db")
    path = study_file(tmp_path, "noisy", budget="seeds_per_trial = 2", trials=3)
    code, out, err = cli("run", str(path), "--db", db, "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    trials = Store(db).trials(Store(db).study("noisy").id)
    assert len(trials) == 3
    from pipeline.search import ax as search
    data = search.load_client(load_study(path), Store(db).url)._experiment.lookup_data().df
    for trial in trials:
        runs = trial.seed_runs
        assert [r.seed for r in runs] == [0, 1]
        values = [r.metrics["val_accuracy"] for r in runs]
        assert trial.metrics["val_accuracy"] == pytest.approx(np.mean(values))
        assert trial.train_seconds == pytest.approx(sum(r.train_seconds for r in runs))
        assert "train_seconds" not in trial.metrics and set(trial.examples) == {"val", "test"}
        row = data[(data.trial_index == trial.trial_index) & (data.metric_name == "val_accuracy")].iloc[0]
        assert row["mean"] == pytest.approx(np.mean(values), abs=1e-9)
        assert row["sem"] == pytest.approx(np.std(values, ddof=1) / math.sqrt(2), abs=1e-9)
    code, out, _ = cli("report", "noisy", "--db", db, "--all-trials", "--format", "json")
    assert "mean of 2 seeds" in json.loads(out)[-1]["title"]
    code, out, err = cli("run", str(study_file(tmp_path, "noisy", budget="seeds_per_trial = 3", trials=3)), "--db", db,
                         "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    assert code == 2 and "seeds_per_trial" in err  # another number of seeds is another study


def test_search_benchmark_prints_the_side_by_side_table_and_draws_the_picture(tmp_path, cli):
    picture = tmp_path / "search.png"
    code, out, err = cli("bench", "search", "--trials", "4", "--initial", "2", "--seeds", "2",
                         "--problem", "hws-synthetic", "--strategy", "gp", "--strategy", "random",
                         "--strategy", "tpe", "--plot", str(picture), "--format", "markdown")
    assert code == 0, err
    assert "**hws-synthetic** (best possible" in out or "**hws-synthetic: best possible" in out
    for strategy in ("| gp |", "| gp (model) |", "| random |", "| tpe |"):
        assert strategy in out
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out, err = cli("bench", "search", "--problem", "nope")
    assert code == 2 and "unknown search problem 'nope'" in err
    code, out, err = cli("bench", "search", "--plot", str(picture))
    assert code == 2 and "already exists" in err


def write_table(path, fail: bool):
    """A table as tools/replay_trials.py writes it: 24 configurations x 2 seeds of a known function."""
    rng = np.random.default_rng(0)
    lines = ["# a table written as tools/replay_trials.py writes it",
             "config,beta,importance_sampling,lr_head,lr_backbone,seed,status,val_balanced_accuracy,error"]
    for config in range(24):
        beta, lr = 10 ** rng.uniform(-1, 3), 10 ** rng.uniform(-2, np.log10(0.2))
        truth = 0.9 - 0.4 * (np.log10(beta) - 1) ** 2 / 4
        for seed in range(2):
            failed = fail and config == 0 and seed == 1
            value = "" if failed else f"{truth + rng.normal(0, 0.01):.4f}"
            lines.append(f"{config},{beta},{config % 2 == 0},{lr},{lr},{seed},{'failed' if failed else 'completed'},"
                         f"{value},{'TrainingDiverged: x' if failed else ''}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_replay_reads_a_table_of_real_trials_and_replays_its_noise(tmp_path):
    from pipeline.bench.problems import HWS_REPLAY_SPACE, digits_hws_replay, read_replay, surrogate_check

    table = read_replay(write_table(tmp_path / "failed.csv", fail=True))
    assert table.values.shape == (24, 2) and np.isnan(table.values[0, 1]) and table.means[0] < table.values[0, 0]
    assert set(table.search) == set(HWS_REPLAY_SPACE)
    problem = digits_hws_replay(table)
    first = dict(zip(HWS_REPLAY_SPACE, (10.0, True, 0.05, 0.05)))
    assert abs(problem.truth(first) - 0.9) < 0.05  # the surrogate follows the table
    draws = [problem.observe(first, np.random.default_rng(seed)) for seed in range(20)]
    assert all(d is None or 0 <= d <= 1 for d in draws) and len({d for d in draws if d is not None}) > 1
    nearest_failed = {**first, "beta": float(10 ** (table.points[0, 0] * 4 - 1)),
                      "importance_sampling": bool(table.points[0, 1]), "lr_head": 0.01 * 20 ** table.points[0, 2],
                      "lr_backbone": 0.01 * 20 ** table.points[0, 3]}
    assert None in [problem.observe(nearest_failed, np.random.default_rng(seed)) for seed in range(20)]
    check = surrogate_check(read_replay(write_table(tmp_path / "clean.csv", fail=False)), folds=3)
    assert check["surrogate_rmse"] < check["constant_rmse"]


def test_the_models_pick_passes_over_one_lucky_outlier():
    """A smooth hill measured at 12 points, one far from the top measured high by luck: the best observed is the
    outlier; the study's GP (the one the tool fits) picks a trial near the top, as model_pick does from its store."""
    from pipeline.library_logs import quiet_libraries

    quiet_libraries("/dev/null")
    from ax.api.client import Client
    from ax.api.configs import RangeParameterConfig

    from pipeline.store import TrialRecord, model_pick
    from pipeline.search.surrogate import predict_tried

    client = Client(random_seed=0)
    client.configure_experiment(parameters=[RangeParameterConfig(name="x", bounds=(0.0, 1.0), parameter_type="float")])
    client.configure_optimization(objective="y")
    xs = np.linspace(0.0, 1.0, 12)
    values = 0.8 - 0.8 * (xs - 0.6) ** 2 + np.random.default_rng(1).normal(0, 0.005, 12)
    outlier = 1  # x = 0.09, truly about 0.59
    values[outlier] = 0.83
    for x, value in zip(xs, values):
        index = client.attach_trial(parameters={"x": float(x)})
        client.complete_trial(trial_index=index, raw_data={"y": float(value)})
    predictions = predict_tried(client._experiment, "y")
    assert set(predictions) == set(range(12)) and all(p["fitted_on"] == 12 for p in predictions.values())
    trials = [TrialRecord(i, i, "completed", {"x": float(x)}, 0, {"y": float(v)}, None, 1.0, 0.0, None,
                          predicted=predictions[i]) for i, (x, v) in enumerate(zip(xs, values))]
    assert max(trials, key=lambda t: t.metrics["y"]).trial_index == outlier  # the best observed: luck
    from pipeline.store import StudyRecord
    from pipeline.spec.study_config import StudyConfig

    study = StudyRecord(1, "s", "", StudyConfig(name="s", data=None, backbone="small_cnn", weights="none", method="erm",
                                               fixed={}, search={}, objective="y"), None)
    picked = model_pick(study, trials)
    assert picked.trial_index != outlier and abs(xs[picked.trial_index] - 0.6) < 0.15
    assert predictions[outlier]["mean"] < values[outlier]  # the model does not believe the lucky draw


def test_a_study_stores_its_models_pick_and_evaluate_and_best_take_it(tmp_path, cli):
    db = str(tmp_path / "runs.db")
    path = study_file(tmp_path, "picked", trials=4)
    code, out, err = cli("run", str(path), "--db", db, "--device", "cpu", "--log-file", str(tmp_path / "ax.log"),
                         "--trials", "2")
    assert code == 0, err
    code, out, err = cli("evaluate", "picked", "--db", db, "--pick", "model", "--seeds", "1")
    assert code == 2 and "no model's pick" in err and len(err.strip().splitlines()) == 1
    code, out, err = cli("run", str(path), "--db", db, "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    store = Store(db)
    trials = store.trials(store.study("picked").id)
    completed = [t for t in trials if t.status == "completed"]
    assert all(t.predicted is not None and t.predicted["fitted_on"] == len(completed) for t in completed)
    from pipeline.store import model_pick

    picked = model_pick(store.study("picked"), trials)
    code, out, _ = cli("report", "picked", "--db", db, "--format", "json")
    best, picks, importance = json.loads(out)  # importance: refused below 8 trials, with its note
    assert picks["rows"][0]["model_trial"] == picked.trial_index
    assert picks["rows"][0]["predicted_mean"] == pytest.approx(picked.predicted["mean"])
    code, out, _ = cli("best", "picked", "--db", db, "--pick", "model", "--format", "json")
    assert json.loads(out)["trial_index"] == picked.trial_index
    code, out, err = cli("evaluate", "picked", "--db", db, "--pick", "model", "--seeds", "1", "--device", "cpu")
    assert code == 0, err
    assert {run.trial_index for run in store.evaluations(store.study("picked").id)} == {picked.trial_index}


def test_the_gp_believes_a_collapsed_trial_where_axs_default_winsorising_did_not():
    """Twelve trials near 90% and one collapsed at 10%: Ax's default outcome transforms clip the 10% up to a
    quartile minus 1.5 interquartile ranges, so the model (and the map drawn from it) saw a good region there;
    the study's GP (gp_step, unclipped) predicts the collapse."""
    from pipeline.library_logs import quiet_libraries

    quiet_libraries("/dev/null")
    from ax.api.client import Client
    from ax.api.configs import RangeParameterConfig

    from pipeline.search.ax import gp_step
    from pipeline.search.surrogate import StudyModel

    client = Client(random_seed=0)
    client.configure_experiment(parameters=[RangeParameterConfig(name="beta", bounds=(0.1, 1000.0),
                                                                 parameter_type="float", scaling="log")])
    client.configure_optimization(objective="acc")
    rng = np.random.default_rng(0)
    for beta in np.geomspace(0.1, 100.0, 12):
        index = client.attach_trial(parameters={"beta": float(beta)})
        client.complete_trial(trial_index=index, raw_data={"acc": float(0.9 + rng.normal(0, 0.01))})
    index = client.attach_trial(parameters={"beta": 600.0})
    client.complete_trial(trial_index=index, raw_data={"acc": 0.1})
    experiment = client._experiment
    predicted = {}
    for winsorize in (True, False):
        step = gp_step(winsorize).generator_specs[0]
        step.fit(experiment=experiment, data=experiment.lookup_data())
        model = StudyModel(step.fitted_adapter, dict(experiment.search_space.parameters), "acc", experiment)
        predicted[winsorize] = model.predict([{"beta": 600.0}])[0][0]
    assert predicted[True] > 0.7  # what the map showed before
    assert predicted[False] < 0.3  # what the study's GP believes now


NEW_GP_STRATEGIES = ("gp-rbf", "gp-warp", "gp-power", "gp-centre", "gp-rbf-power-centre")


@pytest.mark.parametrize("strategy", NEW_GP_STRATEGIES)
def test_each_gp_strategy_runs_a_study_and_resumes_after_a_kill_with_the_same_proposals(tmp_path, strategy):
    """A real 3-trial study (2 initial trials, then the GP) searched by `strategy`, uninterrupted; and the same
    study killed after Ax proposed its GP trial, then resumed: the same proposals and results. The GP is the
    strategy's own (kernel, warping, outcome transform), and with `centre` the first trial is the box's centre."""
    from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel
    from helpers import completed_trials, start_run

    from pipeline.search.study import run_study

    line = f'[search]\nstrategy = "{strategy}"'
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    whole.mkdir(), killed.mkdir()
    path = study_file(whole, "s", search=line)
    run_study(load_study(path), str(whole / "runs.db"), "cpu", log_file=tmp_path / "ax.log")
    uninterrupted = completed_trials(whole / "runs.db", "s")
    assert len(uninterrupted) == 3

    path = study_file(killed, "s", search=line)
    run_study(load_study(path), str(killed / "runs.db"), "cpu", trials=2, log_file=tmp_path / "ax.log")
    process = start_run(path, killed / "runs.db", env={"ROBUST_TUNE_KILL_AT": "after-ask"})
    process.communicate()
    assert process.returncode == -9
    run_study(load_study(path), str(killed / "runs.db"), "cpu", log_file=tmp_path / "ax.log")
    assert completed_trials(killed / "runs.db", "s") == uninterrupted

    from pipeline.search import ax as search
    client = search.load_client(load_study(path), Store(str(killed / "runs.db")).url)
    experiment = client._experiment
    nodes = [trial.generator_runs[0]._generation_node_name for trial in experiment.trials.values()]
    assert "GP" in nodes[-1] or "BoTorch" in nodes[-1]
    if "centre" in strategy:
        assert nodes[0] == "CenterOfSearchSpace" and uninterrupted[0][0]["beta"] == pytest.approx(10.0)
    adapter = client._generation_strategy.fit(experiment=experiment)  # the model of the next proposal
    model = adapter.generator.surrogate.model
    kernel = model.covar_module.base_kernel if isinstance(model.covar_module, ScaleKernel) else model.covar_module
    assert isinstance(kernel, RBFKernel if "rbf" in strategy else MaternKernel)
    assert ("Warp" in type(getattr(model, "input_transform", None)).__name__) == ("warp" in strategy)
    transforms = [type(t).__name__ for t in adapter.transforms.values()]
    assert ("PowerTransformY" in transforms) == ("power" in strategy) and "Winsorize" not in transforms

    from pipeline.search.surrogate import predict_tried  # the model's pick came from this GP too, not the default's

    stored = [(t.predicted["mean"], t.predicted["sd"]) for t in Store(str(killed / "runs.db")).trials(1)]
    own, default = ([(p["mean"], p["sd"]) for p in predict_tried(experiment, "val_accuracy", name).values()]
                    for name in (strategy, "gp"))
    assert np.allclose(stored, own, rtol=1e-6, atol=1e-9)
    if strategy != "gp-centre":  # the centre changes where the search starts, not the model
        assert not np.allclose(stored, default, rtol=1e-6, atol=1e-9)
    from pipeline.report.plots import load_studies  # and the pictures' parameter maps read the same GP

    (pictured,) = load_studies(Store(str(killed / "runs.db"), create=False), ["s"], tmp_path / "ax.log")
    covar = pictured.model.adapter.generator.surrogate.model.covar_module
    assert isinstance(covar.base_kernel if isinstance(covar, ScaleKernel) else covar,
                      RBFKernel if "rbf" in strategy else MaternKernel)


def test_a_study_stored_with_gp_resumes_with_gp_when_the_default_strategy_is_another(tmp_path, cli, monkeypatch):
    """A study file that names no strategy, run under the gp default, then resumed when the default is another
    strategy: it resumes as the same study (same fingerprint), its new trial proposed by the gp's own GP; a new
    study from the same file gets the new default; a campaign stored before keeps gp for its studies too."""
    from pipeline.spec import study_config
    from pipeline.spec.campaign_config import load_campaign

    db, path = str(tmp_path / "runs.db"), study_file(tmp_path, "kept", trials=3)
    code, out, err = cli("run", str(path), "--db", db, "--device", "cpu", "--log-file", str(tmp_path / "ax.log"),
                         "--trials", "2")
    assert code == 0, err
    fingerprint = Store(db).study("kept").study.fingerprint()
    monkeypatch.setattr(study_config, "DEFAULT_STRATEGY", "gp-rbf-power-centre")
    assert load_study(path).strategy == "gp-rbf-power-centre" and not load_study(path).strategy_given
    code, out, err = cli("run", str(path), "--db", db, "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    stored = Store(db).study("kept")
    assert stored.study.strategy == "gp" and stored.study.fingerprint() == fingerprint
    from pipeline.search import ax as search
    client = search.load_client(stored.study, Store(db).url)
    assert client._experiment.trials[2].generator_runs[0]._generation_node_name.endswith("BoTorch")
    other = tmp_path / "new.toml"
    other.write_text(path.read_text().replace('name = "kept"', 'name = "new"'))
    code, out, err = cli("run", str(other), "--db", db, "--device", "cpu", "--log-file", str(tmp_path / "ax.log"),
                         "--trials", "1")
    assert code == 0, err
    assert Store(db).study("new").study.strategy == "gp-rbf-power-centre"

    campaign = tmp_path / "c.toml"
    campaign.write_text('name = "c"\nmethods = ["erm", "ls"]\n[data]\nname = "digits"\n[params]\nepochs = 1\n'
                        'lr_head = { low = 0.01, high = 0.2, log = true }\n[budget]\ntrials = 2\ninitial = 1\n')
    monkeypatch.setattr(study_config, "DEFAULT_STRATEGY", "gp")
    stored_config = load_campaign(campaign).to_dict()  # as stored under the gp default: identity without strategy
    assert all("strategy" not in s for s in stored_config["studies"].values())
    monkeypatch.setattr(study_config, "DEFAULT_STRATEGY", "gp-rbf")
    settled = load_campaign(campaign).settle_strategy(stored_config)
    assert {s.strategy for s in settled.studies.values()} == {"gp"}
    assert settled.to_dict()["studies"] == stored_config["studies"]
    assert {s.strategy for s in load_campaign(campaign).settle_strategy(None).studies.values()} == {"gp-rbf"}


def test_the_erm_replay_reads_its_own_columns_and_the_cut_box_has_its_best_on_the_upper_bounds(tmp_path):
    """A table as `tools/replay_trials.py --problem erm` writes it (a known function rising with both learning
    rates): read by its columns, replayed over its box and over the campaign's box inside it, whose best lies
    on the upper bounds; the surrogate is the whole table's in both."""
    from pipeline.bench.problems import ERM_CUT_SPACE, ERM_REPLAY_SPACE, read_replay, replay_problem

    rng = np.random.default_rng(0)
    lines = ["# a table written as tools/replay_trials.py --problem erm writes it",
             "config,lr_head,lr_backbone,seed,status,val_balanced_accuracy,error"]
    for config in range(24):
        head, backbone = 10 ** rng.uniform(np.log10(0.003), 0, size=2)
        truth = 0.9 + 0.02 * np.log10(head) + 0.01 * np.log10(backbone)
        lines += [f"{config},{head},{backbone},{seed},completed,{truth + rng.normal(0, 0.002):.4f},"
                  for seed in range(2)]
    path = tmp_path / "erm.csv"
    path.write_text("\n".join(lines) + "\n")
    table = read_replay(path)
    assert table.search == ERM_REPLAY_SPACE and table.values.shape == (24, 2)
    whole = replay_problem(table, "whole", "")
    cut = replay_problem(table, "cut", "", ERM_CUT_SPACE)
    corner = {"lr_head": 0.2, "lr_backbone": 0.2}
    assert cut.search == ERM_CUT_SPACE and cut.truth(corner) == whole.truth(corner)
    assert cut.best == pytest.approx(cut.truth(corner), abs=0.005) and whole.best > cut.best + 0.01
    assert cut.on_edge(corner) and not cut.on_edge({"lr_head": 0.05, "lr_backbone": 0.05})


@pytest.mark.parametrize("strategy, kernel, warp, transform", [
    ("gp", "DefaultMaternKernel", False, "BilogY"), ("gp-rbf", "RBFKernel", False, "BilogY"),
    ("gp-warp", "DefaultMaternKernel", True, "BilogY"), ("gp-power", "DefaultMaternKernel", False, "PowerTransformY"),
    ("sobol", "DefaultMaternKernel", False, "BilogY"), ("random", "DefaultMaternKernel", False, "BilogY")])
def test_a_study_is_judged_by_its_own_gp_and_a_model_free_one_by_the_default(strategy, kernel, warp, transform):
    """The model's pick, the parameter maps and importance fit the GP the study searched with: its kernel, its
    input warping, its transform of the results; Sobol and random studies get the default GP."""
    from pipeline.library_logs import quiet_libraries

    quiet_libraries("/dev/null")
    from ax.api.client import Client
    from ax.api.configs import RangeParameterConfig

    from pipeline.search.surrogate import fit_gp

    client = Client(random_seed=0)
    client.configure_experiment(parameters=[RangeParameterConfig(name="x", bounds=(0.0, 1.0), parameter_type="float")])
    client.configure_optimization(objective="y")
    for x in np.linspace(0.0, 1.0, 6):
        index = client.attach_trial(parameters={"x": float(x)})
        client.complete_trial(trial_index=index, raw_data={"y": float(0.8 - (x - 0.6) ** 2)})
    model = fit_gp(client._experiment, client._experiment.lookup_data(), "y", strategy)
    gp = model.adapter.generator.surrogate.model
    assert type(gp.covar_module).__name__ == kernel
    assert (type(getattr(gp, "input_transform", None)).__name__ == "Warp") == warp
    assert transform in [type(t).__name__ for t in model.adapter.transforms.values()]
