"""Several objectives and constraints in a study: real Ax, real PyTorch, a real SQLite database, digits, 1 epoch."""
import datetime as dt
import json
import signal
from pathlib import Path

import pytest

from pipeline.store import Store, StudyRecord, TrialRecord, best_trial
from pipeline.store.records import pareto_set
from pipeline.search.study import run_study
from pipeline.spec.study_config import StudyConfig, load_study, parse_study

OBJECTIVES = ("val_balanced_accuracy", "val_worst_class_accuracy")
STUDY = """
name = "{name}"
objectives = ["val_balanced_accuracy", "val_worst_class_accuracy"]
constraints = [{constraints}]
[data]
name = "digits"
[method]
name = "erm"
[params]
epochs = 1
lr_head = {{ low = 0.05, high = 0.5, log = true }}
lr_backbone = {{ low = 0.01, high = 0.3, log = true }}
[budget]
trials = 4
initial = 2
"""


def study_file(tmp_path: Path, name: str = "moo", constraints: str = '"val_accuracy >= 0.1"') -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(STUDY.format(name=name, constraints=constraints))
    return path


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """The 4-trial multi-objective study run once through the CLI: (folder, database, study file)."""
    from cli.main import main

    tmp = tmp_path_factory.mktemp("moo")
    db, path = tmp / "runs.db", study_file(tmp)
    try:
        main(["run", str(path), "--db", str(db), "--device", "cpu", "--log-file", str(tmp / "ax.log")])
    except SystemExit as exit_:
        assert exit_.code in (0, None)
    return tmp, db, path


def completed(db: Path, name: str = "moo") -> list[TrialRecord]:
    store = Store(str(db))
    return [t for t in store.trials(store.require_study(name).id) if t.status == "completed"]


def hand_pareto(trials: list[TrialRecord]) -> list[int]:
    """The Pareto set by hand: feasible trials (val_accuracy >= 0.1) that no feasible trial beats on both."""
    ok = [t for t in trials if t.metrics["val_accuracy"] >= 0.1]
    front = []
    for t in ok:
        a, b = (t.metrics[o] for o in OBJECTIVES)
        beaten = False
        for u in ok:
            c, d = (u.metrics[o] for o in OBJECTIVES)
            if c >= a and d >= b and (c > a or d > b):
                beaten = True
        if not beaten:
            front.append(t.trial_index)
    return front


def test_a_multi_objective_study_runs_with_ax_modelling_both_metrics(ran):
    _, db, path = ran
    trials = completed(db)
    assert [t.trial_index for t in trials] == [0, 1, 2, 3]
    stored = Store(str(db)).study("moo").study
    assert stored.objectives == OBJECTIVES and stored.objective == OBJECTIVES[0]
    assert stored.constraints == ("val_accuracy >= 0.1",)
    from pipeline.search.ax import load_client

    experiment = load_client(load_study(path), Store(str(db)).url)._experiment
    config = experiment.optimization_config
    assert type(config).__name__ == "MultiObjectiveOptimizationConfig"
    assert set(config.objective.metric_names) == set(OBJECTIVES)
    assert [c.metric_names for c in config.outcome_constraints] == [["val_accuracy"]]
    df = experiment.lookup_data().df
    for t in trials:
        told = df[df.trial_index == t.trial_index].set_index("metric_name")["mean"]
        assert set(told.index) == {*OBJECTIVES, "val_accuracy"}
        for name in told.index:
            assert told[name] == pytest.approx(t.metrics[name], abs=1e-9)
    nodes = [experiment.trials[i].generator_runs[0]._generation_node_name for i in range(4)]
    assert "BoTorch" in nodes[-1]  # the GP proposed the last trials, on both objectives


def test_report_lists_the_pareto_set_as_computed_by_hand(ran, cli):
    _, db, _ = ran
    code, out, err = cli("report", "moo", "--db", str(db), "--format", "json")
    assert code == 0, err
    best, pareto, *_ = json.loads(out)  # then the model's view: importance
    expected = hand_pareto(completed(db))
    assert expected and [r["trial_index"] for r in pareto["rows"]] == expected
    by_index = {t.trial_index: t for t in completed(db)}
    for row in pareto["rows"]:
        assert row["objectives"] == {o: by_index[row["trial_index"]].metrics[o] for o in OBJECTIVES}
    top = max(expected, key=lambda i: (by_index[i].metrics[OBJECTIVES[0]], -i))
    assert best["rows"][0]["trial_index"] == top  # the best table: the first objective among the Pareto set
    assert any("Pareto" in note for note in best["notes"])
    code, out, err = cli("report", "moo", "--db", str(db))
    assert code == 0 and "Pareto set of moo" in out


