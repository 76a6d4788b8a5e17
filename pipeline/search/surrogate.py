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

from pipeline.search.ax import gp_step, objective_model, read_experiment
from pipeline.spec.study_config import gp_options
from pipeline.store import sqlite_file
from pipeline.store.records import importance_minimum, importance_refused

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


def load_study_model(name: str, url: str, objective: str, strategy: str = "gp") -> StudyModel | None:
    """The GP of study `name` stored at `url` (see `model_options` for `strategy`); None when Ax has no record of
    it, it has fewer than MIN_TRIALS completed trials or the GP cannot be fitted. Reading never changes the
    database."""
    experiment = read_experiment(name, read_only_url(url))
    if experiment is None:
        return None
    return fit_gp(experiment, experiment.lookup_data(), objective, strategy)


def model_options(strategy: str) -> frozenset[str]:
    """The options of the GP that judges a study searched with `strategy`: its own GP's (kernel, warping, power
    transform) for a GP strategy; the default GP's for Sobol and random, which have no model of their own."""
    return gp_options(strategy) if strategy.startswith("gp") else frozenset()


def fit_gp(experiment: Any, data: Any, objective: str, strategy: str = "gp") -> StudyModel | None:
    """The study's own GP step (search.gp_step with `model_options(strategy)`, unclipped results) fitted on
    `data`; None with fewer than MIN_TRIALS completed trials or when it cannot be fitted."""
    if len({int(i) for i in data.df["trial_index"]}) < MIN_TRIALS:
        return None
    step = gp_step(options=model_options(strategy)).generator_specs[0]  # unfitted
    try:
        step.fit(experiment=experiment, data=data)
    except Exception:  # noqa: BLE001  (a model that cannot be fitted leaves the trials to speak alone)
        return None
    return StudyModel(step.fitted_adapter, dict(experiment.search_space.parameters), objective, experiment)


def predict_tried(experiment: Any, objective: str, strategy: str = "gp") -> dict[int, dict[str, float]]:
    """The study's GP fitted on every completed trial and its posterior of the objective at each of them, by Ax
    index ({"mean", "sd", "fitted_on"}); empty with fewer than MIN_TRIALS. Torch's random state is left as it
    was, so fitting never changes what the study proposes or trains next."""
    return judge_study(experiment, objective, importance=False, strategy=strategy)[0]


def judge_study(experiment: Any, objective: str, importance: bool = True, strategy: str = "gp"
                ) -> tuple[dict[int, dict[str, float]], dict[str, Any] | None]:
    """The study's GP fitted once on every completed trial: its prediction of each (see `predict_tried`) and, with
    `importance`, the importance of each searched parameter (`parameter_importance`; None when the GP cannot be
    fitted). Torch's random state is left as it was, so this never changes what the study proposes or trains next."""
    import torch

    with torch.random.fork_rng():
        model = fit_gp(experiment, experiment.lookup_data(), objective, strategy)
        if model is None:
            return {}, None
        tried = model.completed_trials()
        means, sds = model.predict([parameters for _, parameters in tried])
        view = parameter_importance(model, len(tried)) if importance else None
    return ({index: {"mean": float(mean), "sd": float(sd), "fitted_on": len(tried)}
             for (index, _), mean, sd in zip(tried, means, sds)}, view)


IMPORTANCE_GP_SAMPLES = 128  # posterior draws of the objective; the interval is their 5-95% range
IMPORTANCE_MC_POINTS = 512  # random points per Sobol matrix (A, B, and one per parameter)


def parameter_importance(model: StudyModel, completed: int) -> dict[str, Any]:
    """The share of the objective's variance over the search space that each searched parameter explains alone
    (its first-order Sobol index) under the study's GP, with a 90% interval over the GP's posterior draws:
    {"objective", "fitted_on", "minimum", "parameters": [{"name", "share", "low", "high"}, ...] (largest first)};
    with fewer than `importance_minimum` completed trials, "parameters" is empty and "note" says why.

    Saltelli's estimator, as Ax's ax.utils.sensitivity.sobol_measures computes it, on points drawn where the search
    draws them (uniform in each parameter's own scale, log ones in log), but over whole parameters: a choice the
    GP sees as one-hot columns moves as one value (Ax's utility moves each column alone, to values no trial has)."""
    import torch

    from ax.adapter.transforms.one_hot import OH_PARAM_INFIX

    names = list(model.parameters)
    minimum = importance_minimum(len(names))
    view: dict[str, Any] = {"objective": model.objective, "fitted_on": completed, "minimum": minimum,
                            "parameters": []}
    if (refused := importance_refused(completed, len(names))) is not None:
        view["note"] = refused
        return view
    gp, digest = objective_model(model.adapter, model.objective)
    columns = {name: [i for i, feature in enumerate(digest.feature_names)
                      if feature == name or feature.startswith(name + OH_PARAM_INFIX)] for name in names}
    rng = torch.Generator().manual_seed(0)  # the same draws at every run: the same numbers for the same trials

    def draw(n: int) -> torch.Tensor:
        """n points of the search space in the GP's input columns, each parameter drawn as the search draws it."""
        points = torch.empty(n, len(digest.feature_names), dtype=torch.double)
        for i, (low, high) in enumerate(digest.bounds):
            if i in digest.discrete_choices:
                choices = torch.tensor(digest.discrete_choices[i], dtype=torch.double)
                points[:, i] = choices[torch.randint(len(choices), (n,), generator=rng)]
            else:
                points[:, i] = low + (high - low) * torch.rand(n, generator=rng, dtype=torch.double)
        for indices in columns.values():
            if len(indices) > 1:  # one-hot: one category on per point
                on = torch.randint(len(indices), (n,), generator=rng)
                points[:, indices] = torch.nn.functional.one_hot(on, len(indices)).double()
        return points

    n = IMPORTANCE_MC_POINTS
    a, b = draw(n), draw(n)
    mixed = []
    for name in names:  # A with parameter `name` taken from B
        ab = a.clone()
        ab[:, columns[name]] = b[:, columns[name]]
        mixed.append(ab)
    with torch.no_grad():
        posterior = gp.posterior(torch.cat([a, b, *mixed]))
        draws = posterior.rsample_from_base_samples(torch.Size([IMPORTANCE_GP_SAMPLES]), torch.randn(
            IMPORTANCE_GP_SAMPLES, *posterior.base_sample_shape, generator=rng, dtype=torch.double))
    draws = draws[..., 0]  # (draws, points)
    f_a, f_b = draws[:, :n], draws[:, n:2 * n]
    variance = torch.cat([f_a, f_b], dim=1).var(dim=1)
    shares = torch.stack([(f_b * (draws[:, (2 + k) * n:(3 + k) * n] - f_a)).mean(dim=1) / variance
                          for k in range(len(names))], dim=1).clamp(0.0, 1.0)  # (draws, parameters)
    low, middle, high = torch.quantile(shares, torch.tensor([0.05, 0.5, 0.95], dtype=shares.dtype), dim=0)
    view["parameters"] = sorted(({"name": name, "share": float(middle[k]), "low": float(low[k]),
                                  "high": float(high[k])} for k, name in enumerate(names)),
                                key=lambda row: -row["share"])
    return view
