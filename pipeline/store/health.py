"""The database file's health: a writer checks a SQLite file before its first write, so a damaged file is never
written to; and a fault of the file or the disk under it (read-only, full, damaged, unreadable) becomes one line
naming the database, the cause and what to do, wherever in an exception's chain it lies: an error raised while
cleaning up after it (a closed transaction, a failed rollback) never hides it.
"""
from __future__ import annotations

import errno
import sqlite3
from pathlib import Path
from typing import Callable

import sqlalchemy as sa

from pipeline.errors import DatabaseFault, ServerLost, TrainingFailed, UserError

_opened: list[sa.URL] = []  # the database this command opened last (cli/main.py names it in a fault's line)
_damage: list[DatabaseFault] = []  # what a reader found damaged in it (cli/main.py warns of it)
_left_out: list[str] = []  # the studies a reader could not read there, and left out
_met: list[DatabaseFault] = []  # the last fault a database call met, should a library retry and raise another error


def opened(url: sa.URL) -> None:
    """Note the database this command works on now."""
    _opened[:] = [url]


def forget() -> None:
    """A new command: no database opened, no damage found yet."""
    _opened.clear()
    _damage.clear()
    _left_out.clear()
    _met.clear()


def damage_found() -> str | None:
    """The line saying that the database a reader opened is damaged, where one was, naming the studies it left out:
    what it showed is what could still be read."""
    if not _damage:
        return None
    left_out = f"; left out, as its records could not be read: {', '.join(_left_out)}" if _left_out else ""
    return f"{_damage[-1]}{left_out}"


def damaged_now() -> bool:
    """Whether the database a reader opened was found damaged (check_intact)."""
    return bool(_damage)


def readable(read: Callable[[], object], name: str, url: sa.URL) -> bool:
    """Whether `read()` (every record of study `name`) reads, in a damaged database; a study it cannot read, for a
    fault of the file (`fault_in`), is noted as left out. Other errors pass."""
    try:
        read()
    except sa.exc.DBAPIError as error:
        if fault_in(error, url) is None:
            raise
        if f"study {name}" not in _left_out:
            _left_out.append(f"study {name}")
        return False
    return True


def _name(url: sa.URL | None) -> str:
    """How a fault's line names the database: its SQLite file, or its server (never a password)."""
    if url is None:
        return "the database"
    if url.get_backend_name() == "sqlite":
        return f"the database {url.database}"
    return f"the database {url.render_as_string(hide_password=True)}"


def damaged(url: sa.URL | None, cause: str) -> DatabaseFault:
    """The line for a damaged database: nothing is written to it, and how to recover what it holds."""
    if url is not None and url.get_backend_name() == "sqlite" and url.database:
        file = Path(url.database)
        new = file.with_name(f"{file.stem}-recovered{file.suffix or '.db'}")
        how = (f'recover what it holds into a new file with: sqlite3 {file} ".recover" | sqlite3 {new}, '
               f"then use --db {new}")
    else:
        how = "have its administrator repair it"
    what = "is damaged, or no SQLite database at all" if "not a database" in cause else "is damaged"
    return DatabaseFault(f"{_name(url)} {what} ({cause}); nothing was written to it; {how}")


def _line(kind: str, url: sa.URL | None, cause: str, file: str | None = None) -> DatabaseFault:
    """The one line for a fault of `kind` (full, read-only, folder, disk, damaged) of the database at `url`, or of
    another `file` the command writes ("": a file the operating system did not name)."""
    where = (f"the file {file}" if file else _name(url) if file is None
             else f"a file this command writes ({_name(url)}, or the log file)")
    kept = "what was stored is kept; run the same command again to resume"
    if kind == "damaged":
        return damaged(url, cause)
    if kind == "full":
        return DatabaseFault(f"the disk holding {where} is full ({cause}): free space on it; {kept}")
    if kind == "read-only":
        return DatabaseFault(f"cannot write {where} ({cause}): make it and its folder writable (chmod u+w; a file "
                             f"made immutable: chattr -i); {kept}")
    if kind == "folder":
        return DatabaseFault(f"cannot write beside {where} ({cause}): SQLite writes a journal file in the database's "
                             f"folder while it writes; make the folder writable; {kept}")
    return DatabaseFault(f"cannot read or write {where} ({cause}): check the disk (its space, that it is mounted and "
                         f"writable); {kept}")


