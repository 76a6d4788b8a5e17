"""The Ax side of a study: search space, generation strategy and the client, stored in SQL
(Ax's own SQL storage, in the tool's database; its tables made valid on PostgreSQL here).

The one module that touches Ax's storage and state: other modules call its functions and Searcher. It changes
no class of Ax's and no SQLAlchemy compilation for the process: the study's rule of deduplication holds for the
experiments made or loaded here (StudyExperiment), and Ax's tables get TEXT columns on PostgreSQL through a copy
of Ax's metadata. Where Ax 1.3 has no public way (`experiment`), the one access is named here and checked by
tests/search/test_ax_boundary.py against the Ax range pinned in pyproject.toml.

Generation strategy as the GI-LS paper used it (`gp`): seeded Sobol initialisation, then a BoTorch
SingleTaskGP with an ARD Matern-5/2 kernel (Ax's own default kernel is RBF, so it is set here). The
other GP strategies (study_config.STRATEGIES) change one thing each or several: BoTorch's current
default kernel and priors (`rbf`), learned input warping (`warp`), the Yeo-Johnson power transform of
the results (`power`), the centre of the box as the first trial (`centre`), and two that keep the
acquisition off the bounds of the box: a trust region around the best trial (`trust`) and a margin
inside each bound the best trial is not on (`margin`).
Import this module only after `quiet_libraries` has routed Ax's output to a log file.
"""
from __future__ import annotations

import dataclasses
import math
from contextlib import contextmanager
from io import StringIO
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence, TypeVar

import pandas as pd
import sqlalchemy as sa
from ax.adapter.registry import MBM_X_trans, Y_trans, Generators
from ax.adapter.transforms.derelativize import Derelativize
from ax.adapter.transforms.power_transform_y import PowerTransformY
from ax.adapter.transforms.standardize_y import StandardizeY
from ax.adapter.transforms.winsorize import Winsorize
from ax.api.client import Client
from ax.api.configs import ChoiceParameterConfig, RangeParameterConfig, StorageConfig
from ax.core.arm import Arm
from ax.core.experiment import Experiment
from ax.core.trial_status import TrialStatus
from ax.generation_strategy.center_generation_node import CenterGenerationNode
from ax.generation_strategy.generation_node import GenerationNode, GenerationStep
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.generation_strategy.generator_spec import GeneratorSpec
from ax.generation_strategy.transition_criterion import MinTrials
from ax.generators.torch.botorch_modular.acquisition import Acquisition
from ax.generators.torch.botorch_modular.kernels import DefaultMaternKernel
from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec
from ax.generators.torch.botorch_modular.utils import ModelConfig
from ax.core.search_space import SearchSpaceDigest
from ax.storage.botorch_modular_registry import register_acquisition
from ax.storage.sqa_store import db as ax_db
from botorch.models import SingleTaskGP
from botorch.models.transforms.input import Warp
from sqlalchemy.orm import scoped_session, sessionmaker

from pipeline.methods import parse_method
from pipeline.params import Choice, Range
from pipeline.store import Reconnecting, connect_args, create_missing_tables, watch
from pipeline.spec.study_config import StudyConfig, gp_options

if TYPE_CHECKING:
    from pipeline.store import StudyLock

T = TypeVar("T")
_CHOICE_TYPES: dict[str, Any] = {"bool": "bool", "choice": "str", "float": "float", "int": "int"}


def parameter_configs(study: StudyConfig) -> list[RangeParameterConfig | ChoiceParameterConfig]:
    """Ax parameters for the searched hyper-parameters (fixed ones never reach Ax)."""
    return range_and_choice_configs(study.search, {p.name: p.kind for p in parse_method(study.method).params})


def range_and_choice_configs(search: dict[str, Range | Choice],
                             kinds: dict[str, str]) -> list[RangeParameterConfig | ChoiceParameterConfig]:
    """Ax parameters for a search space as a study file writes it, each parameter of its `kinds`."""
    configs: list[RangeParameterConfig | ChoiceParameterConfig] = []
    for name, space in search.items():
        kind: Any = kinds[name]  # Ax's configs name their types by Literal strings
        if isinstance(space, Range):
            to = int if kind == "int" else float
            bounds = (to(space.low), to(space.high))
            configs.append(RangeParameterConfig(name=name, bounds=bounds, parameter_type=kind,
                                                scaling="log" if space.log else "linear"))
        elif isinstance(space, Choice):
            values: Any = list(space.values)
            configs.append(ChoiceParameterConfig(name=name, values=values, parameter_type=_CHOICE_TYPES[kind],
                                                 is_ordered=kind != "choice"))
    return configs


