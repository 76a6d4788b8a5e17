"""Studies, their trials and campaigns' verdicts written to an MLflow tracking store, from what is stored.

The layout is Optuna's MLflowCallback's with nesting on: one experiment per study, named after it, holding
one parent run for the study (named after it) and one nested run per trained trial (named by its trial
index). A campaign's verdict is one run, named "verdict", in an experiment named after the campaign.

Every run carries the tag robust_tune.key; an export reads the keys already in each experiment first, so
exporting again adds only what is new (trials trained since, a verdict that changed) and never a duplicate.
The tool's database is only read. Needs MLflow's client (the `mlflow` extra); no torch, no Ax.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from pipeline.errors import UserError
from pipeline.report.study_tables import dataset_label
from pipeline.store import CampaignRecord, Store, StudyRecord, TrialRecord, TrialStatus, best_trial

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

KEY = "robust_tune.key"  # what a run is, so an export finds it again
INSTALL = "pip install 'robust-tune[mlflow]'"
# MLflow's end states of a run, by the stored status of a trial that trained
RUN_STATUS = {TrialStatus.COMPLETED: "FINISHED", TrialStatus.EARLY_STOPPED: "FINISHED", TrialStatus.FAILED: "FAILED"}
BATCH = 1000  # metrics per log_batch call


@dataclass(frozen=True)
class Exported:
    """One run an export reached: what it stands for, and whether it was new (False: found from before)."""

    kind: str  # study | trial | verdict
    name: str  # the study or campaign, with " trial N" for a trial
    created: bool


# MLflow retries a server that does not answer 5 times with backoff (over a minute) per request; a user's own
# MLFLOW_HTTP_REQUEST_* settings win over these.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}
QUIET = ("mlflow", "alembic")  # loggers that say, at INFO, what a new database tracking store is doing


def mlflow_client(uri: str) -> MlflowClient:
    """MLflow's client for the tracking `uri`; a UserError saying how to install it when MLflow is missing."""
    for name, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)
    try:
        with warnings.catch_warnings():  # MLflow's own deprecation notices at import are not the user's to act on
            warnings.simplefilter("ignore")
            from mlflow.tracking import MlflowClient
    except ImportError:
        raise UserError(f"--mlflow needs MLflow's client, which is not installed; install it with: {INSTALL}") from None
    for name in QUIET:  # "Creating initial MLflow database tables..." is MLflow's business, not the user's
        logging.getLogger(name).setLevel(logging.WARNING)
    with _mlflow_errors(uri):
        return MlflowClient(tracking_uri=uri)


def export_to_mlflow(store: Store, uri: str, studies: list[str] | None = None,
                     on_run: Callable[[Exported], None] | None = None,
                     campaigns: list[str] | None = None) -> list[Exported]:
    """Export the named studies (default: every stored one) and the named campaigns' verdicts (default: every
    stored campaign's when no study is named, none otherwise) to the MLflow tracking store at `uri`; what each
    run was is given to `on_run` as it is reached, and returned."""
    records = [store.require_study(name) for name in studies] if studies else store.all_studies()
    verdicts = ([store.require_campaign(name) for name in campaigns] if campaigns is not None
                else store.all_campaigns() if not studies else [])
    client = mlflow_client(uri)
    done: list[Exported] = []

    def note(exported: Exported) -> None:
        done.append(exported)
        if on_run is not None:
            on_run(exported)

    with _mlflow_errors(uri):
        for study in records:
            _export_study(client, study, store.trials(study.id), note)
        for campaign in verdicts:
            for _, task in campaign.task_records():  # a campaign of several tasks: each task's verdict
                _export_verdict(client, store, task, note)
    return done


