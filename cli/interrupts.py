"""Ctrl-C that is never lost while a study or an evaluation trains.

CPython raises KeyboardInterrupt wherever the main thread is when the signal is handled; if that is a
garbage collector's callback (a weakref finaliser of SQLAlchemy, torch, ...), the exception is printed as
"Exception ignored" with a traceback and dropped, and the run would go on to its end. Here every press
is remembered, the dropped one is not printed, and the command's progress callback raises it again at
the next batch or epoch.
"""
from __future__ import annotations

import shlex
import signal
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from rich.cells import cell_len
from rich.console import Console

from cli.render import print_line


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


def resume_command(ctx: Any, shown: dict[str, Callable[[Any], str]] | None = None) -> str:
    """The command as the user typed it, to type again: its arguments, then every option given on the command
    line (not those from defaults or the environment, which a second call gets again), each value through
    `shown` where it names the option (a database URL with its password hidden)."""
    shown = shown or {}
    words, options = ["robust-tune", *ctx.command_path.split()[1:]], []
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name)
        if source is None or source.name != "COMMANDLINE":  # typer bundles its own click: compare by name
            continue
        value, show = ctx.params[param.name], shown.get(param.name, str)
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if param.param_type_name == "argument":
            words += [show(v) for v in values]
        elif getattr(param, "is_flag", False):
            options.append(param.opts[0] if value else (param.secondary_opts or param.opts)[0])
        else:
            options += [word for v in values for word in (param.opts[0], show(v))]
    return shlex.join(words + options)


def print_resume(console: Console, text: str, command: str) -> None:
    """`text` ("...; resume with") and the command to type again: one line in a log; on a terminal too narrow
    for both, the command on lines of its own, each but the last ending in a backslash, so that pasted it is
    still one command."""
    if not console.is_terminal or cell_len(f"{text} {command}") <= console.width:
        print_line(console, f"{text} {command}", markup=False, highlight=False)
        return
    print_line(console, text, markup=False, highlight=False)
    lines = [""]
    for word in (shlex.quote(word) for word in shlex.split(command)):
        if lines[-1] and cell_len(f"  {lines[-1]} {word} \\") > console.width:
            lines.append("")
        lines[-1] = f"{lines[-1]} {word}".strip()
    console.print(" \\\n".join(f"  {line}" for line in lines), soft_wrap=True, markup=False, highlight=False)