# The Gaussian process sees the results as they are: Ax's default outcome transforms also winsorise (clip the
# worst results up to a quartile minus 1.5 interquartile ranges), so a trial at 10% among trials near 80% is
# modelled as one near 60%, and the parameter maps drew a good region where a trial had collapsed.
GP_TRANSFORMS = [t for t in MBM_X_trans + Y_trans if t is not Winsorize]


# The power transform (Yeo-Johnson, fitted to the results) in place of BilogY, on unclipped results as well.
POWER_TRANSFORMS = [t for t in MBM_X_trans] + [Derelativize, PowerTransformY, StandardizeY]


TRUST_SIDE = 0.5  # `trust`: the side of the box around the best trial, as a share of each range (in its scale)
MARGIN = 0.05  # `margin`: how far inside each bound (a share of its range) the acquisition stays


# How hard the acquisition is optimised for one proposal: L-BFGS from `num_restarts` starting points, the best of
# `raw_samples` quasi-random points (per value of a choice parameter, which Ax enumerates). "ax": Ax's own defaults
# (20 restarts, 1,024 raw samples), left to Ax; the cheaper ones are measured in docs/design/search.md (Proposal cost).
ACQUISITION_EFFORTS: dict[str, dict[str, int]] = {
    "ax": {},
    "fast": {"num_restarts": 5, "raw_samples": 256},
    "fast2": {"num_restarts": 2, "raw_samples": 64},
}
ACQUISITION_EFFORT = "ax"  # what every GP strategy of a study uses


class BoxedAcquisition(Acquisition):
    """Ax's acquisition (log noisy expected improvement on the study's GP), optimised over a box inside the search
    space that `box` draws around the best trial so far; the whole space when there is none (several objectives,
    no data). Only continuous parameters are boxed: a choice keeps all its values."""

    def incumbent(self) -> Any:
        """The best observed point (the GP's inputs, in Ax's transformed space) of the one objective, or None."""
        import torch

        weights = self._full_objective_weights  # objectives x outcomes (a vector in older Ax)
        if weights.dim() == 2:
            if weights.shape[0] != 1:
                return None
            weights = weights[0]
        targets = torch.nonzero(weights).flatten().tolist()
        if len(targets) != 1:
            return None
        column = 0
        for dataset in self.surrogate.training_data:
            width = dataset.Y.shape[-1]
            if column <= targets[0] < column + width and len(dataset.Y):
                values = dataset.Y[..., targets[0] - column] * torch.sign(weights[targets[0]])
                return dataset.X[int(torch.argmax(values))]
            column += width
        return None

    def box(self, unit: list[float]) -> list[tuple[float, float]]:
        """The box to search, in the unit cube, given the best trial's point `unit` there."""
        return [(0.0, 1.0)] * len(unit)

    def optimize(self, n: int, search_space_digest: SearchSpaceDigest, *args: Any, **kwargs: Any) -> Any:
        best = self.incumbent()
        ssd = search_space_digest
        if best is not None:
            discrete = set(ssd.discrete_choices) | set(ssd.categorical_features) | set(ssd.task_features) | set(
                ssd.fidelity_features)
            continuous = [i not in discrete and high > low for i, (low, high) in enumerate(ssd.bounds)]
            unit = [(float(x) - low) / (high - low) if keep else 0.0
                    for x, (low, high), keep in zip(best.tolist(), ssd.bounds, continuous)]
            bounds = [(low + (high - low) * a, low + (high - low) * b) if keep else (low, high)
                      for (low, high), (a, b), keep in zip(ssd.bounds, self.box(unit), continuous)]
            ssd = dataclasses.replace(ssd, bounds=bounds)
        return super().optimize(n, ssd, *args, **kwargs)


class TrustRegionAcquisition(BoxedAcquisition):
    """`trust`: the acquisition optimised within a box of side TRUST_SIDE (of each range) centred on the best trial,
    clipped to the search space (a fixed trust region, as TuRBO draws one around its incumbent)."""

    def box(self, unit: list[float]) -> list[tuple[float, float]]:
        half = TRUST_SIDE / 2
        return [(max(0.0, u - half), min(1.0, u + half)) for u in unit]