def test_report_plots_draw_the_pareto_front(ran, cli):
    tmp, db, _ = ran
    folder = tmp / "pictures"
    code, _, err = cli("report", "moo", "--db", str(db), "--plots", str(folder))
    assert code == 0, err
    assert (folder / "moo-pareto-front.png").stat().st_size > 1000
    from pipeline.report.plots import front_pictures, load_studies

    data = next(s for s in load_studies(Store(str(db)), ["moo"], tmp / "plots.log"))
    picture, = front_pictures(data)
    assert sorted(picture.data["pareto"]) == hand_pareto(completed(db))
    assert (picture.data["x"], picture.data["y"]) == OBJECTIVES


def test_evaluate_and_best_take_a_pareto_trial(ran, cli):
    _, db, _ = ran
    front = hand_pareto(completed(db))
    best = best_trial(Store(str(db)).study("moo"), completed(db))
    chosen = next((i for i in front if i != best.trial_index), front[0])
    code, out, err = cli("best", "moo", "--db", str(db), "--trial", str(chosen), "--format", "json")
    assert code == 0 and json.loads(out)["trial_index"] == chosen
    code, out, err = cli("best", "moo", "--db", str(db))
    assert code == 0 and "Pareto set" in err and f"trial {best.trial_index}" in err
    assert 'objectives = ["val_balanced_accuracy", "val_worst_class_accuracy"]' in out
    assert parse_study(__import__("tomllib").loads(out), "best.toml", searching=False).objectives == OBJECTIVES
    code, out, err = cli("train", "--from-study", "moo", "--db", str(db), "--device", "cpu", "--format", "json")
    assert code == 0 and "Pareto set" in err and f"trial {best.trial_index}" in err, err
    code, out, err = cli("evaluate", "moo", "--db", str(db), "--trial", str(chosen), "--seeds", "1",
                         "--device", "cpu", "--log-file", str(db.with_suffix(".eval.log")))
    assert code == 0, err
    assert f"(trial {chosen})" in err
    store = Store(str(db))
    runs = store.evaluations(store.study("moo").id)
    assert [(r.variant, r.seed, r.trial_index) for r in runs] == [("tuned", 0, chosen)]


def test_a_killed_multi_objective_study_resumes_exactly(ran, tmp_path):
    """Killed after a GP trial's record and before Ax was told, then resumed: Ax is told every metric from the
    stored record and the study goes on to the same proposals and results as the run that never stopped."""
    from helpers import start_run

    path, db = study_file(tmp_path), tmp_path / "runs.db"
    run_study(load_study(path), str(db), "cpu", trials=2, log_file=tmp_path / "ax.log")
    process = start_run(path, db, env={"ROBUST_TUNE_KILL_AT": "after-record"})
    process.communicate()
    assert process.returncode == -signal.SIGKILL
    run_study(load_study(path), str(db), "cpu", log_file=tmp_path / "ax.log")

    def results(folder_db: Path) -> list[tuple[dict, dict]]:
        return [(t.parameters, {k: v for k, v in t.metrics.items() if k != "train_seconds"})
                for t in completed(folder_db)]

    assert results(db) == results(ran[1])


