"""Trials in parallel on a real Dask LocalCluster of 2 worker processes, a real SQLite file, real kills."""
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pipeline.config import DEFAULT_THREADS
from pipeline.search.parallel import DaskRunner, trial_runner, worker_devices
from pipeline.store import Store
from pipeline.search.study import run_study
from pipeline.spec.study_config import load_study
from pipeline.training.trainer import torch_threads
from helpers import study_file, FAST, kill_orphans, rows, start_run, unwrapped
from conftest import free_port

# Long enough to be killed in the middle: the kills follow a poll of the trials' rows, and a worker's trial
# also loads the libraries and the data first; every epoch more is trained again by the run that goes on.
SLOW = FAST.replace("epochs = 1", "epochs = 2")
# ERM at the quickstart's learning rates: on 1 and 2 torch threads its numbers differ unless the trainer fixes the
# count.
SUMS = "epochs = 1\nlr_backbone = 0.05\nmomentum = 0.0\nlr_head = { low = 0.02, high = 0.1 }"


def stored_trials(db, name):
    store = Store(str(db))
    return store.trials(store.study(name).id)


def numbers(trial) -> tuple:
    """What a trial measured: its metrics (less its training time), per-class accuracy and loss curve."""
    return ({k: v for k, v in trial.metrics.items() if k != "train_seconds"}, trial.per_class,
            [e.train_loss for e in trial.epochs])


def test_two_workers_run_four_distinct_trials_at_once_with_the_sequential_sobol_points(tmp_path, cli):
    path, db = study_file(tmp_path, "both", "erm", params=SUMS, trials=4), tmp_path / "runs.db"
    summary = run_study(load_study(path), str(db), "cpu", log_file=tmp_path / "ax.log",
                        runner=trial_runner(workers=2, device="cpu", log_file=str(tmp_path / "ax.log")))
    assert summary.completed == 4 and summary.stopped is None
    trials = stored_trials(db, "both")
    assert [(t.trial_index, t.status) for t in trials] == [(i, "completed") for i in range(4)]
    assert len({tuple(sorted(t.parameters.items())) for t in trials}) == 4
    assert rows(db, "select count(*) from rt_trial_epochs") == [(4,)]  # one epoch each, stored once

    # Two trials trained on two workers at once (which two depends on when each worker came up).
    spans = rows(db, "select started_at, ended_at from rt_trials")
    assert any(start_a < end_b and start_b < end_a
               for (start_a, end_a), (start_b, end_b) in itertools.combinations(spans, 2))

    (tmp_path / "alone").mkdir()
    alone = study_file(tmp_path / "alone", "both", "erm", params=SUMS, trials=2)  # the same study, one trial at a time
    with torch_threads(2):  # what this process has on two cores by default; a worker had one
        run_study(load_study(alone), str(tmp_path / "alone.db"), "cpu", log_file=tmp_path / "ax.log")
    sequential = stored_trials(tmp_path / "alone.db", "both")
    assert [t.parameters for t in sequential] == [t.parameters for t in trials[:2]]
    # The same trials give the same numbers here and on a worker, bit for bit: they train on the study's threads.
    assert [numbers(t) for t in sequential] == [numbers(t) for t in trials[:2]]
    assert {t.settings.threads for t in trials + sequential} == {DEFAULT_THREADS}
    assert {t.settings.versions["torch"] for t in trials + sequential} == {torch.__version__}

    with torch_threads(2):  # a trial a worker trained, trained again here: the same numbers
        code, out, err = cli("train", "--from-study", "both", "--trial", "3", "--db", str(db), "--device", "cpu",
                             "--format", "json")
    assert code == 0, err
    again = json.loads(out)
    assert again["epoch_train_loss"] == [e.train_loss for e in trials[3].epochs]
    assert again["settings"]["threads"] == DEFAULT_THREADS
    assert {k: again[k] for k in numbers(trials[3])[0]} == numbers(trials[3])[0]


def test_a_worker_killed_in_the_middle_of_a_trial_leaves_it_interrupted_and_run_again(tmp_path):
    path, db = study_file(tmp_path, "lost", params=SLOW, trials=3), tmp_path / "runs.db"
    process = start_run(path, db, "--workers", "2")
    killed = None
    while killed is None:  # a worker process (a grandchild of run, which runs no training itself) mid-trial
        assert process.poll() is None, process.communicate()
        if rows(db, "select 1 from rt_trial_epochs") or len(rows(db, "select 1 from rt_trials")) < 2:
            time.sleep(0.05)
            continue
        killed = worker_pid(process.pid)
    os.kill(killed, signal.SIGKILL)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert "Traceback" not in err
    statuses = rows(db, "select status, parameters from rt_trials order by trial_index")
    assert sorted(s for s, _ in statuses).count("completed") == 3
    interrupted = [p for s, p in statuses if s == "interrupted"]
    assert len(interrupted) == 1
    assert [p for s, p in statuses if s == "completed"].count(interrupted[0]) == 1  # its parameters ran again
    assert "interrupted" in err and "worker process died" in err


