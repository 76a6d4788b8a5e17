"""Keep Ax's, BoTorch's and pandas' logs and warnings out of the terminal, in a log file instead."""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from pipeline.config import sqlite_path
from pipeline.errors import UserError
from pipeline.output_file import check_folder, make_folder

# Where the libraries' messages go for a database on a server (PostgreSQL), which has no folder to put them beside.
SERVER_LOG_FILE = Path("runs/robust-tune.log")

_LOGGERS = ("ax", "botorch", "gpytorch", "linear_operator", "py.warnings", "pandas", "distributed", "tornado")
_handler: logging.FileHandler | None = None


def log_file_for(log_file: str | Path | None, db: str | None) -> Path:
    """`log_file` where given; else beside the SQLite database `db` (None: DEFAULT_DB), named after it
    (runs/robust-tune.db logs to runs/robust-tune.log, ~/exp/a.db to ~/exp/a.log); else, for a database on a server,
    SERVER_LOG_FILE. Checked before work that would log to it: a folder that cannot hold it is named by the option
    that put it there (--log-file, or --db beside which it goes). Read off the text: no database driver is loaded."""
    if log_file is not None:
        check_log_file(log_file)
        return Path(log_file)
    file = sqlite_path(db)
    if file is None:
        check_log_file(SERVER_LOG_FILE)
        return SERVER_LOG_FILE
    check_folder(file.parent, "--db", file)
    return file.with_suffix(".log")


def check_log_file(log_file: str | Path) -> None:
    """Refuse a log file that cannot be written (a folder, or under a file), before work that would log to it."""
    log_file = Path(log_file)
    if log_file.is_dir():
        raise UserError(f"--log-file {log_file} is a folder; name a file in it")
    check_folder(log_file.parent, "--log-file", log_file)


def quiet_libraries(log_file: str | Path) -> Path:
    """Send library logs and Python warnings to `log_file` and import Ax without printing.

    Must run before Ax is first imported: Ax attaches a stderr handler when it is imported.
    """
    global _handler
    log_file = Path(log_file)
    check_log_file(log_file)
    make_folder(log_file.parent, "--log-file", log_file)
    if _handler is None or _handler.baseFilename != str(log_file.resolve()):
        handler = logging.FileHandler(log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        for name in _LOGGERS:
            logger = logging.getLogger(name)
            if _handler is not None:
                logger.removeHandler(_handler)
            logger.addHandler(handler)
        _handler = handler
    logging.captureWarnings(True)
    with open(log_file, "a") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        import ax.api.client  # noqa: F401  (its import-time messages land in the file)
    for logger in _library_loggers():
        for other in list(logger.handlers):
            if other is not _handler:
                logger.removeHandler(other)
        logger.propagate = logger.name not in _LOGGERS  # a module's logger passes on to its library's, to the file
    logging.getLogger("botorch").setLevel(logging.WARNING)
    return log_file


def _library_loggers() -> list[logging.Logger]:
    """The libraries' loggers, and those of their modules made so far: a library may give one its own stderr
    handler (distributed does to distributed.client, which says when it lost its scheduler)."""
    names = [name for name in logging.root.manager.loggerDict
             if any(name == top or name.startswith(top + ".") for top in _LOGGERS)]
    return [logging.getLogger(name) for name in dict.fromkeys([*_LOGGERS, *names])]
