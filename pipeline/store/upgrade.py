"""Which schema version a database is at, and its upgrade to this version's, in place and in one transaction.

Writers call `upgrade_schema` when they open a database: a new one gets every table at HEAD; one written
by an earlier version is upgraded by the Alembic migrations in migrations/versions, inside one
transaction (SQLite after a copy of the file is kept beside it), so a crash leaves the old database as it
was. Readers call `check_readable`, which changes nothing. A database at a revision this version does not
know was written by a newer one and is refused, by readers and writers alike.
"""
from __future__ import annotations

import filecmp
import functools
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from pipeline.errors import UserError
from pipeline.faults import kill_point
from pipeline.store.lock import connect_args
from pipeline.store.schema import (BASELINE, HEAD, OPTIONAL, OPTIONAL_COLUMNS, VERSION_TABLE, VERSIONS, already_exists,
                                   metadata, schema_version, studies)

MIGRATIONS = Path(__file__).parent / "migrations"
NO_TABLES = "no tables"  # the revision of a database that holds none of the tool's tables yet
UPGRADE_LOCK_KEY = 0x72745F736368656D  # PostgreSQL advisory lock serialising upgrades ("rt_schem")


@dataclass(frozen=True)
class SchemaUpgraded:
    """A database written by an earlier version was upgraded; `message` says so in one line."""

    message: str


def stored_revision(connection: sa.Connection) -> str:
    """The database's schema revision: NO_TABLES, BASELINE for a database written by 0.1.0 (the rt_ tables
    without a version), or what rt_schema_version holds. Reads only."""
    inspector = sa.inspect(connection)
    if not inspector.has_table(studies.name):
        return NO_TABLES
    if not inspector.has_table(VERSION_TABLE):
        return BASELINE
    revisions = connection.execute(sa.select(schema_version.c.version_num)).scalars().all()
    if len(revisions) > 1:
        raise UserError(f"the database holds several schema versions ({', '.join(sorted(revisions))}) in "
                        f"{VERSION_TABLE}; it was changed by hand or by another tool")
    return revisions[0] if revisions else BASELINE


def _refuse_newer(revision: str, shown: str) -> None:
    if revision != NO_TABLES and revision not in VERSIONS:
        raise UserError(f"{shown} was written by a newer robust-tune (schema {revision}; this one knows up to "
                        f"{HEAD}, robust-tune {VERSIONS[HEAD]}); upgrade robust-tune to use it, nothing was changed")


def check_readable(engine: sa.Engine, shown: str) -> None:
    """For readers, who never change a byte: UserError when the database was written by a newer version, or
    when its layout lacks a column this version reads (then a writing command upgrades it first)."""
    with engine.connect() as connection:
        revision = stored_revision(connection)
        _refuse_newer(revision, shown)
        if revision == HEAD:
            return
        inspector = sa.inspect(connection)
        for table in metadata.sorted_tables:
            if not inspector.has_table(table.name):
                if table.name in OPTIONAL:
                    continue
                missing = [table.name]
            else:
                present = {column["name"] for column in inspector.get_columns(table.name)}
                missing = [f"{table.name}.{c.name}" for c in table.columns
                           if c.name not in present and f"{table.name}.{c.name}" not in OPTIONAL_COLUMNS]
            if missing:
                raise UserError(f"{shown} was written by robust-tune {VERSIONS[revision]} and lacks {missing[0]}, "
                                "which this version reads; run a writing command on it first (robust-tune run or "
                                "evaluate), which upgrades it and keeps a copy of the old one")


def upgrade_schema(engine: sa.Engine, shown: str, file: Path | None) -> str | None:
    """Bring the database to HEAD: create the tables of a new one, or upgrade one written by an earlier
    version in one transaction, a copy of a SQLite `file` kept beside it first. Returns the one line that
    says so after an upgrade; None when there was nothing to upgrade."""
    with engine.connect() as connection:  # the usual case, at HEAD already: no lock taken
        revision = stored_revision(connection)
    _refuse_newer(revision, shown)
    if revision == HEAD:
        return None
    for attempt in range(5):
        try:
            return _upgrade_once(engine, shown, file)
        except sa.exc.DatabaseError as error:  # another process created the tables of a new database first
            if not already_exists(error) or attempt == 4:
                raise
    return None


def _upgrade_once(engine: sa.Engine, shown: str, file: Path | None) -> str | None:
    """One attempt at `upgrade_schema`, holding the database's write lock from before the revision is read."""
    with _serialised_engine(engine.url).begin() as connection:
        if connection.dialect.name == "postgresql":  # two upgraders: the second waits, then finds HEAD
            connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": UPGRADE_LOCK_KEY})
        revision = stored_revision(connection)
        _refuse_newer(revision, shown)
        if revision == HEAD:
            return None
        if revision == NO_TABLES:
            metadata.create_all(connection)
            connection.execute(schema_version.delete())
            connection.execute(schema_version.insert().values(version_num=HEAD))
            return None
        backup = _keep_copy(file, VERSIONS[revision]) if file is not None else None
        schema_version.create(connection, checkfirst=True)
        if not connection.execute(sa.select(schema_version.c.version_num)).first():
            connection.execute(schema_version.insert().values(version_num=BASELINE))
        _run_migrations(connection)
        kill_point("in-migration")  # tests: a crash with every migration run and nothing committed
    kept = f"; the old one is kept as {backup}" if backup is not None else " in one transaction"
    return f"upgraded database {shown} from robust-tune {VERSIONS[revision]} to {VERSIONS[HEAD]}{kept}"


@functools.cache
def _serialised_engine(url: sa.URL) -> sa.Engine:
    """An engine on the database whose transactions take the write lock when they begin (SQLite's
    BEGIN IMMEDIATE, with its DDL inside the transaction), so one process at a time upgrades. One per
    database for the process's life, holding no connection (NullPool): a discarded engine would leave
    garbage whose collection, later, can swallow a Ctrl-C (CPython ignores exceptions in weakref callbacks)."""
    if url.get_backend_name() != "sqlite":
        return sa.create_engine(url, poolclass=sa.pool.NullPool, connect_args=connect_args(url, 60_000))
    serialised = sa.create_engine(url, poolclass=sa.pool.NullPool, connect_args=connect_args(url, 60_000))

    @sa.event.listens_for(serialised, "connect")
    def _no_implicit_transactions(dbapi_connection: object, record: object) -> None:
        dbapi_connection.isolation_level = None  # type: ignore[attr-defined]  # we say BEGIN, DDL included

    @sa.event.listens_for(serialised, "begin")
    def _begin_immediately(connection: sa.Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return serialised


def _keep_copy(file: Path, version: str) -> Path:
    """Copy the SQLite file to `<file>.bak-<version>` (while the upgrade holds its write lock, so the copy
    is whole); a copy of the same bytes made by an upgrade that was killed is reused, a different file of
    that name is never replaced (the copy goes to .bak-<version>-2, ...)."""
    target, n = file.with_name(f"{file.name}.bak-{version}"), 1
    while target.exists():
        if filecmp.cmp(file, target, shallow=False):
            return target
        n += 1
        target = file.with_name(f"{file.name}.bak-{version}-{n}")
    partial = target.with_name(target.name + ".partial")
    shutil.copy2(file, partial)
    with open(partial, "rb") as written:
        os.fsync(written.fileno())
    os.replace(partial, target)  # whole or absent
    return target


def _run_migrations(connection: sa.Connection) -> None:
    """Alembic's upgrade to HEAD from the revision in rt_schema_version, through `connection` (its
    transaction: committed with the rest, or rolled back with it)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