def worker_pid(run_pid: int) -> int | None:
    """A Dask worker process of `run`: a child of its child whose command line is a multiprocessing spawn."""
    import psutil

    for child in psutil.Process(run_pid).children(recursive=True):
        if "multiprocessing.spawn" in " ".join(child.cmdline()):
            return child.pid
    return None


def test_the_run_process_killed_and_started_again_completes_the_budget_with_no_duplicate(tmp_path):
    path, db = study_file(tmp_path, "again", params=SLOW, trials=3), tmp_path / "runs.db"
    process = start_run(path, db, "--workers", "2")
    while not rows(db, "select 1 from rt_trials where status = 'running'"):
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    kill_orphans(process)  # its orphaned worker processes, which can no longer report
    again = start_run(path, db, "--workers", "2")
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    trials = stored_trials(db, "again")
    completed = [t for t in trials if t.status == "completed"]
    assert len(completed) == 3 and all(t.status in ("completed", "interrupted") for t in trials)
    assert len({t.trial_index for t in trials}) == len(trials)
    assert len({tuple(sorted(t.parameters.items())) for t in completed}) == 3  # nothing ran twice


def test_workers_left_behind_by_a_killed_run_log_to_its_file_not_the_terminal(tmp_path):
    """Killed mid-trial, the run leaves its workers behind; they find the scheduler gone and end by themselves,
    saying so in the study's log file. The terminal the run shared with them gets no traceback."""
    path, db = study_file(tmp_path, "left", params=SLOW, trials=3), tmp_path / "runs.db"
    process = start_run(path, db, "--workers", "2")
    try:
        while not rows(db, "select 1 from rt_trials where status = 'running'"):
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
        _, err = process.communicate(timeout=120)  # until the workers, which hold its pipes, are gone too
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert process.returncode == -9 and "Traceback" not in err and "distributed" not in err, err


def test_a_local_workers_library_messages_go_to_the_log_file(tmp_path, capfd):
    """What a worker's libraries log (Dask's own errors: a lost scheduler's heartbeat, a task it cannot run)
    lands in the study's log file, marked as a worker's, and not on the terminal the workers share."""
    log = tmp_path / "runs.log"
    with trial_runner(2, None, 1, "cpu", str(log)) as runner:
        runner.start().run(lambda: __import__("logging").getLogger("distributed.worker").error("lost the scheduler"))
    assert log.read_text().count("ERROR distributed.worker (a worker): lost the scheduler") == 2
    assert "lost the scheduler" not in capfd.readouterr().err


@pytest.mark.parametrize("option, problem", [
    (["--workers", "0"], "--workers must be 1 or more, not 0"),
    (["--scheduler", "tcp//nowhere"], "malformed Dask scheduler address 'tcp//nowhere'"),
    (["--scheduler", "tcp://host:port"], "malformed Dask scheduler address"),
])
def test_bad_parallel_options_exit_2_with_one_line_and_store_nothing(tmp_path, cli, option, problem):
    db = tmp_path / "runs.db"
    code, out, err = cli("run", str(study_file(tmp_path, params=FAST)), "--db", str(db), "--device", "cpu", *option)
    assert code == 2 and problem in err and err.strip().count("\n") == 0 and "Traceback" not in err
    assert not db.exists()


def test_local_workers_share_gpus_by_trials_per_gpu():
    assert worker_devices(4, 2) == ["0", "1", "0", "1"]  # two trials on each of two GPUs
    assert worker_devices(4, 4) == ["0", "1", "2", "3"]  # --workers 4 on 4 GPUs: one each, not two on two
    assert worker_devices(2, 0) == [None, None]