class MarginAcquisition(BoxedAcquisition):
    """`margin`: the acquisition optimised inside [MARGIN, 1 - MARGIN] of each range, except at an end the best
    trial lies within MARGIN of: a bound is searched once the best trial has come to it."""

    def box(self, unit: list[float]) -> list[tuple[float, float]]:
        reach = MARGIN + 1e-6
        return [(0.0 if u <= reach else MARGIN, 1.0 if u >= 1 - reach else 1 - MARGIN) for u in unit]


register_acquisition(TrustRegionAcquisition)  # so that Ax's storage writes and reads the strategies that name them
register_acquisition(MarginAcquisition)


def gp_generator_kwargs(winsorize: bool = False, options: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Ax's BoTorch generator for a GP strategy: the SingleTaskGP with an ARD Matern-5/2 kernel, or with
    BoTorch's own default (`rbf`: RBF, dimension-scaled log-normal lengthscale priors), with learned input
    warping (`warp`: a Kumaraswamy CDF per input); fitted on the objectives and constrained metrics alone, on
    unclipped results unless `winsorize`, power-transformed with `power`; its acquisition optimised in a box around
    the best trial with `trust`, or off the bounds the best trial is not on with `margin`."""
    config: dict[str, Any] = {"botorch_model_class": SingleTaskGP}
    if "rbf" not in options:
        config.update(covar_module_class=DefaultMaternKernel, covar_module_options={"nu": 2.5})
    if "warp" in options:
        config["input_transform_classes"] = [Warp]
    name = "SingleTaskGP_" + ("RBF" if "rbf" in options else "Matern52") + ("_Warp" if "warp" in options else "")
    kwargs: dict[str, Any] = {"surrogate_spec": SurrogateSpec(model_configs=[ModelConfig(**config, name=name)]),
                              "fit_tracking_metrics": False}  # metrics nothing ranks on are not modelled
    if "trust" in options:
        kwargs["acquisition_class"] = TrustRegionAcquisition
    elif "margin" in options:
        kwargs["acquisition_class"] = MarginAcquisition
    if "power" in options:
        kwargs["transforms"] = POWER_TRANSFORMS
    elif not winsorize:
        kwargs["transforms"] = GP_TRANSFORMS
    return kwargs


def gp_gen_kwargs(effort: str | None = None) -> dict[str, Any]:
    """What Ax's GP generator is given for each proposal: the acquisition optimiser's settings of `effort`
    (ACQUISITION_EFFORTS; None: ACQUISITION_EFFORT, the study's)."""
    settings = ACQUISITION_EFFORTS[effort or ACQUISITION_EFFORT]
    return {"model_gen_options": {"optimizer_kwargs": dict(settings)}} if settings else {}


def gp_step(winsorize: bool = False, options: frozenset[str] = frozenset(),
            effort: str | None = None) -> GenerationNode:
    """The study's Gaussian process step (see `gp_generator_kwargs`), its acquisition optimised with `effort`."""
    return GenerationStep(generator=Generators.BOTORCH_MODULAR, num_trials=-1, should_deduplicate=True,
                          generator_kwargs=gp_generator_kwargs(winsorize, options),
                          generator_gen_kwargs=gp_gen_kwargs(effort))


def centred_strategy(initial_trials: int, seed: int, options: frozenset[str],
                     effort: str | None = None) -> GenerationStrategy:
    """The centre of the box first (Ax's current default start), then Sobol up to `initial_trials` in all, then
    the GP of `options`: Ax's node graph, as Ax's own default strategy builds it."""
    gp = GenerationNode(name="GP", should_deduplicate=True, generator_specs=[GeneratorSpec(
        generator_enum=Generators.BOTORCH_MODULAR, generator_kwargs=gp_generator_kwargs(False, options),
        generator_gen_kwargs=gp_gen_kwargs(effort))])
    sobol_trials = initial_trials - 1  # the centre is one of the initial trials
    nodes: list[GenerationNode] = [gp]
    if sobol_trials > 0:
        nodes.insert(0, GenerationNode(
            name="Sobol", should_deduplicate=True,
            generator_specs=[GeneratorSpec(generator_enum=Generators.SOBOL, generator_kwargs={"seed": seed})],
            transition_criteria=[
                MinTrials(threshold=sobol_trials, transition_to="GP",
                          not_in_statuses=[TrialStatus.FAILED, TrialStatus.ABANDONED]),
                MinTrials(threshold=sobol_trials, transition_to="GP",
                          only_in_statuses=[TrialStatus.COMPLETED, TrialStatus.EARLY_STOPPED],
                          count_only_trials_with_data=True)]))
    nodes.insert(0, CenterGenerationNode(next_node_name=nodes[0].name))
    return GenerationStrategy(name=f"Center+Sobol{sobol_trials}+" + gp_node_name(options), nodes=nodes)


def gp_node_name(options: frozenset[str]) -> str:
    """A GP strategy's name in Ax's records, e.g. GP_Matern52 or GP_RBF+Warp+Power."""
    return "+".join(["GP_RBF" if "rbf" in options else "GP_Matern52"]
                    + [o.capitalize() for o in ("warp", "power", "trust", "margin") if o in options])


def generation_strategy(initial_trials: int, seed: int, strategy: str = "gp", winsorize: bool = False,
                        effort: str | None = None) -> GenerationStrategy:
    """The study's generation strategy (study_config.STRATEGIES): `gp` and the other GP strategies start with
    `initial_trials` seeded Sobol trials (the first of them the centre of the box with `centre`), then the
    Gaussian process of `gp_generator_kwargs`, its acquisition optimised with `effort` (ACQUISITION_EFFORTS);
    `sobol` and `random` propose every trial without a model.

    Every step refuses to propose parameters already tried; a trial that raised is marked
    abandoned (not failed) in Ax, so its parameters count as tried and are not proposed again, and so do an
    interrupted trial's, failed in Ax and run again (see `StudyExperiment`)."""
    if strategy == "sobol":
        return GenerationStrategy(name="Sobol", nodes=[GenerationStep(
            generator=Generators.SOBOL, num_trials=-1, generator_kwargs={"seed": seed}, should_deduplicate=True)])
    if strategy == "random":
        return GenerationStrategy(name="Uniform", nodes=[GenerationStep(
            generator=Generators.UNIFORM, num_trials=-1, generator_kwargs={"seed": seed}, should_deduplicate=True)])
    options = gp_options(strategy)
    if "centre" in options:
        return centred_strategy(initial_trials, seed, options, effort)
    name = f"Sobol{initial_trials}+GP_Matern52" if strategy == "gp" else f"Sobol{initial_trials}+" + gp_node_name(
        options)
    return GenerationStrategy(name=name, nodes=[
        GenerationStep(generator=Generators.SOBOL, num_trials=initial_trials, min_trials_observed=initial_trials,
                       generator_kwargs={"seed": seed}, should_deduplicate=True),
        gp_step(winsorize, options, effort),
    ])


def study_strategy(study: StudyConfig) -> GenerationStrategy:
    """The study's strategy, seeded by its search seed (the training seed is the trials' own)."""
    return generation_strategy(min(study.budget.initial, study.budget.trials), study.search_seed, study.strategy)


class StudyExperiment(Experiment):
    """An Ax experiment of a study: Ax's own, but every arm counts as tried when a strategy deduplicates."""

    @property
    def arms_by_signature_for_deduplication(self) -> dict[str, Arm]:
        """Every arm of the experiment, by signature. Ax's own rule leaves out the arms of failed trials, and a study
        marks failed only a trial that was interrupted, whose parameters it runs again itself (Searcher.rerun) under
        the same arm: Ax's rule then dropped the rerun's arm too, and a strategy could propose those parameters once
        more, to be trained and completed a second time."""
        return self.arms_by_signature


def follow_study_rules(experiment: Experiment) -> Experiment:
    """`experiment` (one this module created or loaded) made a StudyExperiment, in place: the study's rule of
    deduplication holds for it alone, not for every Ax experiment of the process."""
    if not isinstance(experiment, StudyExperiment):
        experiment.__class__ = StudyExperiment
    return experiment


def experiment(client: Client) -> Experiment:
    """The experiment `client` holds. Ax 1.3's Client has no public accessor for it: `Client._experiment` (a
    property) is the one read of the client's state, here alone (tests/search/test_ax_boundary.py checks it)."""
    return client._experiment


def _ax_tables_on_postgresql() -> sa.MetaData:
    """Ax's tables as they are created on PostgreSQL: a copy of Ax's metadata whose text columns are TEXT, without
    their MySQL lengths (PostgreSQL refuses TEXT(4294967295)) and without any length limit, as on SQLite, which
    ignores lengths (Ax stores JSON longer than the 4096 characters it declares). Ax's own metadata, and every
    other table of the process, keep their types."""
    copy = sa.MetaData()
    for table in ax_db.Base.metadata.sorted_tables:
        for column in table.to_metadata(copy).columns:
            kind = column.type.impl if isinstance(column.type, sa.types.TypeDecorator) else column.type
            if type(kind) in (sa.String, sa.VARCHAR, sa.Text, sa.TEXT):
                column.type = sa.TEXT()
    return copy


def create_ax_tables(engine: sa.Engine) -> None:
    """Create Ax's tables that `engine`'s database lacks (on PostgreSQL with TEXT columns: _ax_tables_on_postgresql)."""
    if engine.dialect.name == "postgresql":
        _ax_tables_on_postgresql().create_all(engine)
    else:
        ax_db.create_all_tables(engine)


def use_database(url: str) -> StorageConfig:
    """Point Ax's process-wide SQL session at `url` and create its tables there; its connections wait for another
    process's locks as long as the Store's, and on a server are tested before each use (a restart between two uses
    passes unseen)."""
    factory = ax_db.SESSION_FACTORY
    if factory is None or ax_db.get_engine().url.render_as_string(hide_password=False) != url:
        parsed = sa.engine.make_url(url)  # connections opened and tested as the Store's are
        ax_db.init_engine_and_session_factory(url=url, force_init=factory is not None,
                                              connect_args=connect_args(parsed),
                                              pool_pre_ping=parsed.get_backend_name() != "sqlite")
    watch(ax_db.get_engine())  # a fault Ax's retry hides is still the one named (pipeline/store/health.py)
    create_missing_tables(create_ax_tables, ax_db.get_engine())
    return StorageConfig(url=url)


@contextmanager
def ax_writes_through(connection: sa.Connection) -> Iterator[None]:
    """Inside the block Ax reads and writes through `connection`, in its open transaction: what Ax
    stores is committed or rolled back with the rest of that transaction (Ax's own commits only flush)."""
    previous = ax_db.SESSION_FACTORY
    ax_db.SESSION_FACTORY = scoped_session(sessionmaker(
        bind=connection, expire_on_commit=False, join_transaction_mode="rollback_only"))
    try:
        yield
    finally:
        ax_db.SESSION_FACTORY.remove()
        ax_db.SESSION_FACTORY = previous


def configure_goals(client: Client, study: StudyConfig) -> None:
    """The study's objectives and constraints as Ax's Client takes them: several objectives ("a, b") make a
    multi-objective optimisation (Ax's GP step then uses qLogNEHVI, on the study's own kernel), and a constraint
    on one of them becomes its objective threshold."""
    client.configure_optimization(objective=", ".join(study.all_objectives),
                                  outcome_constraints=list(study.constraints) or None)


def new_client(study: StudyConfig, url: str) -> Client:
    """Create the study's Ax experiment in the database (inside `ax_writes_through`: in its transaction)."""
    client = Client(storage_config=StorageConfig(url=url), random_seed=study.search_seed)
    client.configure_experiment(parameters=parameter_configs(study), name=study.name)
    follow_study_rules(experiment(client))
    configure_goals(client, study)
    client.set_generation_strategy(study_strategy(study))
    return client


def in_memory_client(parameters: Sequence[RangeParameterConfig | ChoiceParameterConfig], name: str, seed: int,
                     strategy: GenerationStrategy) -> Client:
    """An Ax client that stores nothing, maximising one metric "value" over `parameters` with `strategy`, under the
    study's rules (the benchmarks drive a strategy through it as a study would)."""
    client = Client(random_seed=seed)
    client.configure_experiment(parameters=parameters, name=name)
    follow_study_rules(experiment(client))
    client.configure_optimization(objective="value")
    client.set_generation_strategy(strategy)
    return client


def widen_search_space(experiment: Experiment, ranges: Mapping[str, Range]) -> None:
    """Give `experiment`'s range parameters the (wider) bounds of `ranges` and store its search space (inside
    `ax_writes_through`: in that transaction) when Ax's storage holds the experiment (an experiment of a client
    without storage, as the search benchmark's, is widened in memory only). The trials already run stay inside,
    so the model keeps them all."""
    from ax.storage.sqa_store.save import save_experiment

    space = experiment.search_space.clone()
    for name, bounds in ranges.items():
        parameter = space.parameters[name]
        to = int if parameter.parameter_type.name == "INT" else float
        parameter.update_range(lower=to(bounds.low), upper=to(bounds.high))  # type: ignore[attr-defined]
    experiment.search_space = space
    if experiment.db_id is not None:
        save_experiment(experiment)


def has_experiment(name: str) -> bool:
    """Whether Ax stores an experiment named `name`."""
    from ax.storage.sqa_store.db import session_scope
    from ax.storage.sqa_store.sqa_classes import SQAExperiment

    with session_scope() as session:
        return session.query(SQAExperiment.id).filter_by(name=name).first() is not None


def read_experiment(name: str, url: str) -> Experiment | None:
    """Ax's experiment `name` loaded through `url` (a read-only one: Client.load_from_database saves what it loads);
    None when Ax has no record of it. Ax's session is left pointing nowhere usable: the next user of Ax's storage
    (a study run, `use_database`) points it at its own database again."""
    from ax.exceptions.core import ObjectNotFoundError
    from ax.storage.sqa_store.load import load_experiment
    from ax.storage.sqa_store.sqa_classes import SQAExperiment

    ax_db.init_engine_and_session_factory(url=url, force_init=True)
    try:
        if not sa.inspect(ax_db.get_engine()).has_table(SQAExperiment.__table__.name):
            return None
        return load_experiment(name)
    except ObjectNotFoundError:
        return None
    finally:
        ax_db.get_engine().dispose()


def objective_model(adapter: Any, metric: str) -> tuple[Any, SearchSpaceDigest]:
    """The BoTorch model of `metric` inside a fitted GP step's `adapter` (Ax's TorchAdapter over a BoTorchGenerator),
    and the search space digest it was fitted in: what ax.utils.sensitivity.sobol_measures reads, by the
    adapter's, generator's and surrogate's public attributes."""
    from ax.adapter.torch import TorchAdapter
    from ax.generators.torch.botorch_modular.generator import BoTorchGenerator

    if not isinstance(adapter, TorchAdapter) or not isinstance(adapter.generator, BoTorchGenerator):
        raise TypeError(f"not a BoTorch GP step's adapter: {type(adapter).__name__}")
    generator = adapter.generator
    model = generator.surrogate.model
    if model.num_outputs > 1:
        model = model.subset_output([generator.surrogate.outcomes.index(metric)])
    return model, generator.search_space_digest


def delete_experiment(name: str) -> None:
    """Delete Ax's experiment `name` and its generation strategy, if Ax has them."""
    from ax.storage.sqa_store import delete as ax_delete

    if has_experiment(name):
        ax_delete.delete_generation_strategy(name)
        ax_delete.delete_experiment(name)


def load_client(study: StudyConfig, url: str) -> Client:
    """Reload the study's Ax experiment and generation strategy from the database."""
    use_database(url)
    return _load_client(study, url)


def _load_client(study: StudyConfig, url: str, complete: bool = False) -> Client:
    """`load_client` once Ax's session is set up (`use_database`, or `ax_writes_through`), seeded by the study's
    search seed, as Client.load_from_database loads it: the experiment and its strategy saved back as they are set,
    a write like any other. With `complete`, an objective or strategy the records lack is set (see `open_client`)."""
    from ax.exceptions.core import ObjectNotFoundError
    from ax.storage.sqa_store.load import load_experiment, load_generation_strategy_by_experiment_name

    client = Client(storage_config=StorageConfig(url=url), random_seed=study.search_seed)
    stored = follow_study_rules(load_experiment(study.name))
    client.set_experiment(stored)
    try:
        client.set_generation_strategy(load_generation_strategy_by_experiment_name(study.name, experiment=stored))
        has_strategy = True
    except ObjectNotFoundError:
        has_strategy = False
    if complete and stored.optimization_config is None:
        configure_goals(client, study)
    if complete and not has_strategy:
        client.set_generation_strategy(study_strategy(study))
    return client


def open_client(study: StudyConfig, url: str) -> Client:
    """The study's stored Ax client, once Ax's session is set up (as for `_load_client`). Earlier versions
    created Ax's records after the study's row, so a process killed in between left a study without them, or
    an experiment without its objective or strategy: those are completed here."""
    if not has_experiment(study.name):  # asked first: a failed load would roll back the transaction it runs in
        return new_client(study, url)  # a study stored by an earlier version, which created Ax's records apart
    return _load_client(study, url, complete=True)


def standard_error(values: list[float]) -> float:
    """The standard error of the mean of `values` (sample standard deviation over the square root of n)."""
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))


