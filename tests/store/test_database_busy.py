"""A process paused while it holds the database's write lock: the commands that meet it answer in one line (exit
code 2). Real processes, a real SQLite file; the paused runs themselves are in test_paused_runs.py."""
import datetime as dt
import os
import re
import subprocess
import sys
from pathlib import Path

from pipeline.store import Store, study_locks
from pipeline.search.study import run_study
from pipeline.spec.study_config import load_study
from helpers import study_file, FAST, ROBUST_TUNE

CAMPAIGN = """
name = "held"
objective = "val_balanced_accuracy"
methods = ["ls"]
replicates = 1
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
    assert process.returncode == 1 and "Traceback" not in err and err.strip().count("\n") == 0, err
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