# SQLite's primary result codes (sqlite3.Error.sqlite_errorname, extended codes start with them), PostgreSQL's
# SQLSTATEs, and OS errors, by the fault they mean.
_SQLITE = {"SQLITE_CORRUPT": "damaged", "SQLITE_NOTADB": "damaged", "SQLITE_FULL": "full",
           "SQLITE_READONLY": "read-only", "SQLITE_CANTOPEN": "folder", "SQLITE_IOERR": "disk"}
_POSTGRES = {"53100": "full", "25006": "read-only", "XX001": "damaged", "XX002": "damaged"}
_OS = {errno.ENOSPC: "full", errno.EDQUOT: "full", errno.EROFS: "read-only", errno.EACCES: "read-only",
       errno.EPERM: "read-only", errno.EIO: "disk"}


def _fault_of(error: BaseException, url: sa.URL | None) -> DatabaseFault | None:
    """The fault `error` itself is (not its chain), or None."""
    cause = getattr(error, "orig", None) or error
    text = " ".join(str(cause).split()) or type(cause).__name__
    if isinstance(cause, sqlite3.Error):
        name = getattr(cause, "sqlite_errorname", "") or ""
        kind = next((k for code, k in _SQLITE.items() if name.startswith(code)), None)
        if kind is None and ("malformed" in text or "not a database" in text):  # a driver without error names
            kind = "damaged"
        return None if kind is None else _line(kind, url, text)
    sqlstate = getattr(cause, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate in _POSTGRES:
        return _line(_POSTGRES[sqlstate], url, text)
    if isinstance(cause, OSError) and cause.errno in _OS and not isinstance(cause, sqlite3.Error):
        return _line(_OS[cause.errno], url, cause.strerror or text, str(cause.filename) if cause.filename else "")
    return None


def _note_fault(context: sa.engine.ExceptionContext) -> None:
    """A watched engine's failed database call: remember the last fault met (see `watch`)."""
    fault = _fault_of(context.original_exception, context.engine.url if context.engine is not None else None)
    if fault is not None:
        _met[:] = [fault]


def watch(engine: sa.Engine) -> None:
    """Remember the faults `engine`'s database calls meet: Ax retries a failed write and then raises the retry's own
    error (a transaction closed by the first failure), which names no cause. Only the tool's engines (the store's,
    Ax's) are watched, never every engine of the process."""
    if not sa.event.contains(engine, "handle_error", _note_fault):
        sa.event.listen(engine, "handle_error", _note_fault)


def fault_in(error: BaseException, url: sa.URL | None = None) -> DatabaseFault | None:
    """The environment fault of the store found in `error` or the errors it was raised in the handling of (`url`: the
    database; by default the one this process opened last), as one line; None when there is none, or when `error` is
    already one of the tool's own one-line errors."""
    if isinstance(error, (UserError, ServerLost, TrainingFailed, DatabaseFault)):
        return None
    url = url or (_opened[0] if _opened else None)
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if (fault := _fault_of(current, url)) is not None:
            return fault
        current = current.__cause__ or current.__context__
    if isinstance(error, sa.exc.SQLAlchemyError) and _met:  # the database layer's own error after a fault it met
        return _met[-1]
    return None


def check_intact(engine: sa.Engine, file: Path, write: bool) -> None:
    """SQLite's quick_check of `file` (every page's structure, read once; a few hundredths of a second per 100 MB):
    a writer (`write`) is refused with DatabaseFault before its first write to a damaged file; a reader goes on
    reading what it can, and the damage is noted (`damage_found`). Writes nothing (it may only roll back a write
    a crash left half done, as any first read does)."""
    if not file.is_file() or file.stat().st_size == 0:
        return
    try:
        with engine.connect() as connection:
            found = connection.exec_driver_sql("PRAGMA quick_check(1)").scalars().all()
    except sa.exc.DBAPIError as error:
        fault = fault_in(error, engine.url)
        if fault is None:
            raise
        raise fault from None
    if found == ["ok"]:
        return
    fault = damaged(engine.url, " ".join(" ".join(found).replace("*** in database main ***", "").split()))
    if write:
        raise fault
    _damage[:] = [fault]