@contextmanager
def _mlflow_errors(uri: str) -> Iterator[None]:
    """Within the block, MLflow refusing or failing to write (a folder it cannot write, a server that does not
    answer, a store it no longer opens) is a UserError naming the URI, in one line."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from mlflow.exceptions import MlflowException
    try:
        with warnings.catch_warnings():  # MLflow's own deprecation notices are not the user's to act on
            warnings.simplefilter("ignore")
            yield
    except UserError:
        raise
    except Exception as error:
        if not isinstance(error, (MlflowException, OSError)) and type(error).__module__.split(".")[0] != "requests":
            raise
        reason = " ".join(str(error).split())
        if "MLFLOW_ALLOW_FILE_STORE" in reason or "filesystem tracking backend" in reason:
            reason = ("this MLflow refuses a folder as its tracking store; set MLFLOW_ALLOW_FILE_STORE=true, or "
                      "name a database, e.g. sqlite:///mlflow.db")
        raise UserError(f"cannot export to MLflow at {uri}: {reason[:300]}") from None


def _experiment(client: MlflowClient, name: str) -> str:
    """The id of the experiment `name`, created when there is none (one deleted is a UserError: MLflow keeps
    its name taken)."""
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        return client.create_experiment(name)
    if experiment.lifecycle_stage == "deleted":
        raise UserError(f"MLflow's experiment {name!r} is deleted but keeps its name; restore it or remove it for good "
                        "(mlflow gc), then export again")
    return experiment.experiment_id


def _runs_by_key(client: MlflowClient, experiment_id: str) -> dict[str, Any]:
    """The runs of an experiment that an export made, by their robust_tune.key."""
    runs: dict[str, Any] = {}
    token = None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        for run in page:
            if KEY in run.data.tags:
                runs[run.data.tags[KEY]] = run
        token = page.token
        if not token:
            return runs


def _text(value: Any) -> str:
    """A parameter's or tag's value as MLflow stores it: text, a list or table as JSON."""
    return value if isinstance(value, str) else json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def _log(client: MlflowClient, run_id: str, params: dict[str, Any] | None = None,
         metrics: Iterable[tuple[str, float, int]] = (), tags: dict[str, Any] | None = None) -> None:
    """Log params, metrics (name, value, step) and tags to a run, in batches MLflow accepts."""
    from mlflow.entities import Metric, Param, RunTag

    stamp = int(time.time() * 1000)
    logged_params = [Param(k, _text(v)) for k, v in (params or {}).items()]
    logged_tags = [RunTag(k, _text(v)) for k, v in (tags or {}).items()]
    logged_metrics = [Metric(k, float(v), stamp, step) for k, v, step in metrics]
    for start in range(0, len(logged_params), 100):  # MLflow takes at most 100 params, 100 tags, 1000 metrics a call
        client.log_batch(run_id, params=logged_params[start:start + 100])
    for start in range(0, len(logged_tags), 100):
        client.log_batch(run_id, tags=logged_tags[start:start + 100])
    for start in range(0, len(logged_metrics), BATCH):
        client.log_batch(run_id, metrics=logged_metrics[start:start + BATCH])


def study_tags(study: StudyRecord) -> dict[str, str]:
    """The tags of a study's parent run: what it tuned, on what, for which objective, and its identity."""
    config = study.study
    return {"robust_tune.kind": "study", "robust_tune.study": study.name, "robust_tune.method": config.method,
            "robust_tune.dataset": dataset_label(config.data), "robust_tune.backbone": config.backbone,
            "robust_tune.objective": ",".join(config.all_objectives), "robust_tune.fingerprint": study.fingerprint,
            "robust_tune.budget": str(config.budget.trials), "direction": "MAXIMIZE"}


def epoch_metrics(trial: TrialRecord) -> list[tuple[str, float, int]]:
    """A trial's per-epoch metrics as MLflow metric history, step = epoch: epoch_train_loss, epoch_val_accuracy,
    epoch_test_balanced_accuracy, ... (the trial's final metrics keep their stored names)."""
    history = []
    for epoch in trial.epochs:
        if epoch.splits is not None:
            values = epoch.splits.metrics_and_examples()
        else:  # stored before 0.5.0: the curves it had
            values = {"val_accuracy": epoch.val_accuracy} if epoch.val_accuracy is not None else {}
        values = {"train_loss": epoch.train_loss, **values}
        history += [(f"epoch_{name}", value, epoch.epoch) for name, value in values.items()]
    return history


