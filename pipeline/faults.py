"""Fault injection for tests: a named point where the process can be made to die, or to pause, between
two writes."""
from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path

KILL_AT = "ROBUST_TUNE_KILL_AT"  # the environment variable naming the point to die at
STOP_AT = "ROBUST_TUNE_STOP_AT"  # the environment variable naming the point to pause at


def kill_point(name: str) -> None:
    """With ROBUST_TUNE_KILL_AT=name in the environment, the process kills itself (SIGKILL) here, so a
    test can check that a crash at this point leaves every stored record usable; with
    ROBUST_TUNE_STOP_AT=name it stops itself (SIGSTOP, as Ctrl-Z does) the first time it gets here, until
    a SIGCONT, so a test can check what a process paused at this point does once it goes on."""
    if os.environ.get(KILL_AT) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(STOP_AT) == name:
        os.environ.pop(STOP_AT)
        os.kill(os.getpid(), signal.SIGSTOP)


def write_locked(file: Path) -> bool:
    """Whether another connection holds the SQLite file's write lock now: a write transaction that does not
    wait cannot begin. For the pause tests, which stop a process while it holds it."""
    connection = sqlite3.connect(file, timeout=0, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        connection.close()


def readable(file: Path) -> bool:
    """Whether the SQLite file can be read now without waiting (no writer is in the middle of its commit)."""
    connection = sqlite3.connect(file, timeout=0)
    try:
        connection.execute("select count(*) from sqlite_master").fetchall()
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        connection.close()
