"""The Ax side of a study: search space, generation strategy and the client, stored in SQL.

Generation strategy as the GI-LS paper used it: seeded Sobol initialisation, then a BoTorch
SingleTaskGP with an ARD Matern-5/2 kernel (Ax's own default kernel is RBF, so it is set here).
Import this module only after `quiet_libraries` has routed Ax's output to a log file.
"""
from __future__ import annotations

from ax.adapter.registry import Generators
from ax.api.client import Client
from ax.api.configs import ChoiceParameterConfig, RangeParameterConfig, StorageConfig
from ax.core.trial_status import TrialStatus
from ax.exceptions.core import ObjectNotFoundError
from ax.generation_strategy.generation_node import GenerationStep
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.generators.torch.botorch_modular.kernels import DefaultMaternKernel
from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec
from ax.generators.torch.botorch_modular.utils import ModelConfig
from ax.storage.sqa_store import db as ax_db
from botorch.models import SingleTaskGP

from pipeline.methods import parse_method
from pipeline.params import Choice, Range
from pipeline.study_config import StudyConfig

_CHOICE_TYPES = {"bool": "bool", "choice": "str", "float": "float", "int": "int"}


def parameter_configs(study: StudyConfig) -> list[RangeParameterConfig | ChoiceParameterConfig]:
    """Ax parameters for the searched hyper-parameters (fixed ones never reach Ax)."""
    kinds = {p.name: p.kind for p in parse_method(study.method).params}
    configs: list[RangeParameterConfig | ChoiceParameterConfig] = []
    for name, space in study.search.items():
        if isinstance(space, Range):
            to = int if kinds[name] == "int" else float
            bounds = (to(space.low), to(space.high))
            configs.append(RangeParameterConfig(name=name, bounds=bounds, parameter_type=kinds[name],
                                                scaling="log" if space.log else "linear"))
        elif isinstance(space, Choice):
            configs.append(ChoiceParameterConfig(name=name, values=list(space.values),
                                                 parameter_type=_CHOICE_TYPES[kinds[name]],
                                                 is_ordered=kinds[name] != "choice"))
    return configs


def generation_strategy(initial_trials: int, seed: int) -> GenerationStrategy:
    """Seeded Sobol for `initial_trials`, then a GP with an ARD Matern-5/2 kernel.

    Both steps refuse to propose parameters already tried; a trial that raised is marked
    abandoned (not failed) in Ax, so its parameters count as tried and are not proposed again."""
    matern = ModelConfig(botorch_model_class=SingleTaskGP, covar_module_class=DefaultMaternKernel,
                         covar_module_options={"nu": 2.5}, name="SingleTaskGP_Matern52")
    return GenerationStrategy(name=f"Sobol{initial_trials}+GP_Matern52", nodes=[
        GenerationStep(generator=Generators.SOBOL, num_trials=initial_trials, min_trials_observed=initial_trials,
                       generator_kwargs={"seed": seed}, should_deduplicate=True),
        GenerationStep(generator=Generators.BOTORCH_MODULAR, num_trials=-1, should_deduplicate=True, generator_kwargs={
            "surrogate_spec": SurrogateSpec(model_configs=[matern]),
            "fit_tracking_metrics": False,  # test accuracy and friends are recorded, not modelled
        }),
    ])


def use_database(url: str) -> StorageConfig:
    """Point Ax's process-wide SQL session at `url` and create its tables there."""
    factory = ax_db.SESSION_FACTORY
    if factory is None or str(ax_db._bound_engine(factory).url) != url:
        ax_db.init_engine_and_session_factory(url=url, force_init=factory is not None)
    ax_db.create_all_tables(ax_db.get_engine())
    return StorageConfig(url=url)


def new_client(study: StudyConfig, url: str) -> Client:
    """Create the study's Ax experiment in the database."""
    client = Client(storage_config=use_database(url), random_seed=study.seed)
    client.configure_experiment(parameters=parameter_configs(study), name=study.name)
    client.configure_optimization(objective=study.objective)
    client.set_generation_strategy(generation_strategy(min(study.budget.initial, study.budget.trials), study.seed))
    return client


def load_client(study: StudyConfig, url: str) -> Client:
    """Reload the study's Ax experiment and generation strategy from the database."""
    client = Client.load_from_database(experiment_name=study.name, storage_config=use_database(url))
    client._random_seed = study.seed  # not restored by load_from_database
    return client


def open_client(study: StudyConfig, url: str) -> Client:
    """The study's stored Ax client, or a new one when Ax has not stored the study yet."""
    try:
        return load_client(study, url)
    except ObjectNotFoundError:
        return new_client(study, url)


def running_trials(client: Client) -> list[int]:
    """Ax trials still marked running (left behind by a process that was killed)."""
    return sorted(client._experiment.trial_indices_by_status[TrialStatus.RUNNING])


def exhausted_error() -> type[Exception]:
    """What Ax raises when it can propose no parameters that were not tried already."""
    from ax.exceptions.generation_strategy import GenerationStrategyRepeatedPoints

    return GenerationStrategyRepeatedPoints


def fitted_model(client: Client):
    """The BoTorch model the strategy would use for the next proposal (fits it if needed)."""
    adapter = client._generation_strategy.fit(experiment=client._experiment)
    return adapter.generator.surrogate.model
