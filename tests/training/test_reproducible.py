"""Reproducible runs: every run trains with a fixed torch thread count whatever process runs it, records the
count and the library versions, and a study keeps the count it was created with."""
import datetime as dt
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
import torchvision

from pipeline.config import DEFAULT_THREADS, RunSettings, TrainConfig
from pipeline.errors import UserError
from pipeline.store import Store, StudyRecord
from pipeline.search.study import settle_threads
from pipeline.spec.study_config import load_study, parse_study
from pipeline.training.trainer import EpochEnd, train
from helpers import study_file


# The quickstart's learning rates: the whole network moves, and a run on 1 or on 2 threads ends elsewhere when
# the trainer does not fix the count (a training loss of 1.91154 against 1.91150 after one epoch).
MOVING_BACKBONE = {"epochs": 1, "lr_head": 0.05, "lr_backbone": 0.05, "momentum": 0.0}


def test_a_run_trains_with_its_own_thread_count_whatever_the_callers_and_gives_the_callers_back(digits):
    config = TrainConfig(method="erm", params=MOVING_BACKBONE, device="cpu")
    before, results, seen = torch.get_num_threads(), [], set()
    try:
        for ambient in (2, 1):  # the `run` process's default on two cores, and a Dask worker's
            torch.set_num_threads(ambient)
            results.append(train(config, digits, lambda event: seen.add(torch.get_num_threads())))
            assert torch.get_num_threads() == ambient
        torch.set_num_threads(1)
        on_two = train(replace(config, threads=2, params={"epochs": 1, "batch_size": 512}), digits,
                       lambda event: isinstance(event, EpochEnd) and seen.add(("two", torch.get_num_threads())))
    finally:
        torch.set_num_threads(before)
    first, second = (r.to_dict() | {"train_seconds": 0} for r in results)
    assert first == second  # the same numbers, bit for bit, losses included
    assert seen == {DEFAULT_THREADS, ("two", 2)}
    assert first["settings"]["threads"] == DEFAULT_THREADS and on_two.settings.threads == 2
    assert first["settings"]["versions"]["torch"] == torch.__version__
    assert first["settings"]["versions"]["torchvision"] == torchvision.__version__


def test_settings_stored_before_threads_and_versions_read_as_unknown_and_train_at_the_default():
    old = RunSettings.from_dict({"method": "erm", "params": {"epochs": 1}, "seed": 3})
    assert old.threads is None and old.versions is None
    assert old.train_config().threads == DEFAULT_THREADS and old.train_config().seed == 3
    assert RunSettings.from_dict(old.to_dict() | {"threads": 4}).train_config().threads == 4


def record(study, threads):
    return StudyRecord(1, study.name, "", replace(study, threads=threads), dt.datetime(2025, 1, 1))


def recorded(*counts):
    return [SimpleNamespace(settings=None if n is None else SimpleNamespace(threads=n)) for n in counts]


def test_a_study_keeps_the_thread_count_it_was_created_with(tmp_path):
    study = load_study(study_file(tmp_path))
    assert study.threads is None  # not given: settled when the study is opened
    assert settle_threads(study, None).threads == DEFAULT_THREADS  # a new study
    assert settle_threads(replace(study, threads=3), None).threads == 3
    assert settle_threads(study, record(study, 2)).threads == 2  # resumed: the stored count
    assert settle_threads(replace(study, threads=2), record(study, 2)).threads == 2
    with pytest.raises(UserError, match="trains every trial with 2 torch thread"):
        settle_threads(replace(study, threads=1), record(study, 2))
    # Stored before the count was: the count its trials recorded, else the default, else the one given.
    assert settle_threads(study, record(study, None), recorded(None, 2, 2)).threads == 2
    assert settle_threads(study, record(study, None), recorded(None)).threads == DEFAULT_THREADS
    assert settle_threads(replace(study, threads=3), record(study, None), recorded(2)).threads == 3
    assert replace(study, threads=3).fingerprint() == study.fingerprint()  # its own rule, not the identity's


def test_run_refuses_another_thread_count_for_a_stored_study_in_one_line(tmp_path, cli):
    path, db = study_file(tmp_path), tmp_path / "runs.db"
    Store(str(db)).create_study(replace(load_study(path), threads=2))
    file = db.read_bytes()
    for args in (["--threads", "1"], ["--set", "threads=3"]):
        code, out, err = cli("run", str(path), "--db", str(db), "--device", "cpu", *args)
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert "study tiny trains every trial with 2 torch thread(s)" in err and "nothing was changed" in err
    code, _, err = cli("run", str(path), "--db", str(db), "--device", "cpu", "--threads", "0")
    assert code == 2 and err.count("\n") == 1 and "Invalid value for '--threads'" in err
    assert db.read_bytes() == file


@pytest.mark.parametrize("value, problem", [("0", "must be a whole number from 1 to 1024"),
                                            ('"two"', "must be an integer")])
def test_a_bad_thread_count_in_a_study_file_names_the_field(value, problem):
    import tomllib

    raw = tomllib.loads(f'name = "x"\nthreads = {value}\n[method]\nname = "ls"\n')
    with pytest.raises(UserError, match=f"study.toml: threads: {problem}"):
        parse_study(raw, "study.toml")
    assert parse_study(tomllib.loads('name = "x"\nthreads = 2\n[method]\nname = "ls"\n'), "s").threads == 2


def test_train_and_evaluate_refuse_a_bad_thread_count_in_one_line(cli):
    for command in (["train"], ["evaluate", "nothing"], ["compare", "nothing.toml"]):
        code, _, err = cli(*command, "--threads", "-1")
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (command, err)
        assert "Invalid value for '--threads'" in err
