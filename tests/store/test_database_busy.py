"""A process paused while it holds the database's write lock: the commands that meet it answer in one line (exit
code 2), and the paused run, continued, finishes its study. Real processes, SIGSTOP, a real SQLite file."""
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipeline.faults import readable, write_locked
from pipeline.store import Store, study_locks
from pipeline.search.study import run_study
from pipeline.spec.study_config import load_study
from helpers import study_file, FAST, ROBUST_TUNE, ax_trials, rows, start_run, wait_until_stale

CAMPAIGN = """
name = "held"
objective = "val_balanced_accuracy"
methods = ["ls"]
[data]
name = "digits"
[params]
epochs = 1
lr_head = { low = 0.01, high = 0.2, log = true }
[budget]
trials = 1
initial = 1
[evaluate]
seeds = 2
max_seeds = 2
"""


def hold_database(db: Path, how: str = "IMMEDIATE") -> subprocess.Popen:
    """Another process that begins a write transaction on `db` and keeps it open, as a process paused in the
    middle of a write does (IMMEDIATE: its write lock, readers pass; EXCLUSIVE: as while it commits)."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time\n"
        f"connection = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
        f"connection.execute('BEGIN {how}')\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


# The commands that meet the locked database give up waiting for it after 1 s, not the 5 s a user's wait: what they
# answer is the same, and the lock is never released while they wait.
SHORT_WAIT = {"ROBUST_TUNE_LOCK_WAIT_MS": "1000"}


def command(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([ROBUST_TUNE, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **SHORT_WAIT})


def one_line(process: subprocess.Popen) -> str:
    """The command's one-line answer, checked: exit code 2, one line on stderr, no traceback."""
    _, err = process.communicate(timeout=300)
    assert process.returncode == 2 and "Traceback" not in err and err.strip().count("\n") == 0, err
    return " ".join(err.split())


def test_every_command_meeting_a_database_another_process_keeps_locked_in_a_write_answers_in_one_line(tmp_path):
    path, db = study_file(tmp_path, "held", params=FAST, trials=1), tmp_path / "runs.db"
    run_study(load_study(path), str(db), "cpu", log_file=tmp_path / "ax.log")
    (tmp_path / "campaign.toml").write_text(CAMPAIGN)
    store = Store(str(db))
    study = store.require_study("held")
    seen = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None) - dt.timedelta(minutes=10)
    with store.engine.begin() as connection:  # its holder paused ten minutes ago, in the middle of a write
        connection.execute(study_locks.insert().values(study_id=study.id, token="paused", pid=4321, host="elsewhere",
                                                       heartbeat_at=seen))
    before = db.read_bytes()
    base = ["--db", str(db), "--log-file", str(tmp_path / "ax.log")]
    holder = hold_database(db)
    try:
        writers = {"run": command("run", str(path), "--device", "cpu", *base, cwd=tmp_path),
                   "evaluate": command("evaluate", "held", "--seeds", "1", "--device", "cpu", *base, cwd=tmp_path),
                   "delete": command("studies", "delete", "held", "--yes", *base, cwd=tmp_path),
                   "compare": command("compare", "campaign.toml", "--device", "cpu", *base, cwd=tmp_path)}
        report = command("report", "held", "--db", str(db), cwd=tmp_path)  # readers pass a write lock
        answers = {name: one_line(process) for name, process in writers.items()}
        _, err = report.communicate(timeout=300)
        assert report.returncode == 0 and "Traceback" not in err, err
    finally:
        holder.kill()
        holder.wait()
    for name in ("run", "evaluate", "delete"):
        assert re.match(r"error: study held could not take its lock: the database .* is busy, another process keeps "
                        r"it locked in the middle of a write: the study's lock is held by process 4321 on host "
                        r"elsewhere, last seen \d+ s ago", answers[name]) and answers[name].endswith(
            "resume it (fg, or kill -CONT 4321) or stop it, then try again; nothing was changed"), answers[name]
    assert answers["compare"].startswith("error: could not run campaign held: the database ") and \
        "is busy, another process keeps it locked in the middle of a write" in answers["compare"], answers["compare"]
    assert db.read_bytes() == before

    holder = hold_database(db, "EXCLUSIVE")  # a writer stopped while it commits keeps the readers out too
    try:
        for read in (["report", "held"], ["studies"], ["best", "held"]):
            answer = one_line(command(*read, "--db", str(db), cwd=tmp_path))
            assert "another process keeps it locked in the middle of a write" in answer, answer
    finally:
        holder.kill()
        holder.wait()
    assert db.read_bytes() == before


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
    second = start_run(path, db, env={**env, **SHORT_WAIT})
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
