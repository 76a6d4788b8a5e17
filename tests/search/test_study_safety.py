"""A study survives kills at any write, Ctrl-C and a second process: real processes, a real SQLite file."""
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pipeline.errors import UserError
from pipeline.store import Store, study_locks
from pipeline.search.study import run_study
from pipeline.spec.study_config import load_study, parse_study
from helpers import (ax_trials, completed_trials, FAST, now, ROBUST_TUNE, rows, start_run, study_file,
                    wait_for_running_trial, wait_until_stale)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> list[tuple[dict, dict]]:
    """The exact study of `test_a_killed_study_resumes_exactly`, run without a stop."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    run_study(load_study(study_file(tmp, "exact", params=FAST, trials=4)), str(tmp / "runs.db"), "cpu",
              log_file=tmp / "ax.log")
    return completed_trials(tmp / "runs.db", "exact")


@pytest.fixture(scope="module")
def two_ran(tmp_path_factory) -> Path:
    """The database of that study stopped after its two Sobol trials (the tests copy it before resuming it)."""
    tmp = tmp_path_factory.mktemp("two-ran")
    run_study(load_study(study_file(tmp, "exact", params=FAST, trials=4)), str(tmp / "runs.db"), "cpu", trials=2,
              log_file=tmp / "ax.log")
    return tmp / "runs.db"


@pytest.mark.parametrize("point", ["after-ask", "after-record"])
@pytest.mark.parametrize("ran", [0, 2], ids=["sobol", "gp"])
def test_a_killed_study_resumes_exactly(tmp_path, uninterrupted, two_ran, point, ran):
    """Killed at a write in the Sobol phase (trial 0 of 2 initial) or in the Gaussian process's (trial 2),
    then resumed: the same proposals in the same order and the same results as a run that never stopped.
    Killed after Ax proposed and before our row, the proposal is run again, once, before anything new; killed
    after our record and before Ax was told, the trial is completed in Ax on resume without training again."""
    path, db = study_file(tmp_path, "exact", params=FAST, trials=4), tmp_path / "runs.db"
    if ran:
        shutil.copyfile(two_ran, db)
    process = start_run(path, db, env={"ROBUST_TUNE_KILL_AT": point})
    process.communicate()
    assert process.returncode == -signal.SIGKILL
    study = load_study(path)
    ax = ax_trials(study, db)
    if point == "after-ask":
        assert rows(db, "select trial_index, status from rt_trials") == [(i, "completed") for i in range(ran)]
        assert list(ax) == list(range(ran + 1)) and ax[ran][0] == "running"
        proposed = ax[ran][1]
    else:
        assert ax[ran][0] == "running"  # the window: completed in our table, running in Ax
        assert rows(db, "select trial_index, status from rt_trials") == [(i, "completed") for i in range(ran + 1)]

    summary = run_study(study, str(db), "cpu", log_file=tmp_path / "ax.log")
    assert completed_trials(db, "exact") == uninterrupted
    store = Store(str(db))
    trials = store.trials(store.study("exact").id)
    ax = ax_trials(study, db)
    if point == "after-ask":
        assert [(t.trial_index, t.status) for t in trials] == [(i, "completed") for i in range(5) if i != ran]
        assert trials[ran].parameters == proposed  # the proposal was run, once, before anything new
        assert [status for status, _ in ax.values()] == ["completed"] * ran + ["failed"] + ["completed"] * (4 - ran)
    else:
        assert [(t.trial_index, t.status) for t in trials] == [(i, "completed") for i in range(4)]
        assert summary.completed == 4 - ran - 1  # the recorded trial was not trained again
        assert len({json.dumps(t.parameters, sort_keys=True) for t in trials}) == 4
        assert [status for status, _ in ax.values()] == ["completed"] * 4
        from pipeline.search.ax import Searcher

        data = Searcher(study, store.url).client._experiment.lookup_data().df
        assert data[data.trial_index == ran]["mean"].item() == pytest.approx(trials[ran].metrics["val_accuracy"],
                                                                             abs=1e-9)


def test_a_kill_while_creating_a_study_leaves_nothing_and_a_study_stored_without_ax_records_still_runs(tmp_path):
    path, db = study_file(tmp_path, "born", params=FAST, trials=1), tmp_path / "runs.db"
    process = start_run(path, db, env={"ROBUST_TUNE_KILL_AT": "in-study-creation"})  # Ax's records written
    process.communicate()
    assert process.returncode == -signal.SIGKILL
    assert rows(db, "select * from rt_studies") == [] and rows(db, "select * from experiment_v2") == []
    study = load_study(path)
    Store(str(db)).create_study(study)  # as earlier versions left it
    summary = run_study(study, str(db), "cpu", log_file=tmp_path / "ax.log")
    assert summary.completed == 1 and rows(db, "select name from experiment_v2") == [("born",)]


def test_ctrl_c_names_the_trial_and_how_to_resume_then_resume_runs_it_once(tmp_path):
    # long enough that the trial is still training when the signal lands, even on a loaded machine (the signal
    # is sent within a poll of its row; the test fails, never passes wrongly, if the trial ended first), and
    # short enough that the resume, which trains the whole trial, stays cheap
    path, db = study_file(tmp_path, "stopped", params=FAST.replace("epochs = 1", "epochs = 10"), trials=1), \
        tmp_path / "runs.db"
    process = start_run(path, db, "--threads", "1")
    wait_for_running_trial(process, db)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate()
    assert process.returncode == 130 and "Traceback" not in err
    assert (f"interrupted: trial 0 of study stopped was stopped and will run again first; "
            f"resume with robust-tune run {path} --db {db} --device cpu --threads 1 --log-file "
            f"{db.with_suffix('.log')}") in " ".join(err.split())
    assert "--set threads" not in err  # the resume line repeats the options as they were given
    (status, parameters), = rows(db, "select status, parameters from rt_trials")
    assert status == "interrupted"
    assert rows(db, "select * from rt_study_locks") == []  # the lock was released

    run_study(load_study(path), str(db), "cpu", trials=1, log_file=tmp_path / "ax.log")
    assert rows(db, "select trial_index, status, parameters from rt_trials order by trial_index") == [
        (0, "interrupted", parameters), (1, "completed", parameters)]


def test_two_runs_of_one_new_study_one_refuses_in_one_line_and_a_dead_holder_is_taken_over(tmp_path):
    # trials long enough that the kill lands in one (it follows a poll of a running row), and the resume, which
    # trains the interrupted one again, short
    path, db = study_file(tmp_path, "shared", params=FAST.replace("epochs = 1", "epochs = 3"), trials=50), \
        tmp_path / "runs.db"
    first, second = start_run(path, db), start_run(path, db)
    while first.poll() is None and second.poll() is None:  # the one that does not hold the study stops
        time.sleep(0.05)
    refused, runner = (first, second) if first.poll() is not None else (second, first)
    _, err = refused.communicate()
    assert refused.returncode == 2 and "Traceback" not in err, err
    assert err.strip().count("\n") == 0
    assert f"study shared is being run by process {runner.pid} on host" in err and "wait for it or stop it" in err
    wait_for_running_trial(runner, db)
    os.killpg(runner.pid, signal.SIGKILL)
    runner.wait()

    assert rows(db, "select count(*) from rt_studies") == [(1,)]
    assert rows(db, "select pid from rt_study_locks") == [(runner.pid,)]  # left behind by the dead holder
    done = rows(db, "select count(*) from rt_trials where status = 'completed'")[0][0]
    summary = run_study(load_study(path), str(db), "cpu", trials=done + 1, log_file=tmp_path / "ax.log")
    assert summary.completed == 1 and rows(db, "select * from rt_study_locks") == []
    indices = [i for (i,) in rows(db, "select trial_index from rt_trials")]
    assert len(indices) == len(set(indices)) == done + 2  # plus the interrupted one


def test_a_lock_is_refused_while_fresh_and_taken_over_when_stale(tmp_path):
    store = Store(str(tmp_path / "runs.db"))
    held = parse_study({"name": "held", "method": {"name": "ls"}}, "held.toml")
    study = store.create_study(held)
    with store.engine.begin() as connection:  # a live process on another host, seen just now
        connection.execute(study_locks.insert().values(study_id=study.id, token="other", pid=4321,
                                                       host="elsewhere", heartbeat_at=now()))
    with pytest.raises(UserError, match=r"study held is being run by process 4321 on host elsewhere \(last seen"):
        store.lock_study(study)
    with store.engine.begin() as connection:  # ... that has not been seen for ten minutes
        connection.execute(study_locks.update().values(
            heartbeat_at=now() - dt.timedelta(minutes=10)))
    lock = store.lock_study(study)
    assert rows(tmp_path / "runs.db", "select pid from rt_study_locks") == [(os.getpid(),)]
    other = parse_study({"name": "held", "method": {"name": "erm"},
                         "params": {"epochs": 3, "lr_head": {"low": 0.01, "high": 0.1}}}, "other.toml")
    assert store.create_study(other).fingerprint == held.fingerprint()  # creation cannot overwrite
    lock.release()
    assert rows(tmp_path / "runs.db", "select * from rt_study_locks") == []


def test_a_run_paused_past_the_stale_time_and_taken_over_stops_without_writing_again(tmp_path, monkeypatch):
    """A laptop lid closed just after a trial was stored, before Ax was told: a second run takes the stale
    lock over and finishes the study; the paused run, resumed, stops with one line and writes nothing, not
    even to Ax, so the study keeps its budget, no parameters run twice and Ax agrees with the table."""
    path, db = study_file(tmp_path, "paused", params=FAST, trials=3), tmp_path / "runs.db"
    paused = start_run(path, db, env={"ROBUST_TUNE_LOCK_STALE_SECONDS": "3", "ROBUST_TUNE_STOP_AT": "after-record"})
    _, status = os.waitpid(paused.pid, os.WUNTRACED)  # stopped itself once trial 0 was stored
    assert os.WIFSTOPPED(status), paused.communicate()
    assert rows(db, "select trial_index, status from rt_trials") == [(0, "completed")]
    wait_until_stale(db, 3)
    monkeypatch.setattr("pipeline.store.lock.LOCK_STALE_SECONDS", 3.0)  # as the paused run's
    summary = run_study(load_study(path), str(db), "cpu", log_file=tmp_path / "ax.log")  # takes the lock over
    assert summary.completed == 2
    done = rows(db, "select trial_index, status, parameters from rt_trials order by trial_index")

    paused.send_signal(signal.SIGCONT)
    _, err = paused.communicate()
    assert paused.returncode == 2 and "Traceback" not in err, err
    *_, last = err.strip().splitlines()  # after the line of the trial it ran: one line saying why it stopped
    assert last.startswith("error: lost the lock of study paused") and err.count("error") == 1, err
    assert rows(db, "select trial_index, status, parameters from rt_trials order by trial_index") == done
    assert [(i, s) for i, s, _ in done] == [(0, "completed"), (1, "completed"), (2, "completed")]
    assert len({p for _, _, p in done}) == 3  # no parameters ran twice
    ax = ax_trials(load_study(path), db)  # Ax agrees: the same trials, completed, with the same parameters
    assert [(i, s, json.dumps(p, sort_keys=True)) for i, (s, p) in ax.items()] == [
        (i, s, json.dumps(json.loads(p), sort_keys=True)) for i, s, p in done]


def test_a_delete_paused_while_another_process_took_the_study_over_deletes_nothing(tmp_path, monkeypatch):
    """A delete that took the study's lock, then paused past the stale time while a run took the study over:
    resumed, it is refused in one line and deletes nothing, not the study, its trials, Ax's records or the lock
    that the live holder keeps."""
    from pipeline.library_logs import quiet_libraries
    from pipeline.search.study import create_study

    path, db = study_file(tmp_path, "kept", params=FAST, trials=1), tmp_path / "runs.db"
    quiet_libraries(tmp_path / "ax.log")
    store = Store(str(db))
    study = create_study(store, load_study(path))
    store.start_trial(study.id, 0, {"alpha": 0.1}, 0, 0.1)
    delete = subprocess.Popen([ROBUST_TUNE, "studies", "delete", "kept", "--db", str(db), "--yes", "--log-file",
                               str(tmp_path / "ax.log")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "ROBUST_TUNE_LOCK_STALE_SECONDS": "2",
                                   "ROBUST_TUNE_STOP_AT": "after-delete-lock"})
    _, status = os.waitpid(delete.pid, os.WUNTRACED)  # stopped itself holding the lock, before deleting
    assert os.WIFSTOPPED(status), delete.communicate()
    wait_until_stale(db, 2)
    monkeypatch.setattr("pipeline.store.lock.LOCK_STALE_SECONDS", 2.0)  # as the paused delete's
    lock = store.lock_study(study)  # taken over, as a `run` of the study would

    delete.send_signal(signal.SIGCONT)
    out, err = delete.communicate(timeout=120)
    assert delete.returncode == 2 and "Traceback" not in err and err.strip().count("\n") == 0, err
    assert err.startswith("error: study kept was not deleted, nothing was changed: ")  # then who took it over
    assert err.strip().endswith("took it over while the delete waited; delete it once that process is done")
    assert rows(db, "select name from rt_studies") == [("kept",)] and rows(db, "select name from experiment_v2") == [
        ("kept",)]
    assert rows(db, "select trial_index, status from rt_trials") == [(0, "running")]
    assert rows(db, "select token from rt_study_locks") == [(lock.token,)]  # the live holder's lock stays
    lock.release()


def test_the_parameters_of_an_interrupted_trial_are_never_proposed_again_once_it_ran_again(tmp_path, monkeypatch):
    """An interrupted trial is failed in Ax and its parameters run again as a new trial under the same arm; Ax's
    own de-duplication leaves out the arms of failed trials, which would let a strategy propose those parameters
    a third time. In a space of two points: both are proposed once, then the space is exhausted. Sobol gives up
    after 200 draws that were all tried already, not Ax's 10,000 (each draw of a two-point space lands on one of
    the two, so an interrupted point left out of the de-duplication is drawn again within the first few)."""
    from pipeline.library_logs import quiet_libraries
    from pipeline.search.study import INTERRUPTED, create_study

    quiet_libraries(tmp_path / "ax.log")
    from pipeline.search.ax import Searcher

    monkeypatch.setattr("ax.generators.random.base.DEFAULT_MAX_RS_DRAWS", 200)

    path = study_file(tmp_path, "two", params='epochs = 1\nperturb = "feature"\nalpha = 0.1\neta = 2.0\n'
                                              'T = { low = 1, high = 2 }', trials=4)
    path.write_text(path.read_text() + '[search]\nstrategy = "sobol"\n')
    study = load_study(path)
    store = Store(str(tmp_path / "runs.db"))
    create_study(store, study)
    searcher = Searcher(study, store.url)
    metrics = {name: 0.5 for name in study.told_metrics}
    first, parameters = searcher.ask()
    searcher.mark_failed(first, INTERRUPTED)  # its process was killed: run again, as reconcile does
    searcher.complete(searcher.rerun(first), metrics)
    second, other = searcher.ask()
    assert other != parameters
    searcher.complete(second, metrics)
    assert searcher.ask() is None  # both points tried: nothing left, not the interrupted one again
