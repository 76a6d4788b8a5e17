"""A study's two seeds: `search_seed` drives Sobol and the Gaussian process, `seed` every trial's training."""

from pipeline.store import Store
from pipeline.search.study import run_study
from pipeline.spec.study_config import load_study
from helpers import STUDIES

STUDY = """
name = "{name}"
seed = {seed}
{search_seed}
[data]
name = "digits"
[method]
name = "ls"
[params]
epochs = 1
alpha = {{ low = 0.0, high = 0.5 }}
[budget]
trials = 1
initial = 2
"""


def first_trial(tmp_path, name: str, seed: int, search_seed: int | None):
    """The first (Sobol) trial of a one-trial study, as stored."""
    path = tmp_path / f"{name}.toml"
    line = "" if search_seed is None else f"search_seed = {search_seed}"
    path.write_text(STUDY.format(name=name, seed=seed, search_seed=line))
    study = load_study(path)
    db = str(tmp_path / f"{name}.db")
    run_study(study, db, "cpu", log_file=tmp_path / "ax.log")
    store = Store(db, create=False)
    (trial,) = store.trials(store.study(name).id)
    return study, trial


def test_search_seed_moves_the_proposals_and_seed_moves_the_training(tmp_path):
    base_study, base = first_trial(tmp_path, "base", seed=0, search_seed=None)
    assert base_study.search_seed == 0  # defaults to seed
    other_search_study, other_search = first_trial(tmp_path, "other-search", seed=0, search_seed=1)
    other_train_study, other_train = first_trial(tmp_path, "other-train", seed=1, search_seed=0)

    # search_seed: other Sobol points; the training of one parameter set is the same run
    assert other_search.parameters != base.parameters
    assert other_search_study.train_config(base.parameters, other_search_study.seed) == \
        base_study.train_config(base.parameters, base_study.seed)
    # seed: the same Sobol point, trained with another seed, ends elsewhere
    assert other_train.parameters == base.parameters
    assert (other_train.seed, base.seed) == (1, 0)
    assert [e.train_loss for e in other_train.epochs] != [e.train_loss for e in base.epochs]


def test_run_search_seed_option_is_stored_with_the_study(tmp_path, cli):
    path = tmp_path / "s.toml"
    path.write_text(STUDY.format(name="s", seed=3, search_seed=""))
    db = str(tmp_path / "s.db")
    code, _, err = cli("run", str(path), "--db", db, "--device", "cpu", "--search-seed", "7",
                       "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    config = Store(db, create=False).study("s").study
    assert (config.seed, config.search_seed) == (3, 7)
    code, _, err = cli("run", str(path), "--db", db, "--device", "cpu", "--search-seed", "x")
    assert code == 2 and "--search-seed" in err and len(err.strip().splitlines()) == 1


def test_the_quickstart_validation_split_sees_its_rare_class():
    """The quickstart's objective can only see digit 3 through validation examples of it."""
    import torch

    from pipeline.data import load_dataset

    study = load_study(STUDIES / "quickstart.toml")
    assert study.data.imbalance_in == "train" and "balanced" in study.objective
    data = load_dataset(study.data, torch.device("cpu"))
    rare = data.class_names.index(study.data.imbalance_class)
    assert data.val.class_counts(data.num_classes)[rare] >= 20
    assert data.train.class_counts(data.num_classes)[rare] <= 0.06 * max(data.train.class_counts(data.num_classes))
