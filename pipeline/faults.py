"""Fault injection for tests: a named point where the process can be made to die, or to pause, between
two writes."""
from __future__ import annotations

import os
import signal

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
