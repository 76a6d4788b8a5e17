"""A stored study's Gaussian process, for pictures: loaded from the database without writing to it.

Ax's `Client.load_from_database` saves the experiment back as it loads it, so this module reads
Ax's records directly, through a read-only connection (SQLite, PostgreSQL), and fits
the study's own GP step (search.generation_strategy) on the stored results. No trial is re-run.
Import this module only after `quiet_libraries` has routed Ax's output to a log file.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import numpy as np

import sqlalchemy as sa
from ax.core.observation import ObservationFeatures
from ax.storage.sqa_store import db as ax_db
from ax.storage.sqa_store.load import load_experiment

from pipeline.search import gp_step
from pipeline.store import sqlite_file

MIN_TRIALS = 3  # completed trials below which a GP over the searched parameters says nothing


def read_only_url(url: str) -> str:
    """`url` opened read-only where the database can say so (any write raises): a SQLite file, or
    PostgreSQL with read-only transactions; other databases as they are."""
    file = sqlite_file(url)
    if file is not None:
        return f"sqlite:///file:{quote(str(file.resolve()))}?mode=ro&uri=true"
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() == "postgresql" and "options" not in parsed.query:
        parsed = parsed.update_query_dict({"options": "-c default_transaction_read_only=on"})
    return parsed.render_as_string(hide_password=False)


@dataclass(frozen=True)
class Axis:
    """Values of one searched parameter to predict at: a choice's values, or a grid over a range."""

    name: str
    values: list[Any]
    log: bool = False
    choice: bool = False


class StudyModel:
    """The study's GP fitted on its stored trials; predicts the objective's mean and standard error."""

    def __init__(self, adapter: Any, parameters: dict[str, Any], objective: str, experiment: Any = None) -> None:
        self.adapter, self.parameters, self.objective = adapter, parameters, objective
        self.experiment = experiment

    def completed_trials(self) -> list[tuple[int, dict[str, Any]]]:
        """(index, parameters) of every completed trial, in trial order: the candidates of a model pick."""
        from ax.core.trial_status import TrialStatus

        return [(index, dict(trial.arm.parameters)) for index, trial in sorted(self.experiment.trials.items())
                if trial.status == TrialStatus.COMPLETED]

    def axis(self, name: str, points: int = 25, include: Any = None) -> Axis:
        """A grid over parameter `name` (log-spaced on a log scale, whole numbers for an integer),
        with `include` (the best trial's value) among its values so a map passes through it."""
        from ax.core.parameter import ChoiceParameter, ParameterType

        parameter = self.parameters[name]
        if isinstance(parameter, ChoiceParameter):
            return Axis(name, list(parameter.values), choice=True)
        spaced = np.geomspace if parameter.log_scale else np.linspace
        grid = [float(v) for v in spaced(parameter.lower, parameter.upper, points)]
        if parameter.parameter_type == ParameterType.INT:
            grid = [int(round(v)) for v in grid]
        values = sorted(set(grid) | ({include} if include is not None else set()))
        return Axis(name, values, log=parameter.log_scale)

    def predict(self, points: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
        """Predicted mean and standard error of the objective at each parameterisation."""
        means, covariances = self.adapter.predict([ObservationFeatures(parameters=dict(p)) for p in points])
        variances = covariances[self.objective][self.objective]
        return list(means[self.objective]), [max(v, 0.0) ** 0.5 for v in variances]


def load_study_model(name: str, url: str, objective: str) -> StudyModel | None:
    """The GP of study `name` stored at `url`; None when Ax has no record of it, it has fewer than
    MIN_TRIALS completed trials or the GP cannot be fitted. Reading never changes the database."""
    from ax.exceptions.core import ObjectNotFoundError

    ax_db.init_engine_and_session_factory(url=read_only_url(url), force_init=True)
    try:
        if not sa.inspect(ax_db.get_engine()).has_table("experiment_v2"):
            return None
        experiment = load_experiment(name)
    except ObjectNotFoundError:
        return None
    finally:  # the next user of Ax's session (a study run) points it at its own database again
        ax_db.get_engine().dispose()
    return fit_gp(experiment, experiment.lookup_data(), objective)


def fit_gp(experiment: Any, data: Any, objective: str) -> StudyModel | None:
    """The study's own GP step (search.gp_step, unclipped results) fitted on `data`; None with fewer than
    MIN_TRIALS completed trials or when it cannot be fitted."""
    if len({int(i) for i in data.df["trial_index"]}) < MIN_TRIALS:
        return None
    step = gp_step().generator_specs[0]  # unfitted
    try:
        step.fit(experiment=experiment, data=data)
    except Exception:  # noqa: BLE001  (a model that cannot be fitted leaves the trials to speak alone)
        return None
    return StudyModel(step.fitted_adapter, dict(experiment.search_space.parameters), objective, experiment)


def predict_tried(experiment: Any, objective: str) -> dict[int, dict[str, float]]:
    """The study's GP fitted on every completed trial and its posterior of the objective at each of them, by Ax
    index ({"mean", "sd", "fitted_on"}); empty with fewer than MIN_TRIALS. Torch's random state is left as it
    was, so fitting never changes what the study proposes or trains next."""
    import torch

    with torch.random.fork_rng():
        model = fit_gp(experiment, experiment.lookup_data(), objective)
        if model is None:
            return {}
        tried = model.completed_trials()
        means, sds = model.predict([parameters for _, parameters in tried])
    return {index: {"mean": float(mean), "sd": float(sd), "fitted_on": len(tried)}
            for (index, _), mean, sd in zip(tried, means, sds)}
