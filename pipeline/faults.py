"""Fault injection for the tests of what a kill leaves behind."""
from __future__ import annotations

import os
import signal


def kill_point(name: str) -> None:
    """With ROBUST_TUNE_KILL_AT=name in the environment, the process kills itself (SIGKILL) here, so a
    test can stop it between two of its writes."""
    if os.environ.get("ROBUST_TUNE_KILL_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
