"""Writing a report to a file without ever losing what was there.

The text goes to a temporary file in the target's folder and is renamed into place (os.replace), so
a kill leaves either the old file or the new one, never half of either. A database is never the
target, and an existing file is replaced only when the user says so.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

from pipeline.errors import UserError

SQLITE_HEADER = b"SQLite format 3\x00"
SQLITE_SIDE_FILES = ("", "-journal", "-wal", "-shm")  # a SQLite database and the files it keeps beside it


def write_output(path: Path, content: str | bytes, force: bool = False, database: Path | None = None,
                 option: str = "--out") -> Path:
    """Write `content` (text as UTF-8, or bytes) to `path` atomically; refuses `database` (and its side
    files) and any SQLite file always, an existing file unless `force`, and a folder that does not
    exist. Errors name `option`, the command-line option that gave the path. Returns the path."""
    return _write(path, check_output(path, force, database, option), content, option)


def check_output(path: Path, force: bool = False, database: Path | None = None, option: str = "--out") -> Path:
    """The refusals of `write_output`, on their own: check before slow work whose result goes to `path`."""
    target = path.resolve()
    if database is not None and target in {Path(f"{database.resolve()}{suffix}") for suffix in SQLITE_SIDE_FILES}:
        raise UserError(f"{option} {path} is the database itself; write the report to another file")
    if target.is_dir():
        raise UserError(f"{option} {path} is a folder; name a file in it")
    if not target.parent.is_dir():
        check_folder(path.parent, option, path)  # a file where a folder should be is named as such
        raise UserError(f"{option} {path}: folder {path.parent} does not exist")
    if target.exists() and _is_sqlite(target):
        raise UserError(f"{option} {path} is a SQLite database; a report never replaces one")
    if target.exists() and not force:
        raise UserError(f"{option} {path} already exists; pass --force to replace it")
    return target


def blocking_file(folder: Path) -> Path | None:
    """The nearest existing ancestor of `folder` (itself included) when it is not a folder: a folder cannot
    be made there. None when `folder` exists as a folder or can be made."""
    for ancestor in (folder, *folder.parents):
        if ancestor.exists() or ancestor.is_symlink():
            return None if ancestor.is_dir() else ancestor
    return None


def check_folder(folder: Path, option: str, path: Path | None = None) -> None:
    """Refuse `folder` (where `option`'s `path` goes) when it cannot be made: checked before slow work."""
    blocker = blocking_file(folder)
    if blocker is not None:
        raise UserError(f"{option} {path or folder}: {blocker} is a file, not a folder")


def make_folder(folder: Path, option: str, path: Path | None = None) -> None:
    """Make `folder` and its parents for `option`'s `path`; one line naming the problem when it cannot be made."""
    check_folder(folder, option, path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"{option} {path or folder}: cannot make folder {folder}: {error.strerror or error}") from None


def _write(path: Path, target: Path, content: str | bytes, option: str) -> Path:
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        # O_EXCL: never write through a file or link that is already there; mode 0o666 lets the umask decide.
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as error:
        raise UserError(f"cannot write {option} {path}: {error.strerror or error}") from None
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(content.encode("utf-8") if isinstance(content, str) else content)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise UserError(f"cannot write {option} {path}: {error.strerror or error}") from None
    return path


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as file:
            return file.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False