def as_stored(value: float) -> float:
    """`value` as Ax's SQL storage gives it back: a trial's data is stored as pandas JSON, at 10 decimals.
    Ax is told this value, so the process that ran a trial and one that resumes the study later fit the
    Gaussian process on the same numbers and propose the same parameters."""
    if not math.isfinite(value):  # JSON has no NaN or infinity; Ax's storage has its own way with them
        return value
    stored = pd.DataFrame({"mean": [float(value)]}).to_json()  # as Ax's encoder writes Data
    return float(pd.read_json(StringIO(stored), dtype=False)["mean"].iloc[0])  # as its decoder reads it


def told(metrics: dict[str, float], name: str,
         seed_runs: Sequence[dict[str, float]] = ()) -> float | tuple[float, float]:
    """What Ax is told of metric `name` of a trial: its value as Ax's storage gives it back (see `as_stored`); for
    a trial trained on several seeds (each one's metrics in `seed_runs`), their mean and its standard error (Ax
    then models the noise it is told)."""
    value = as_stored(metrics[name])
    return (value, as_stored(standard_error([run[name] for run in seed_runs]))) if seed_runs else value


class Searcher:
    """Ax's side of the study loop (the pictures read Ax's records apart, in surrogate.py): ask for one
    trial, tell how it ended, run interrupted parameters again. A trial asked for and not yet told is pending
    (running in Ax), and Ax's proposals keep away from pending trials, so trials may run in parallel.
    With the study's `lock`, every write to Ax's records is committed only while this process holds it."""

    def __init__(self, study: StudyConfig, url: str, lock: StudyLock | None = None) -> None:
        use_database(url)  # Ax's tables and session, before its writes go through the lock's transaction
        self.study, self.url = study, url
        self.metrics = study.told_metrics  # every objective and constrained metric
        self.lock = lock
        self.reload = False  # a write lost its connection: Ax's client in memory may hold what was not stored
        # loading writes Ax's records back: only while this process holds the lock
        self.client = self._write(lambda connection: open_client(study, url))

    @property
    def experiment(self) -> Experiment:
        """The study's Ax experiment (its trials, data and search space)."""
        return experiment(self.client)

    def _write(self, write: Callable[[sa.Connection | None], T]) -> T:
        """`write(connection)`: Ax's writes, and those it makes through `connection` itself. With the lock, in one
        transaction that commits only while this process holds it (LockLost otherwise, and nothing stored), made
        again once the server answers when the connection was lost (pipeline/store/reconnect.py), Ax's client
        first reloaded from what is stored: the failed attempt may have changed it in memory. Without a lock, as
        Ax makes them (`connection` None)."""
        lock = self.lock
        if lock is None:
            return write(None)

        def attempt() -> T:
            with lock.fenced() as connection, ax_writes_through(connection):
                if self.reload:
                    self.client = open_client(self.study, self.url)
                    self.reload = False
                return write(connection)

        def forget() -> None:
            self.reload = True

        return Reconnecting.of(lock.engine).run(attempt, after_loss=forget)

    def ask(self, waiting: bool = False) -> tuple[int, dict[str, Any]] | str | None:
        """A new trial's index and parameters; None when every remaining proposal was tried already;
        "wait" when Ax proposes nothing until a running trial ends (`waiting`: some are running), as
        when the Sobol trials are all out and the Gaussian process has no data yet."""
        from ax.exceptions.core import DataRequiredError, SearchSpaceExhausted
        from ax.exceptions.generation_strategy import GenerationStrategyRepeatedPoints

        try:  # may return fewer than asked
            proposals = self._write(lambda connection: self.client.get_next_trials(max_trials=1))
        except (GenerationStrategyRepeatedPoints, SearchSpaceExhausted):  # the GP's way, and Sobol's
            return None
        except DataRequiredError:
            if waiting:
                return "wait"
            raise
        if not proposals and waiting:
            return "wait"
        if not proposals:
            raise RuntimeError("Ax proposed no trial; see the library log")
        index, parameters = next(iter(proposals.items()))
        return index, dict(parameters)

    def rerun(self, index: int) -> int:
        """A new pending trial that runs interrupted trial `index` again: its parameters, proposed by the same
        step of the strategy. The new trial counts toward that step as the interrupted one would have (the
        Sobol step ends after `initial` trials it proposed that did not fail), so the study goes on to the
        same proposals as if nothing had stopped; a trial attached with the parameters alone would belong to
        no step, and Sobol would propose one trial more."""
        from ax.storage.sqa_store.save import save_or_update_trial

        def rerun(connection: sa.Connection | None) -> int:
            trial = self.experiment.new_trial(generator_run=self.experiment.trials[index].generator_runs[0].clone())
            trial.mark_running(no_runner_required=True)
            save_or_update_trial(self.experiment, trial)
            return trial.index

        return self._write(rerun)

    def complete(self, index: int, metrics: dict[str, float], seed_runs: Sequence[dict[str, float]] = ()) -> None:
        """A trial that ended: each objective and constrained metric to Ax (see `told`)."""
        raw = {name: told(metrics, name, seed_runs) for name in self.metrics}
        self._write(lambda connection: self.client.complete_trial(trial_index=index, raw_data=raw))

    def early_stop(self, index: int, metrics: dict[str, float]) -> None:
        """A trial stopped early: Ax is told its metrics where it stopped, and that it stopped (Ax's early-stopped
        status: the model fits that value, and the parameters are not proposed again)."""
        raw = {name: told(metrics, name) for name in self.metrics}

        def early_stop(connection: sa.Connection | None) -> None:
            self.client.attach_data(trial_index=index, raw_data=raw)
            self.client.mark_trial_early_stopped(trial_index=index)

        self._write(early_stop)

    def tell_prefixes(self, observations: list[tuple[dict[str, Any], dict[str, float]]],
                      store_them: Callable[[sa.Connection | None, list[int]], None]) -> list[int]:
        """Tell Ax each (parameters, metrics) as a completed trial of its own (an epoch prefix of a trained trial),
        and have `store_them` write them with the indices Ax gave, in the same transaction: all are stored and
        told, or none. Returns the indices."""
        def tell(connection: sa.Connection | None) -> list[int]:
            indices = []
            for parameters, metrics in observations:
                index = self.client.attach_trial(parameters=parameters)
                self.client.complete_trial(trial_index=index, raw_data={name: told(metrics, name)
                                                                        for name in self.metrics})
                indices.append(index)
            store_them(connection, indices)
            return indices

        return self._write(tell)

    def widen(self, ranges: Mapping[str, Range], store_them: Callable[[sa.Connection | None], None]) -> None:
        """Widen the study's search space to `ranges` and have `store_them` record why, in the same transaction:
        Ax searches the wider space and the table says so, or neither."""
        def widen(connection: sa.Connection | None) -> None:
            widen_search_space(self.experiment, ranges)
            store_them(connection)

        self._write(widen)

    def abandon(self, index: int) -> None:
        """A trial that raised: abandoned in Ax, so its parameters count as tried and are not proposed again."""
        self._write(lambda connection: self.client.mark_trial_abandoned(trial_index=index))

    def mark_failed(self, index: int, reason: str) -> None:
        """A trial stopped before it ended (its parameters run again as a new trial): failed in Ax, which
        keeps it out of the model's data."""
        self._write(lambda connection: self.client.mark_trial_failed(trial_index=index, failed_reason=reason))

    def pending(self) -> list[int]:
        """Trials asked for and not yet told (running in Ax)."""
        return sorted(self.experiment.trial_indices_by_status[TrialStatus.RUNNING])

    def status(self, index: int) -> str:
        """Ax's status of a trial, lower case: running, completed, failed, abandoned, ..."""
        return self.experiment.trials[index].status.name.lower()

    def parameters(self, index: int) -> dict[str, Any]:
        """The parameters of Ax's trial `index`."""
        return dict(self.experiment.trials[index].arms[0].parameters)  # a study's trial has one arm
