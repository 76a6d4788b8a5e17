"""Ctrl-C that is never lost while a study or an evaluation trains.

CPython raises KeyboardInterrupt wherever the main thread is when the signal is handled; if that is a
garbage collector's callback (a weakref finaliser of SQLAlchemy, torch, ...), the exception is printed as
"Exception ignored" with a traceback and dropped, and the run would go on to its end. Here every press
is remembered, the dropped one is not printed, and the command's progress callback raises it again at
the next batch or epoch.
"""
from __future__ import annotations

import signal
import sys
from contextlib import contextmanager
from typing import Any, Iterator


class CtrlC:
    """Counts Ctrl-C presses; `check` raises KeyboardInterrupt for one that has not been raised through."""

    def __init__(self) -> None:
        self.pending = False

    def press(self, signum: int, frame: Any) -> None:
        self.pending = True
        raise KeyboardInterrupt

    def check(self) -> None:
        """Raise KeyboardInterrupt again for a press whose first one was dropped."""
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt


@contextmanager
def ctrl_c_kept() -> Iterator[CtrlC]:
    """Within the block, Ctrl-C raises KeyboardInterrupt as usual and is also remembered (see CtrlC)."""
    ctrl_c = CtrlC()
    previous, previous_hook = signal.signal(signal.SIGINT, ctrl_c.press), sys.unraisablehook

    def drop_a_kept_ctrl_c(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            previous_hook(unraisable)

    sys.unraisablehook = drop_a_kept_ctrl_c
    try:
        yield ctrl_c
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = previous_hook
