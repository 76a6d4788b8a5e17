"""The exceptions the command line prints as one line: bad input (exit 2), and failures that are not the
input's (exit 1)."""
from __future__ import annotations

import difflib
from typing import Iterable


class UserError(Exception):
    """A problem the user can fix (a bad option, file or value); the message names it in one line."""


class TrainingFailed(Exception):
    """Training ran but could not go on (for example its loss became NaN); not the input's fault."""


class ServerLost(Exception):
    """A server a running command works with went away (the database server, the Dask scheduler): the
    environment's failure, not the input's. The message names the server (never a password) in one line."""


class FieldError(UserError):
    """A UserError about one field of a study or campaign file: `source` (the file), `key` (the dotted field) and
    `problem`, kept apart so that a field set on the command line (--set) is named there instead of the file. A
    problem found where the file is not known (a data set's class or folder, found as it loads) has no source yet:
    the command names where the field was set (spec.study_config.naming_source)."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        super().__init__(f"{source}: {key}: {problem}" if source else f"{key}: {problem}")
        self.source, self.key, self.problem = source, key, problem


def one_of(value: object, known: Iterable[str]) -> str:
    """"must be one of A, B, got 'x' (did you mean A?)": the problem of a value outside an enumerated field's
    choices, with the closest one where `value` looks mistyped."""
    known = list(known)
    return f"must be one of {', '.join(known)}, got {value!r}" + did_you_mean(str(value), known)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """" (did you mean X?)" for the known name closest to a mistyped `name` (difflib's ratio, at least 0.6), else
    "": put after the words "unknown field" or "unknown parameter"."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


class DatabaseBusy(UserError):
    """Another process kept the database locked for longer than this one waits to write (typically a process
    paused in the middle of a write): one line, nothing written; exit code 1, as the environment's failure."""


class DatabaseFault(Exception):
    """The database's file or the disk under it failed (read-only, full, damaged), or its server's disk: the
    environment's failure, not the input's. The message names the database, the cause and what to do in one line."""