def test_a_constraint_on_an_unknown_metric_is_one_line_exit_2_and_creates_nothing(tmp_path, cli):
    path, db = study_file(tmp_path, constraints='"val_f1 >= 0.3"'), tmp_path / "runs.db"
    code, out, err = cli("run", str(path), "--db", str(db), "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert str(path) in err and "constraints" in err and "val_f1" in err
    assert not db.exists() and not (tmp_path / "ax.log").exists()


def test_objective_and_objectives_together_are_refused(tmp_path, cli):
    path = study_file(tmp_path)
    path.write_text('objective = "val_accuracy"\n' + path.read_text())
    code, _, err = cli("run", str(path), "--db", str(tmp_path / "runs.db"), "--device", "cpu")
    assert code == 2 and "objectives" in err and len(err.strip().splitlines()) == 1


def record(study: StudyConfig) -> StudyRecord:
    return StudyRecord(1, study.name, study.fingerprint(), study, dt.datetime(2024, 1, 1))


def trial(index: int, status: str = "completed", **metrics: float) -> TrialRecord:
    return TrialRecord(index, index, status, {"lr_head": 0.1}, 0, metrics if status == "completed" else None, None,
                       1.0, 0.1, None)


def hand_study(**fields) -> StudyConfig:
    raw = {"name": "hand", "data": {"name": "digits"}, "method": {"name": "erm"},
           "params": {"lr_head": {"low": 0.01, "high": 0.5}}, **fields}
    return parse_study(raw, "hand.toml")


def test_the_pareto_set_by_hand_keeps_trade_offs_and_drops_dominated_and_infeasible_trials():
    study = record(hand_study(objectives=list(OBJECTIVES), constraints=["val_accuracy >= 0.5"]))

    def t(index: int, a: float, b: float, accuracy: float = 0.9) -> TrialRecord:
        return trial(index, val_balanced_accuracy=a, val_worst_class_accuracy=b, val_accuracy=accuracy)

    trials = [t(0, 0.8, 0.2), t(1, 0.6, 0.5), t(2, 0.7, 0.1),  # 2 is dominated by 0
              t(3, 0.9, 0.9, accuracy=0.4),  # dominates all, but breaks the constraint
              t(4, 0.6, 0.5),  # equal to 1: neither dominates, both stay
              t(5, 0.5, 0.6), trial(6, "failed"), t(7, 0.8, 0.1)]  # 7 is dominated by 0
    assert [x.trial_index for x in pareto_set(study, trials)] == [0, 1, 4, 5]
    assert best_trial(study, trials).trial_index == 0  # the first objective among the Pareto set
    assert pareto_set(study, [trial(0, "failed")]) == [] and best_trial(study, []) is None


def test_best_trial_never_takes_a_trial_that_breaks_a_constraint_and_is_unchanged_without_one():
    constrained = record(hand_study(objective="val_accuracy", constraints=["val_worst_class_accuracy >= 0.3"]))
    trials = [trial(0, val_accuracy=0.7, val_worst_class_accuracy=0.4),
              trial(1, val_accuracy=0.9, val_worst_class_accuracy=0.1),
              trial(2, val_accuracy=0.7, val_worst_class_accuracy=0.5)]
    assert best_trial(constrained, trials).trial_index == 0  # 1 is higher but infeasible; 0 wins the tie
    assert best_trial(constrained, trials[1:2]) is None
    plain = record(hand_study(objective="val_accuracy"))
    assert best_trial(plain, trials).trial_index == 1


def test_a_study_stored_before_objectives_and_constraints_is_the_same_study_with_the_same_fingerprint(tmp_path):
    study = hand_study()
    stored = json.loads(json.dumps(study.to_dict()))
    del stored["objectives"], stored["constraints"]  # as a version before them stored it
    old = StudyConfig.from_dict(stored)
    assert old == study and old.objectives == () and old.constraints == ()
    assert not old.differences(study) and old.fingerprint() == study.fingerprint()
    several = hand_study(objectives=list(OBJECTIVES))
    assert several.fingerprint() != study.fingerprint() and "objectives" in several.differences(study)
    assert StudyConfig.from_dict(json.loads(json.dumps(several.to_dict()))) == several


def test_the_front_picture_greys_infeasible_trials_and_is_drawn_only_for_several_objectives():
    from pipeline.report.plots import StudyData, front_pictures

    study = record(hand_study(objectives=list(OBJECTIVES), constraints=["val_accuracy >= 0.5"]))
    trials = [trial(0, val_balanced_accuracy=0.8, val_worst_class_accuracy=0.2, val_accuracy=0.8),
              trial(1, val_balanced_accuracy=0.6, val_worst_class_accuracy=0.5, val_accuracy=0.6),
              trial(2, val_balanced_accuracy=0.9, val_worst_class_accuracy=0.9, val_accuracy=0.4),
              trial(3, val_balanced_accuracy=0.5, val_worst_class_accuracy=0.1, val_accuracy=0.5)]
    picture, = front_pictures(StudyData(study, trials))
    assert picture.kind == "pareto-front" and picture.png.startswith(b"\x89PNG")
    assert picture.data["pareto"] == [1, 0] and picture.data["infeasible"] == [2]  # joined along the first objective
    from conftest import texts_off_canvas

    assert texts_off_canvas(picture) == []
    single = record(hand_study(objective="val_balanced_accuracy"))
    assert front_pictures(StudyData(single, trials)) == []