def _export_study(client: MlflowClient, study: StudyRecord, trials: list[TrialRecord],
                  note: Callable[[Exported], None]) -> None:
    experiment_id = _experiment(client, study.name)
    known = _runs_by_key(client, experiment_id)
    key = f"study/{study.name}/{study.fingerprint}"
    parent = known.get(key)
    if parent is None:
        started = int(study.created_at.timestamp() * 1000)
        parent = client.create_run(experiment_id, start_time=started, run_name=study.name, tags={KEY: key})
        _log(client, parent.info.run_id, params=study.study.fixed, tags=study_tags(study))
        client.set_terminated(parent.info.run_id, "FINISHED")
    note(Exported("study", study.name, key not in known))
    parent_id = parent.info.run_id
    best = best_trial(study, trials)
    for trial in trials:
        if not trial.ran:  # running, interrupted, or an epoch prefix (its trial's run holds its epochs)
            continue
        trial_key = f"trial/{study.name}/{study.fingerprint}/{trial.trial_index}"
        run = known.get(trial_key)
        if run is None:
            run = client.create_run(experiment_id, run_name=str(trial.trial_index),
                                    tags={KEY: trial_key, "mlflow.parentRunId": parent_id})
            facts = {"train_seconds": trial.train_seconds, "distinct_per_batch": trial.distinct_per_batch}
            final = [(name, value, 0) for name, value in {**(trial.metrics or {}), **facts}.items()
                     if value is not None]
            _log(client, run.info.run_id, params=trial.parameters, metrics=final + epoch_metrics(trial), tags={
                "robust_tune.kind": "trial", "robust_tune.study": study.name, "number": str(trial.trial_index),
                "state": trial.status, "robust_tune.seed": str(trial.seed),
                **({"robust_tune.error": trial.error[:5000]} if trial.error else {})})
            client.set_terminated(run.info.run_id, RUN_STATUS[trial.status])
        # tags may change: the best trial moves as trials are added
        client.set_tag(run.info.run_id, "robust_tune.best", str(best is trial).lower())
        note(Exported("trial", f"{study.name} trial {trial.trial_index}", trial_key not in known))
    client.set_tag(parent_id, "robust_tune.best_trial", "" if best is None else str(best.trial_index))
    client.set_tag(parent_id, "robust_tune.trials", str(sum(t.ran for t in trials)))


def verdict_values(store: Store, campaign: CampaignRecord) -> tuple[dict[str, float], dict[str, str]]:
    """A campaign's verdict as MLflow metrics and tags: per method (other than ERM) and metric,
    METHOD.METRIC.difference, .low, .high, .p_improvement (with .p_improvement_low and _high), and the tag
    METHOD.METRIC.verdict (better, worse, equivalent or undecided; secondary for a metric not decided on), each
    its VerdictCell's field as it declares its MLflow name; per method METHOD.METRIC.mean."""
    from pipeline.compare.verdict import take_verdict

    verdict = take_verdict(store, campaign)
    metrics: dict[str, float] = {}
    tags = {"robust_tune.kind": "verdict", "robust_tune.campaign": campaign.name,
            "robust_tune.methods": ",".join(campaign.methods), "robust_tune.reading": verdict.reading[:5000],
            "robust_tune.primary": ",".join(verdict.design.primary)}
    for m in verdict.methods:
        tags[f"{m.method}.studies"] = ",".join(m.studies)
        tags[f"{m.method}.seeds"] = str(m.seeds)
        for metric, (mean, _) in m.means.items():
            metrics[f"{m.method}.{metric}.mean"] = mean
    for (method, metric), record in verdict.records.items():
        numbers, words = mlflow_record(record)
        metrics |= {f"{method}.{metric}.{k}": v for k, v in numbers.items()}
        tags |= {f"{method}.{metric}.{k}": v for k, v in words.items()}
    return metrics, tags


