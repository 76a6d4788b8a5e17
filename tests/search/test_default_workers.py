"""Without --workers, `run` and `evaluate` train on a worker per core (a real Dask LocalCluster, real processes, a
real SQLite file): trials at once, the budget exact, the numbers of one at a time, Ctrl-C and SIGKILL resumed without
a lost or duplicated trial. The commands run in this process (the `cli` fixture, its workers real processes) but
where a signal is sent or a terminal drawn. `compare`'s default is killed and resumed in
tests/compare/test_campaign_workers.py."""
import os
import re
import shutil
import signal
import time
from itertools import combinations
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.search import parallel
from pipeline.search.parallel import DaskRunner, default_workers, trial_runner, usable_cores
from pipeline.search.trial import InProcessRunner
from helpers import kill_orphans, rows, start_run, study_file

DEFAULT = {"ROBUST_TUNE_WORKERS": ""}  # the suite's one-at-a-time setting cleared: the tool's own default
# ERM, one epoch: cheap trials, so that the search's proposals are a large share of the study, as on small data.
ERM = "epochs = 1\nlr_backbone = 0.05\nmomentum = 0.0\nlr_head = { low = 0.02, high = 0.1 }"
SLOW = ERM.replace("epochs = 1", "epochs = 3")  # long enough to be stopped in the middle of a trial
needs_two_cores = pytest.mark.skipif(usable_cores() < 2, reason="the default is one worker per core")


def test_the_default_is_a_worker_per_core_at_most_one_per_two_gib_free_and_trials_per_gpu_on_each_gpu(monkeypatch):
    import psutil
    import torch

    monkeypatch.setattr(parallel, "usable_cores", lambda: 16)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=64 * 2**30))
    assert default_workers("cpu") == (16, "one per CPU core (16)")  # a workstation
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=9 * 2**30))
    assert default_workers("cpu") == (4, "one per 2 GiB of free memory (16 cores)")  # a laptop short of memory
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert default_workers("auto", 2)[0] == 4 and default_workers("cpu")[0] == 4  # a GPU machine; --device cpu
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(parallel, "usable_cores", lambda: 1)
    assert isinstance(trial_runner(None, device="cpu"), InProcessRunner)  # one core: no cluster to start
    assert isinstance(trial_runner(1, device="cpu"), InProcessRunner)  # --workers 1: this process
    monkeypatch.setattr(parallel, "usable_cores", lambda: 2)
    runner = trial_runner(None, device="cpu")
    assert isinstance(runner, DaskRunner) and (runner.workers, runner.ahead) == (2, 1)


def spans(db: Path) -> list[tuple[float, float]]:
    """When each trial trained: (start, end) in seconds."""
    from datetime import datetime

    return [(datetime.fromisoformat(a).timestamp(), datetime.fromisoformat(b).timestamp())
            for a, b in rows(db, "select started_at, ended_at from rt_trials where status = 'completed'")]


@needs_two_cores
def test_run_without_workers_trains_trials_at_once_ends_its_budget_exactly_and_gives_the_numbers_of_one_at_a_time(
        tmp_path, cli, monkeypatch):
    path, db = study_file(tmp_path, "cores", "erm", params=ERM, trials=5), tmp_path / "runs.db"
    with monkeypatch.context() as default:
        default.setenv("ROBUST_TUNE_WORKERS", "")
        code, out, err = cli("run", str(path), "--db", str(db), "--device", "cpu")
    assert code == 0, err
    assert "on worker 0" in err and "on worker 1" in err
    assert "in the run process" not in out and "on 2 workers; proposing" in " ".join(out.split())
    assert rows(db, "select status, count(*), count(distinct parameters) from rt_trials group by status") == [
        ("completed", 5, 5)]
    assert any(a0 < b1 and a1 < b0 for (a0, b0), (a1, b1) in combinations(spans(db), 2))  # two trained at once

    alone = tmp_path / "alone.db"
    code, out, err = cli("run", str(path), "--db", str(alone), "--device", "cpu", "--trials", "2", "--workers", "1")
    assert code == 0, err
    assert "on worker" not in err  # --workers 1: trained in the run process
    # Sobol's points, and the same numbers for them bit for bit: every trial trains on the study's one thread.
    query = ("select trial_index, parameters, json_remove(metrics, '$.train_seconds'), per_class from rt_trials "
             "where trial_index < 2")
    assert rows(alone, query) == rows(db, query)


