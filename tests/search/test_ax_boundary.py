"""The Ax boundary: pipeline/search/ax.py is the one module that touches Ax's storage and state, it changes no class
of Ax's or SQLAlchemy's for the rest of the process, and the Ax it was written against is the one installed."""
import ast
import json
import subprocess
import sys
import tomllib
from importlib.metadata import version

from packaging.specifiers import SpecifierSet

from helpers import ROOT, study_file

SNAPSHOT = r"""
import importlib, json, pkgutil, sys
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from ax.api.client import Client
from ax.core.experiment import Experiment
from ax.storage.sqa_store import db as ax_db
from botorch.models import SingleTaskGP

TYPES = (sa.String, sa.VARCHAR, sa.Text, sa.TEXT)


def snapshot():
    classes = {c.__name__: {k: id(v) for k, v in vars(c).items()} for c in (Client, Experiment, SingleTaskGP)}
    dispatch = {t.__name__: id(vars(t).get("_compiler_dispatch")) for t in TYPES}
    compiled = [str(t(10).compile(dialect=postgresql.dialect())) for t in TYPES]
    return {"classes": classes, "dispatch": dispatch, "compiled": compiled, "factory": id(ax_db.SESSION_FACTORY)}


before = snapshot()
import pipeline
for module in pkgutil.walk_packages(pipeline.__path__, "pipeline."):
    if not module.name.startswith("pipeline.store.migrations"):  # Alembic's scripts, run by Alembic alone
        importlib.import_module(module.name)
after = snapshot()
print(json.dumps({"before": before, "after": after, "ax": "pipeline.search.ax" in sys.modules}))
"""


def test_importing_every_pipeline_module_leaves_axs_classes_and_sqlalchemy_s_compilation_as_they_were():
    done = subprocess.run([sys.executable, "-c", SNAPSHOT], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["ax"]  # the adapter itself was imported
    assert seen["after"]["classes"] == seen["before"]["classes"]
    assert seen["after"]["dispatch"] == seen["before"]["dispatch"]
    assert seen["after"]["factory"] == seen["before"]["factory"]
    assert seen["after"]["compiled"] == ["VARCHAR(10)", "VARCHAR(10)", "TEXT(10)", "TEXT(10)"]


def _ax_names(tree: ast.Module) -> set[str]:
    """The classes (capitalised names) a module imports from Ax or BoTorch."""
    return {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] in ("ax", "botorch") for alias in node.names
            if alias.name[0].isupper()}


def test_no_module_patches_a_library_class_or_sqlalchemy_s_compiler():
    found = []
    for path in sorted([*(ROOT / "pipeline").rglob("*.py"), *(ROOT / "cli").rglob("*.py")]):
        text = path.read_text()
        name = path.relative_to(ROOT)
        if "@compiles" in text or "sqlalchemy.ext.compiler" in text:
            found.append(f"{name}: SQLAlchemy's compiler extended")
        tree = ast.parse(text)
        imported = _ax_names(tree)
        for node in ast.walk(tree):
            targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
                       if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id in imported:
                    found.append(f"{name}:{node.lineno}: {target.value.id}.{target.attr} assigned")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                    and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in imported:
                found.append(f"{name}:{node.lineno}: setattr on {node.args[0].id}")
    assert found == []


def test_only_the_adapter_reaches_into_ax_s_private_state():
    """search/ax.py, and search/ax_tables.py for the table names it reads without loading Ax."""
    private = ("._experiment", "._maybe_generation_strategy", "._random_seed", "._save_or_update", "._bound_engine",
               '"trial_v2"', '"experiment_v2"', "sobol_measures import _")
    found = [f"{path.relative_to(ROOT)}: {word}" for path in [*(ROOT / "pipeline").rglob("*.py"),
                                                               *(ROOT / "cli").rglob("*.py")]
             if path.name not in ("ax.py", "ax_tables.py") or path.parent != ROOT / "pipeline" / "search"
             for word in private if word in path.read_text()]
    assert found == []