def mlflow_record(record: Any, prefix: str = "") -> tuple[dict[str, float], dict[str, str]]:
    """A verdict record (VerdictCell, ImprovementRecord) as MLflow metrics and tags, each field under the name it
    declares (a record inside under its own fields' names, joined to its field's with "_"): a number is a metric
    (left out when None or NaN), a word a tag. Fields without an MLflow name are left out."""
    metrics: dict[str, float] = {}
    tags: dict[str, str] = {}
    for f in dataclasses.fields(record):
        name = f.metadata.get("mlflow")
        if name is None:
            continue
        name = "_".join(part for part in (prefix, name) if part)
        value = getattr(record, f.name)
        if value is None:
            if f.metadata.get("mlflow_none") is not None:
                tags[name] = f.metadata["mlflow_none"]
        elif dataclasses.is_dataclass(value):
            inner_metrics, inner_tags = mlflow_record(value, name)
            metrics |= inner_metrics
            tags |= inner_tags
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isnan(value):
                metrics[name] = float(value)
        else:
            tags[name] = str(value).lower() if isinstance(value, bool) else str(
                value.value if isinstance(value, Enum) else value)
    return metrics, tags


def _export_verdict(client: MlflowClient, store: Store, campaign: CampaignRecord,
                    note: Callable[[Exported], None]) -> None:
    metrics, tags = verdict_values(store, campaign)
    # a verdict that changed (more seeds since) is a new run; the same one is found again
    digest = hashlib.sha256(json.dumps([metrics, tags], sort_keys=True).encode()).hexdigest()[:16]
    key = f"verdict/{campaign.name}/{digest}"
    experiment_id = _experiment(client, campaign.name)
    if key not in _runs_by_key(client, experiment_id):
        run = client.create_run(experiment_id, run_name="verdict", tags={KEY: key})
        _log(client, run.info.run_id, metrics=[(k, v, 0) for k, v in metrics.items()], tags=tags)
        client.set_terminated(run.info.run_id, "FINISHED")
        note(Exported("verdict", campaign.name, True))
    else:
        note(Exported("verdict", campaign.name, False))


class LiveExport:
    """MLflow kept up to date while studies run (`run --mlflow`, `compare --mlflow`, or [tracking] mlflow): a
    study's new runs after each of its trials ends, and a campaign's verdict when it is taken. A tracking store
    that fails midway is said once (`on_problem`) and left alone: the run goes on, the database holds every
    trial, and `robust-tune export --mlflow URI` adds what MLflow missed."""

    def __init__(self, db: str | None, uri: str, on_problem: Callable[[str], None]) -> None:
        with _mlflow_errors(uri):  # MLflow missing, or a tracking store it cannot reach: one line before anything runs
            mlflow_client(uri).search_experiments(max_results=1)
        self.db, self.uri, self.on_problem = db, uri, on_problem
        self.store: Store | None = None  # opened at the first export, once the study is stored
        self.failed = False

    def study(self, name: str) -> None:
        """The study's runs MLflow does not have yet."""
        self._export([name], [])

    def campaign(self, name: str) -> None:
        """A campaign's studies (every search replicate's) and its verdict."""
        if self.failed:
            return
        self.store = self.store or Store(self.db, create=False)
        record = self.store.require_campaign(name)
        self._export([study for method in record.methods for study in record.study_names(method)], [name])

    def _export(self, studies: list[str], campaigns: list[str]) -> None:
        if self.failed:
            return
        try:
            self.store = self.store or Store(self.db, create=False)
            export_to_mlflow(self.store, self.uri, studies, campaigns=campaigns)
        except UserError as error:
            self.failed = True
            self.on_problem(f"{error}; the run goes on without MLflow, its database holds everything: "
                            f"robust-tune export --mlflow {self.uri} adds what MLflow missed")
