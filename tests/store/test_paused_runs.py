"""A run paused while it holds the database's write lock, or past the lock's stale time while another run takes its
study over: the run that meets it answers in one line (exit code 2), and the paused run, continued, finishes its
study or stops in one line. Real processes, SIGSTOP, a real SQLite file. (Its own module, apart from the commands
meeting a locked database in test_database_busy.py, so that the two share the test processes.)"""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from pipeline.faults import readable, write_locked
from helpers import study_file, FAST, ax_trials, rows, start_run, wait_until_stale
from pipeline.spec.study_config import load_study


def one_line(process: subprocess.Popen) -> str:
    """The command's one-line answer, checked: exit code 2, one line on stderr, no traceback."""
    _, err = process.communicate(timeout=300)
    assert process.returncode == 1 and "Traceback" not in err and err.strip().count("\n") == 0, err
    return " ".join(err.split())


def pause_inside_a_write(process: subprocess.Popen, db: Path) -> None:
    """SIGSTOP `process` at a moment it holds the database's write lock (a write transaction that does not wait
    cannot begin), and not in the middle of its commit (the database can be read): the pause a laptop lid closed
    in the middle of a write gives."""
    while True:
        assert process.poll() is None, process.communicate()
        if db.exists() and write_locked(db):
            process.send_signal(signal.SIGSTOP)
            _, status = os.waitpid(process.pid, os.WUNTRACED)
            assert os.WIFSTOPPED(status)
            if write_locked(db) and readable(db) and rows(db, "select 1 from rt_study_locks"):
                return
            process.send_signal(signal.SIGCONT)  # it had finished that write: try again
        time.sleep(0.005)


def agree(db: Path, path: Path, budget: int) -> None:
    """The study holds its budget exactly, no parameters twice, and Ax has the same trials with the same status."""
    done = rows(db, "select trial_index, status, parameters from rt_trials order by trial_index")
    completed = [json.loads(p) for _, s, p in done if s == "completed"]
    assert len(completed) == budget and len({json.dumps(p, sort_keys=True) for p in completed}) == budget, done
    ax = ax_trials(load_study(path), db)
    assert {i: s for i, (s, _) in ax.items() if s == "completed"} == {i: s for i, s, _ in done if s == "completed"}
    assert all(json.dumps(ax[i][1], sort_keys=True) == json.dumps(json.loads(p), sort_keys=True) for i, _, p in done)


def test_a_run_paused_inside_a_write_past_the_stale_time_makes_the_next_run_say_so_in_one_line_then_finishes(tmp_path):
    """The pause lands inside a write transaction, so the paused run keeps SQLite's write lock: the second run
    cannot take the stale lock over and says so in one line, naming the paused process; continued, the first
    run finishes its study with its budget exactly, and Ax agrees with the table."""
    path, db = study_file(tmp_path, "inwrite", params=FAST, trials=3), tmp_path / "runs.db"
    env = {"ROBUST_TUNE_LOCK_STALE_SECONDS": "3"}
    first = start_run(path, db, env=env)
    pause_inside_a_write(first, db)
    wait_until_stale(db, 3)
    second = start_run(path, db, env={**env, "ROBUST_TUNE_LOCK_WAIT_MS": "1000"})  # gives up after 1 s, not 5
    answer = one_line(second)
    assert answer.startswith("error: study inwrite could not take its lock: the database ") and \
        f"held by process {first.pid} on host " in answer and "kill -CONT" in answer, answer

    first.send_signal(signal.SIGCONT)
    _, err = first.communicate(timeout=600)
    assert first.returncode == 0 and "Traceback" not in err, err
    assert rows(db, "select * from rt_study_locks") == []
    agree(db, path, 3)


def test_a_paused_run_continued_while_the_run_that_took_it_over_is_alive_stops_in_one_line(tmp_path):
    """Both processes alive at once: the first paused (outside a write) past the stale time, a second run takes
    the study over, and the first is continued while the second still runs. The first stops in one line and
    writes nothing; the second finishes the study with its budget exactly, and Ax agrees with the table."""
    path, db = study_file(tmp_path, "both", params=FAST.replace("epochs = 1", "epochs = 3"), trials=3), \
        tmp_path / "runs.db"
    env = {"ROBUST_TUNE_LOCK_STALE_SECONDS": "3"}
    first = start_run(path, db, env={**env, "ROBUST_TUNE_STOP_AT": "after-record"})
    _, status = os.waitpid(first.pid, os.WUNTRACED)  # stopped itself once trial 0 was stored
    assert os.WIFSTOPPED(status), first.communicate()
    wait_until_stale(db, 3)
    second = start_run(path, db, env=env)
    while rows(db, "select pid from rt_study_locks") != [(second.pid,)]:  # taken over
        assert second.poll() is None, second.communicate()
        time.sleep(0.02)
    first.send_signal(signal.SIGCONT)
    assert second.poll() is None  # both alive
    _, err = first.communicate(timeout=300)
    assert first.returncode == 2 and "Traceback" not in err, err
    *_, last = err.strip().splitlines()  # after the line of the trial it ran: one line saying why it stopped
    assert last.startswith("error: lost the lock of study both: ") and "took it over" in last, err
    _, err = second.communicate(timeout=600)
    assert second.returncode == 0 and "Traceback" not in err, err
    agree(db, path, 3)