def _dependency(name: str) -> SpecifierSet:
    """The range pyproject.toml allows for distribution `name`."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(d for d in dependencies if d.split(">")[0].split("<")[0].split("=")[0].strip() == name)
    return SpecifierSet(spec[len(name):].split(";")[0].strip())


def test_the_installed_ax_and_botorch_are_in_the_pinned_range_and_the_adapter_s_contact_points_exist():
    """An Ax upgrade that moves what the adapter relies on fails here, by name, before any study does."""
    ax_range, botorch_range = _dependency("ax-platform"), _dependency("botorch")
    assert ax_range.contains(version("ax-platform")), (ax_range, version("ax-platform"))
    assert botorch_range.contains(version("botorch")), (botorch_range, version("botorch"))
    assert not ax_range.contains("1.4.0") and ax_range.contains("1.3.0")  # one minor version of Ax: its storage

    import inspect

    from ax.adapter.torch import TorchAdapter
    from ax.api.client import Client
    from ax.core.experiment import Experiment
    from ax.generators.torch.botorch_modular.generator import BoTorchGenerator
    from ax.storage.sqa_store import db as ax_db
    from ax.storage.sqa_store import load, save
    from ax.storage.sqa_store.sqa_classes import SQAExperiment, SQATrial

    # the one private read (search.ax.experiment): Client keeps its experiment behind a property
    assert isinstance(inspect.getattr_static(Client, "_experiment"), property)
    for method in ("set_experiment", "set_generation_strategy", "configure_experiment", "get_next_trials"):
        assert callable(getattr(Client, method)), method
    # the rule StudyExperiment overrides, and what it answers instead
    assert isinstance(inspect.getattr_static(Experiment, "arms_by_signature_for_deduplication"), property)
    assert isinstance(inspect.getattr_static(Experiment, "arms_by_signature"), property)
    # Ax's process-wide session (use_database, ax_writes_through) and its tables
    assert hasattr(ax_db, "SESSION_FACTORY") and ax_db.Base.metadata.tables
    for function in (ax_db.get_engine, ax_db.init_engine_and_session_factory, ax_db.create_all_tables,
                     load.load_experiment, load.load_generation_strategy_by_experiment_name, save.save_or_update_trial):
        assert callable(function)
    # the names search.ax_tables reads Ax's tables by, without importing Ax
    from ax.core.base_trial import TrialStatus

    from pipeline.search.ax_tables import AX_EXPERIMENTS, AX_RUNNING, AX_TRIALS
    for ours, theirs in ((AX_TRIALS, SQATrial.__table__), (AX_EXPERIMENTS, SQAExperiment.__table__)):
        assert ours.name == theirs.name and set(ours.c.keys()) <= set(theirs.c.keys())
    assert AX_RUNNING == TrialStatus.RUNNING.value
    # the GP inside a fitted step (search.ax.objective_model)
    assert isinstance(inspect.getattr_static(BoTorchGenerator, "search_space_digest"), property)
    assert isinstance(inspect.getattr_static(BoTorchGenerator, "surrogate"), property)
    assert TorchAdapter is not None


def test_a_study_s_experiment_counts_a_rerun_arm_as_tried_and_ax_s_own_experiments_keep_ax_s_rule(tmp_path):
    from pipeline.library_logs import quiet_libraries

    quiet_libraries(tmp_path / "ax.log")
    from ax.api.client import Client
    from ax.api.configs import RangeParameterConfig

    from pipeline.search.ax import experiment, generation_strategy, in_memory_client

    space = [RangeParameterConfig(name="x", bounds=(0.0, 1.0), parameter_type="float")]
    ours = in_memory_client(space, "ours", 0, generation_strategy(2, 0, "sobol"))
    theirs = Client(random_seed=0)
    theirs.configure_experiment(parameters=space, name="theirs")
    theirs.configure_optimization(objective="value")
    for client in (ours, theirs):
        index = client.attach_trial(parameters={"x": 0.25})
        client.mark_trial_failed(trial_index=index)
    assert len(experiment(ours).arms_by_signature_for_deduplication) == 1
    assert len(experiment(theirs).arms_by_signature_for_deduplication) == 0  # Ax's rule, untouched
    assert type(experiment(theirs)).__name__ == "Experiment"


def test_pending_in_ax_says_whether_a_study_has_a_trial_asked_for_and_never_told(tmp_path):
    from pipeline.library_logs import quiet_libraries
    from pipeline.spec.study_config import load_study
    from pipeline.store import Store

    quiet_libraries(tmp_path / "ax.log")
    from pipeline.search.ax import Searcher
    from pipeline.search.ax_tables import pending_in_ax
    from pipeline.search.study import create_study

    store = Store(str(tmp_path / "runs.db"))
    assert not pending_in_ax(store, "tiny")  # no Ax table yet
    study = load_study(study_file(tmp_path))
    create_study(store, study)
    searcher = Searcher(study, store.url)
    assert not pending_in_ax(store, study.name)
    index, _ = searcher.ask()
    assert pending_in_ax(store, study.name) and not pending_in_ax(store, "other")
    searcher.complete(index, {name: 0.5 for name in study.told_metrics})
    assert not pending_in_ax(store, study.name)


def test_ax_s_tables_on_postgresql_have_text_columns_in_a_copy_of_ax_s_metadata(tmp_path):
    from pipeline.library_logs import quiet_libraries

    quiet_libraries(tmp_path / "ax.log")
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.schema import CreateTable

    from ax.storage.sqa_store import db as ax_db
    from pipeline.search.ax import _ax_tables_on_postgresql

    copy = _ax_tables_on_postgresql()
    assert set(copy.tables) == set(ax_db.Base.metadata.tables) and copy is not ax_db.Base.metadata
    ours = str(CreateTable(copy.tables["experiment_v2"]).compile(dialect=postgresql.dialect()))
    axs = str(CreateTable(ax_db.Base.metadata.tables["experiment_v2"]).compile(dialect=postgresql.dialect()))
    assert "name TEXT NOT NULL" in ours and "VARCHAR(" not in ours
    assert "VARCHAR(" in axs  # Ax's own metadata compiles as Ax declares it


def test_the_search_benchmark_knows_every_strategy_of_a_study_by_the_study_s_own_words():
    from pipeline.bench.search import STRATEGY_NOTES
    from pipeline.spec.study_config import STRATEGIES

    assert {name: STRATEGY_NOTES[name] for name in STRATEGIES} == STRATEGIES
    assert list(STRATEGY_NOTES)[0] == "gp" and list(STRATEGY_NOTES)[-1] == "tpe"


def test_the_adapter_is_the_only_module_importing_ax_s_storage():
    found = [str(path.relative_to(ROOT)) for path in [*(ROOT / "pipeline").rglob("*.py"), *(ROOT / "cli").rglob("*.py")]
             if path != ROOT / "pipeline" / "search" / "ax.py" and "ax.storage" in path.read_text()]
    assert found == []

