"""`robust-tune export --mlflow`: a real study and a stored campaign written to a local MLflow store, read back
with MLflow's own client: one parent run per study, a nested run per trial equal to the stored records, the
verdict equal to `report --verdict`; a second export adds nothing, and the database is never changed."""
import json
import shutil
import sys
from pathlib import Path

import pytest

from pipeline.store import Store, best_trial
from helpers import DATA, digest, kill_orphans, start_run, study_file

mlflow = pytest.importorskip("mlflow")  # the test extra installs it; without it there is nothing to read back
from mlflow.tracking import MlflowClient  # noqa: E402

CAMPAIGN_DB = DATA / "v0.6.0-campaign.db"


@pytest.fixture(autouse=True)
def file_store_allowed(monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # newer MLflow refuses a folder store without it


@pytest.fixture(scope="module")
def tiny_db(tmp_path_factory) -> Path:
    """A real study of 2 trials of 1 epoch on digits (as test_study's), run once for the module."""
    from cli.main import main

    folder = tmp_path_factory.mktemp("export")
    db = folder / "runs.db"
    with pytest.raises(SystemExit) as done:
        main(["run", str(study_file(folder, trials=2)), "--db", str(db), "--device", "cpu",
              "--log-file", str(folder / "ax.log")])
    assert done.value.code == 0
    return db


def runs_of(client: MlflowClient, experiment: str) -> list:
    found = client.get_experiment_by_name(experiment)
    assert found is not None, experiment
    return client.search_runs([found.experiment_id], max_results=1000)


def test_a_study_exports_as_a_parent_run_with_a_nested_run_per_trial_equal_to_the_store(tiny_db, tmp_path, cli):
    uri = f"file:{tmp_path / 'mlruns'}"
    before = digest(tiny_db)
    code, out, err = cli("export", "--mlflow", uri, "--db", str(tiny_db))
    assert code == 0, err
    assert "new runs for 1 study, 2 trial(s)" in out
    assert digest(tiny_db) == before  # reading the database changed nothing

    store = Store(str(tiny_db), create=False)
    study = store.require_study("tiny")
    trials = store.trials(study.id)
    client = MlflowClient(tracking_uri=uri)
    runs = runs_of(client, "tiny")
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.run_name == "tiny" and parent.info.status == "FINISHED"
    tags = parent.data.tags
    assert (tags["robust_tune.method"], tags["robust_tune.dataset"], tags["robust_tune.backbone"]) == (
        "gils", "digits", study.study.backbone)
    assert tags["robust_tune.objective"] == "val_accuracy" and tags["robust_tune.fingerprint"] == study.fingerprint
    best = best_trial(study, trials)
    assert tags["robust_tune.best_trial"] == str(best.trial_index)

    nested = {r.info.run_name: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert sorted(nested) == ["0", "1"]
    for trial in trials:
        run = nested[str(trial.trial_index)]
        assert run.info.status == "FINISHED" and run.data.tags["state"] == "completed"
        assert run.data.params == {k: str(v) for k, v in trial.parameters.items()}
        facts = {"train_seconds": trial.train_seconds, "distinct_per_batch": trial.distinct_per_batch}
        assert run.data.metrics == pytest.approx(  # the metrics, and beside them the run's time and batches
            {**trial.metrics, **{k: v for k, v in facts.items() if v is not None},
             **{k: v for k, v in run.data.metrics.items() if k.startswith("epoch_")}})
        assert run.data.tags["robust_tune.best"] == str(trial is best).lower()
        losses = client.get_metric_history(run.info.run_id, "epoch_train_loss")
        assert [(m.step, m.value) for m in losses] == [(e.epoch, pytest.approx(e.train_loss)) for e in trial.epochs]
        for split in ("val", "test"):
            history = client.get_metric_history(run.info.run_id, f"epoch_{split}_balanced_accuracy")
            assert [(m.step, m.value) for m in history] == [
                (e.epoch, pytest.approx(getattr(e.splits, split).balanced_accuracy)) for e in trial.epochs]

    code, out, err = cli("export", "--mlflow", uri, "--db", str(tiny_db))  # again: nothing new, nothing doubled
    assert code == 0 and "new runs for 0 studies, 0 trial(s)" in out and "3 run(s) were there already" in out
    assert len(runs_of(client, "tiny")) == 3
    assert [len(client.get_metric_history(nested["0"].info.run_id, "epoch_train_loss"))] == [len(trials[0].epochs)]
    assert digest(tiny_db) == before


def test_a_campaigns_verdict_exports_as_report_verdict_reads_it(tmp_path, cli):
    db = tmp_path / "campaign.db"
    shutil.copyfile(CAMPAIGN_DB, db)
    before = digest(db)
    uri = f"file:{tmp_path / 'mlruns'}"
    code, out, err = cli("export", "--mlflow", uri, "--db", str(db))
    assert code == 0, err
    assert "new runs for 3 studies, 6 trial(s) and 1 verdict(s)" in out
    code, report, _ = cli("report", "--verdict", "old-trio", "--db", str(db), "--format", "json")
    assert code == 0
    (table,) = [t for t in json.loads(report) if t["title"].startswith("Verdict of campaign")]

    client = MlflowClient(tracking_uri=uri)
    (verdict,) = runs_of(client, "old-trio")
    assert verdict.info.run_name == "verdict"
    metrics, tags = verdict.data.metrics, verdict.data.tags
    compared = 0
    for record in table["rows"]:
        method = record["method"]
        for metric, mean in record["means"].items():
            assert metrics[f"{method}.{metric}.mean"] == pytest.approx(mean["mean"])
        for metric, c in record["vs_erm"].items():
            name = f"{method}.{metric}"
            assert metrics[f"{name}.difference"] == pytest.approx(c["difference"])
            for end in ("low", "high"):
                if c[end] is not None:
                    assert metrics[f"{name}.{end}"] == pytest.approx(c[end])
            assert metrics[f"{name}.p_improvement"] == pytest.approx(c["p_improvement"]["probability"])
            assert tags[f"{name}.verdict"] == (c["verdict"] or "secondary")
            compared += 1
    assert compared == 8  # ls and cb, four metrics each
    assert {r.info.run_name for r in runs_of(client, "old-trio.ls")} == {"old-trio.ls", "0", "1"}

    code, out, _ = cli("export", "--mlflow", uri, "--db", str(db))
    assert code == 0 and "10 run(s) were there already" in out
    assert len(runs_of(client, "old-trio")) == 1 and len(runs_of(client, "old-trio.erm")) == 3
    assert digest(db) == before


def test_every_field_of_a_verdict_cell_is_in_the_json_and_mlflows_values_under_the_name_it_declares(tmp_path, cli):
    """The verdict's cells are one record each: `report --verdict --format json` and the MLflow export show every
    field of it (dataclasses.fields, not a list kept here), each under the name the field declares."""
    from dataclasses import fields, is_dataclass
    from enum import Enum

    from pipeline.compare.verdict import VerdictCell, take_verdict
    from pipeline.report.export_mlflow import verdict_values

    db = tmp_path / "campaign.db"
    shutil.copyfile(CAMPAIGN_DB, db)
    code, report, _ = cli("report", "--verdict", "old-trio", "--db", str(db), "--format", "json")
    assert code == 0
    (table,) = [t for t in json.loads(report) if t["title"].startswith("Verdict of campaign")]
    rows = {r["method"]: r for r in table["rows"]}
    store = Store(str(db), create=False)
    campaign = store.require_campaign("old-trio")
    metrics, tags = verdict_values(store, campaign)
    records = take_verdict(store, campaign).records
    assert len(records) == 8 and all(type(r) is VerdictCell for r in records.values())  # ls and cb, 4 metrics each

    def check(record, shown: dict, mlflow_name) -> None:
        """Each field of `record` under its JSON key in `shown` and, where it has one, its MLflow name as
        `mlflow_name` makes it whole."""
        assert set(shown) == {f.metadata["json"] for f in fields(record) if f.metadata["json"] is not None}
        for f in fields(record):
            value, key = getattr(record, f.name), f.metadata["json"]
            if key is None:  # the record's place: its row's method, its key under vs_erm
                assert f.name in ("method", "metric")
                continue
            name = None if f.metadata["mlflow"] is None else mlflow_name(f.metadata["mlflow"])
            if is_dataclass(value):  # a record inside: its fields' names joined to this one's with "_"
                check(value, shown[key], lambda inner, outer=name: "_".join(p for p in (outer, inner) if p))
                continue
            assert shown[key] == (value.value if isinstance(value, Enum) else value)
            if name is None:
                continue
            if value is None:
                assert name not in metrics and tags.get(name) == f.metadata["mlflow_none"]
            elif isinstance(value, Enum):
                assert tags[name] == value.value
            else:
                assert metrics[name] == pytest.approx(value)

    for (method, metric), record in records.items():
        check(record, rows[method]["vs_erm"][metric], lambda inner, cell=f"{method}.{metric}": f"{cell}.{inner}")
    assert any(r.outcome is not None for r in records.values()) and any(r.p_improvement for r in records.values())


def test_a_statistic_added_to_the_verdict_cell_is_in_the_json_and_in_mlflow_with_no_other_change():
    import dataclasses

    from pipeline.compare.verdict import ImprovementRecord, VerdictCell, shown
    from pipeline.report.export_mlflow import mlflow_record
    from pipeline.report.verdict_report import json_record

    extended = dataclasses.make_dataclass("Extended", [("skew", float, shown("skew", mlflow="skew", default=0.0))],
                                          bases=(VerdictCell,), frozen=True)
    cell = extended("ls", "test_accuracy", 0.02, 0.01, 0.03, 0.95, False, None, False, None, None, 5, 5, False, None,
                    0.0, 0, ImprovementRecord(0.8, 0.44, 0.97, 5, 0.95), False, skew=-0.5)
    assert json_record(cell)["skew"] == -0.5 and json_record(cell)["p_improvement"]["probability"] == 0.8
    metrics, tags = mlflow_record(cell)
    assert metrics == {"difference": 0.02, "low": 0.01, "high": 0.03, "p_improvement": 0.8,
                       "p_improvement_low": 0.44, "p_improvement_high": 0.97, "skew": -0.5}
    assert tags == {"verdict": "secondary"}


def test_bad_input_is_one_line_and_exit_2(tmp_path, cli, monkeypatch):
    db = tmp_path / "campaign.db"
    shutil.copyfile(CAMPAIGN_DB, db)
    (tmp_path / "a-file").write_text("")
    for args, says in [(["nope", "--mlflow", f"file:{tmp_path / 'mlruns'}"], "no study named 'nope'"),
                       (["--mlflow", f"file:{tmp_path / 'a-file' / 'mlruns'}"], "cannot export to MLflow at file:"),
                       ([], "export needs a destination: --mlflow URI")]:
        code, out, err = cli("export", *args, "--db", str(db))
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if MLflow were not installed
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    code, _, err = cli("export", "--mlflow", f"file:{tmp_path / 'mlruns'}", "--db", str(db))
    assert code == 2 and "pip install 'robust-tune[mlflow]'" in err and len(err.strip().splitlines()) == 1


def test_run_mlflow_logs_each_trial_as_it_ends_and_a_resumed_run_adds_only_the_new(tmp_path, cli):
    uri = f"file:{tmp_path / 'mlruns'}"
    db = str(tmp_path / "live.db")
    path = study_file(tmp_path, trials=2)
    run = ["run", str(path), "--db", db, "--device", "cpu", "--log-file", str(tmp_path / "ax.log")]
    code, out, err = cli(*run, "--trials", "1", "--mlflow", uri)
    assert code == 0, err
    assert f"MLflow: study tiny and its trials at {uri}" in err
    client = MlflowClient(tracking_uri=uri)
    assert sorted(r.info.run_name for r in runs_of(client, "tiny")) == ["0", "tiny"]

    # the study file names the tracking store itself: the resumed run logs its new trial there, and no other
    path.write_text(path.read_text() + f'\n[tracking]\nmlflow = "{uri}"\n')
    code, out, err = cli(*run)
    assert code == 0, err
    runs = runs_of(client, "tiny")
    assert sorted(r.info.run_name for r in runs) == ["0", "1", "tiny"]  # nothing twice
    store = Store(db, create=False)
    (trial,) = [t for t in store.trials(store.require_study("tiny").id) if t.trial_index == 1]
    (logged,) = [r for r in runs if r.info.run_name == "1"]
    assert logged.data.metrics["val_accuracy"] == pytest.approx(trial.metrics["val_accuracy"])


def test_a_run_killed_before_mlflow_heard_of_its_trial_logs_it_when_resumed_and_export_then_adds_nothing(tmp_path, cli):
    """Killed once trial 0 was stored, before its run reached MLflow (a database as tracking store, no server): the
    resumed run logs trial 0 and trial 1, and `export --mlflow` afterwards finds all three runs there."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    path, db = study_file(tmp_path, trials=2), tmp_path / "live.db"
    process = start_run(path, db, "--mlflow", uri, env={"ROBUST_TUNE_KILL_AT": "after-record"})
    process.communicate(timeout=600)
    kill_orphans(process)
    assert process.returncode == -9
    client = MlflowClient(tracking_uri=uri)
    assert client.get_experiment_by_name("tiny") is None  # nothing reached MLflow
    store = Store(str(db), create=False)
    assert [t.trial_index for t in store.trials(store.require_study("tiny").id) if t.ran] == [0]

    code, out, err = cli("run", str(path), "--db", str(db), "--device", "cpu", "--log-file", str(tmp_path / "ax.log"),
                         "--mlflow", uri)
    assert code == 0, err
    assert sorted(r.info.run_name for r in runs_of(client, "tiny")) == ["0", "1", "tiny"]
    code, out, err = cli("export", "--mlflow", uri, "--db", str(db))
    assert code == 0, err
    assert "new runs for 0 studies, 0 trial(s) and 0 verdict(s); 3 run(s) were there already" in out
    assert sorted(r.info.run_name for r in runs_of(client, "tiny")) == ["0", "1", "tiny"]


def test_run_and_compare_mlflow_without_mlflow_installed_are_one_line_before_any_work(tmp_path, cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if MLflow were not installed
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    uri = f"file:{tmp_path / 'mlruns'}"
    db = tmp_path / "never.db"
    for command in (["run", str(study_file(tmp_path))], ["compare", str(CAMPAIGN_DB.parent / "old-trio.toml")]):
        code, out, err = cli(*command, "--db", str(db), "--device", "cpu", "--mlflow", uri)
        assert code == 2 and "--mlflow needs MLflow's client, which is not installed" in err, err
        assert "pip install 'robust-tune[mlflow]'" in err and len(err.strip().splitlines()) == 1, err
    assert not db.exists() and not (tmp_path / "mlruns").exists()


def test_run_with_an_mlflow_it_cannot_reach_stops_in_one_line_before_anything_is_stored(tmp_path, cli):
    db = tmp_path / "never.db"
    code, out, err = cli("run", str(study_file(tmp_path)), "--db", str(db), "--mlflow", "http://127.0.0.1:9")
    assert code == 2 and "cannot export to MLflow at http://127.0.0.1:9" in err, err
    assert len(err.strip().splitlines()) == 1 and not db.exists()
    (tmp_path / "bad.toml").write_text(study_file(tmp_path).read_text() + "\n[tracking]\nmlflw = \"x\"\n")
    code, out, err = cli("run", str(tmp_path / "bad.toml"), "--db", str(db))
    assert code == 2 and "tracking.mlflw: unknown field" in err and not db.exists()


def test_compare_mlflow_logs_the_campaigns_studies_and_its_verdict(tmp_path, cli):
    db = tmp_path / "campaign.db"
    shutil.copyfile(CAMPAIGN_DB, db)
    uri = f"file:{tmp_path / 'mlruns'}"
    code, out, err = cli("compare", str(CAMPAIGN_DB.parent / "old-trio.toml"), "--db", str(db), "--device", "cpu",
                         "--log-file", str(tmp_path / "ax.log"), "--mlflow", uri)
    assert code == 0, err
    assert "nothing was missing" in err and f"campaign old-trio's studies, trials and verdict at {uri}" in err
    client = MlflowClient(tracking_uri=uri)
    assert [r.info.run_name for r in runs_of(client, "old-trio")] == ["verdict"]
    for method in ("erm", "ls", "cb"):
        assert {r.info.run_name for r in runs_of(client, f"old-trio.{method}")} == {f"old-trio.{method}", "0", "1"}