@pytest.fixture
def dask_cluster(tmp_path):
    """A Dask scheduler that allows no failures (as the guide sets one up) and one worker of one thread under its
    nanny, each in its own process group as on a cluster: the scheduler's address, its process and the worker's.
    Both are killed at the end."""
    from distributed import Client

    dask, address = str(Path(sys.executable).with_name("dask")), f"tcp://127.0.0.1:{free_port()}"
    log = open(tmp_path / "dask.log", "w")
    scheduler = subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1],
                                  "--no-dashboard"], stdout=log, stderr=log, start_new_session=True,
                                 env={**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"})
    worker = subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--no-dashboard"],
                              stdout=log, stderr=log, start_new_session=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        with Client(address, timeout="30s") as client:
            client.wait_for_workers(1, timeout=60)
        yield address, scheduler, worker
    finally:
        for process in (worker, scheduler):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def test_the_scheduler_killed_mid_trial_is_one_line_leaves_nothing_running_and_a_resume_keeps_the_budget(
        tmp_path, cli, dask_cluster):
    address, scheduler, _ = dask_cluster
    path, db = study_file(tmp_path, "orphan", params=FAST, trials=2), tmp_path / "runs.db"
    process = start_run(path, db, "--scheduler", address)
    while not rows(db, "select 1 from rt_trials where status = 'running'"):
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    scheduler.kill()  # SIGKILL, while the worker trains the trial
    _, err = process.communicate(timeout=120)
    assert process.returncode == 1 and "Traceback" not in err, err
    *progress, last = err.strip().splitlines()  # the study's start, then one line saying why it stopped
    assert progress[0] == "examples per split and class:" and progress[4:] == ["study orphan: budget 2 trials"], err
    # Trial 0 trained on the one worker, trial 1 (proposed meanwhile) waited for it.
    assert last == (f"error: lost the Dask scheduler at {address} (the client's connection to it closed); trials 0, 1 "
                    f"of study orphan were stopped and will run again first; resume with robust-tune run {path} --db "
                    f"{db} --device cpu --log-file {db.with_suffix('.log')} --scheduler {address} once it is back"), err
    parameters = rows(db, "select parameters from rt_trials where status = 'interrupted' order by trial_index")
    assert rows(db, "select status from rt_trials") == [("interrupted",)] * 2  # at once: nothing left running
    assert rows(db, "select * from rt_study_locks") == []

    code, out, err = cli("run", str(path), "--db", str(db), "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    assert code == 0 and "2 trial(s) completed" in out, err
    assert "2 interrupted trial(s) run again" in unwrapped(err)
    stored = rows(db, "select trial_index, status, parameters from rt_trials order by trial_index")
    assert [(i, status) for i, status, _ in stored] == [(0, "interrupted"), (1, "interrupted"), (2, "completed"),
                                                        (3, "completed")]
    assert [(p,) for _, _, p in stored[2:]] == parameters  # run again first, once each


def test_a_worker_that_joins_gets_trials_and_one_stopped_cleanly_hands_its_trial_back(tmp_path, dask_cluster):
    """On an existing scheduler: a worker started while the run goes on adds its place (a trial more is asked for at
    once) and trains trials; the first worker, stopped cleanly in the middle of a trial (SIGTERM, as Ctrl-C or a
    cluster manager stops `dask worker`), hands it back to the scheduler: it trains again from its start on the
    other worker, a line says so, no interrupted row, the budget exact."""
    from distributed import Client

    address, _, first = dask_cluster
    path, db = study_file(tmp_path, "elastic", params=FAST, trials=3), tmp_path / "runs.db"
    path.write_text(path.read_text().replace("initial = 2", "initial = 3"))  # Ax proposes without a result first
    process = start_run(path, db, "--scheduler", address)
    with Client(address, timeout="30s") as client:
        while not any(client.processing().values()):  # the first worker has started the first trial
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
    os.killpg(first.pid, signal.SIGSTOP)  # held in the middle of it (the worker and its nanny)
    dask = str(Path(sys.executable).with_name("dask"))
    with open(tmp_path / "joined.log", "w") as log:
        joined = subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                                   "--name", "joined"], stdout=log, stderr=log, start_new_session=True,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 120
        while len(rows(db, "select 1 from rt_trials where status = 'running'")) < 3:  # two places, one ahead
            assert process.poll() is None and time.monotonic() < deadline, "the joined worker's place was not used"
            time.sleep(0.05)
        first.send_signal(signal.SIGTERM)  # to `dask worker`, as Ctrl-C or a batch system's end of a job
        os.killpg(first.pid, signal.SIGCONT)
        _, err = process.communicate(timeout=300)
    finally:
        os.killpg(joined.pid, signal.SIGKILL)
        joined.wait()
    assert process.returncode == 0 and "Traceback" not in err, err
    assert " left the cluster; it trains again from its start on worker joined" in unwrapped(err), err
    assert "on worker joined completed" in err
    assert rows(db, "select trial_index, status from rt_trials order by trial_index") == [
        (i, "completed") for i in range(3)]


def test_a_local_worker_starts_with_glibcs_malloc_settings_not_the_nannys(monkeypatch, tmp_path):
    # Dask's nanny sets MALLOC_TRIM_THRESHOLD_ in a worker's environment, which halved a small-CNN trial's speed.
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    with DaskRunner("cpu", str(tmp_path / "ax.log"), workers=1) as runner:
        workers = runner.start().run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
    assert list(workers.values()) == [None]
    assert "MALLOC_TRIM_THRESHOLD_" not in os.environ  # nor written into this process's environment by the nanny

