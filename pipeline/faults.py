"""Fault injection for tests: a named point where the process can be made to die, between two writes."""
from __future__ import annotations

import os
import signal

KILL_AT = "ROBUST_TUNE_KILL_AT"  # the environment variable naming the point to die at


def kill_point(name: str) -> None:
    """With ROBUST_TUNE_KILL_AT=name in the environment, the process kills itself (SIGKILL) here, so a
    test can check that a crash at this point leaves every stored record usable."""
    if os.environ.get(KILL_AT) == name:
        os.kill(os.getpid(), signal.SIGKILL)