@needs_two_cores
def test_a_default_run_stopped_by_ctrl_c_then_killed_resumes_to_its_exact_budget_without_a_duplicate(tmp_path, cli,
                                                                                                        monkeypatch):
    path, db = study_file(tmp_path, "stops", "erm", params=SLOW, trials=4), tmp_path / "runs.db"
    path.write_text(path.read_text().replace("initial = 2", "initial = 4"))  # Sobol's: none waits for a result
    process = start_run(path, db, env=DEFAULT)
    while len(rows(db, "select 1 from rt_trials where status = 'running'")) < 3:  # two on workers, one waiting
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130 and "Traceback" not in err, err
    assert "trials 0, 1, 2 of study stops were stopped and will run again first; resume with robust-tune run" in \
        " ".join(err.split())
    assert rows(db, "select count(*) from rt_trials where status = 'running'") == [(0,)]

    # Killed while it runs the first of them again (Ax has the new trial, our table not yet): the other two were
    # still to run again, and the next run must know it from the table, as Ax has them failed since this run.
    again = start_run(path, db, env={**DEFAULT, "ROBUST_TUNE_KILL_AT": "after-ask"})
    again.communicate(timeout=120)
    assert again.returncode == -signal.SIGKILL
    kill_orphans(again)  # its orphaned workers, if it had started them

    monkeypatch.setenv("ROBUST_TUNE_WORKERS", "")
    code, out, err = cli("run", str(path), "--db", str(db), "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    completed = rows(db, "select parameters from rt_trials where status = 'completed'")
    assert len(completed) == 4 and len(set(completed)) == 4  # the budget exactly, no configuration twice
    assert {status for status, in rows(db, "select status from rt_trials")} <= {"completed", "interrupted"}
    interrupted = rows(db, "select parameters from rt_trials where status = 'interrupted'")
    assert len(interrupted) == 3 and set(interrupted) <= set(completed)  # each stopped trial ran again, once


@needs_two_cores
def test_evaluate_without_workers_stores_the_numbers_of_one_at_a_time(tmp_path, cli, monkeypatch):
    path, db = study_file(tmp_path, "again", "erm", params=ERM, trials=2), tmp_path / "runs.db"
    assert cli("run", str(path), "--db", str(db), "--device", "cpu")[0] == 0  # the suite's: one at a time
    shutil.copy(db, tmp_path / "alone.db")
    monkeypatch.setenv("ROBUST_TUNE_WORKERS", "")
    for copy, extra in ((db, ()), (tmp_path / "alone.db", ("--workers", "1"))):
        code, out, err = cli("evaluate", "again", "--seeds", "3", "--db", str(copy), "--device", "cpu", *extra)
        assert code == 0, err
    query = ("select variant, seed, json_remove(metrics, '$.train_seconds'), per_class from rt_evaluations "
             "order by variant, seed")
    assert len(rows(db, query)) == 3 and rows(db, query) == rows(tmp_path / "alone.db", query)


@needs_two_cores
def test_a_default_run_on_a_terminal_shows_its_live_view_and_ends_with_its_trials(tmp_path):
    """On a real terminal (a pseudo-terminal), where the live view is drawn: the view of trials on workers,
    one of them waiting for a free worker, runs to its end."""
    import pty
    import subprocess

    from helpers import ROBUST_TUNE

    path = study_file(tmp_path, "seen", "erm", params=ERM, trials=3)
    path.write_text(path.read_text().replace("initial = 2", "initial = 3"))  # the third proposed at once, waiting
    leader, follower = pty.openpty()
    env = {**os.environ, **DEFAULT, "COLUMNS": "80", "LINES": "40", "TERM": "xterm"}
    process = subprocess.Popen([ROBUST_TUNE, "run", str(path), "--db", str(tmp_path / "runs.db"), "--device", "cpu",
                                "--log-file", str(tmp_path / "ax.log")], stdin=follower, stdout=follower,
                               stderr=follower, env=env)
    os.close(follower)
    shown = b""
    while True:  # read as it draws: a terminal's buffer is small, and a full one would stop the run
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # every process holding the terminal has ended: everything was read
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    process.wait(timeout=60)
    text = " ".join(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode(errors="replace")).split())
    assert process.returncode == 0 and "Traceback" not in text and "Error" not in text, text
    assert "trial 2 (3 of 3) waits for a free worker" in text and "on worker 1" in text
    assert "study seen: 3 trial(s) completed now" in text and "left ~" in text
