"""The study lock: one process at a time runs (or evaluates, or deletes) a study.

The holder keeps the study's row in rt_study_locks and refreshes its heartbeat there from a background
thread; a lock whose holder has not been seen for LOCK_STALE_SECONDS is taken over. A holder that finds
its lock taken over (or cannot refresh it for that long) records it, and `check` stops it before its
next write. A holder paused past the stale time (Ctrl-Z, a closed laptop) may go on between that check and
its write, so every write of a holder is also fenced: its transaction claims the lock row by the holder's
token (`fenced`) and is rolled back, with LockLost, when the row is another process's. Two processes
therefore never write one study's records at once, whatever the timing. A holder that cannot reach the
database for that long stops with ServerLost instead: the server went away, and meanwhile another process
that reaches it may have taken the study over. A read or write that failed on a connection the server dropped
(a restart) is made again once it answers (reconnect.py), each time in a new fenced transaction.

A process paused in the middle of a write keeps the database locked (SQLite's write lock, PostgreSQL's row
lock); another process that needs to write then gets DatabaseBusy once the wait for it runs out: one line
naming the study and, from its lock row, the process that holds it, never a traceback.
"""
from __future__ import annotations

import datetime as dt
import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from typing import Any, Iterator

import sqlalchemy as sa

from pipeline.errors import DatabaseBusy, ServerLost, UserError
from pipeline.store.reconnect import Reconnecting, database_server, env_number
from pipeline.store.schema import campaign_locks, study_locks



# A lock whose holder has not refreshed it for this long is taken over (its holder died or hung).
LOCK_STALE_SECONDS = env_number("ROBUST_TUNE_LOCK_STALE_SECONDS", 120)
# How long a write waits for a lock another transaction keeps (SQLite's busy timeout, PostgreSQL's lock_timeout:
# `connect_args`), before saying the database is busy. ROBUST_TUNE_LOCK_WAIT_MS sets it (the tests of a busy
# database wait less).
LOCK_WAIT_MS = int(env_number("ROBUST_TUNE_LOCK_WAIT_MS", 5000))


def now() -> dt.datetime:
    """The time as stored: UTC without a time zone."""
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


class LockLost(UserError):
    """This process no longer holds the study's lock: another one took it over."""


def is_busy(error: BaseException) -> bool:
    """Whether `error` is a write (or read) that gave up waiting for a lock another connection holds: SQLite's
    "database is locked", PostgreSQL's lock timeout."""
    if not isinstance(error, sa.exc.OperationalError):
        return False
    text = str(getattr(error, "orig", None) or error)
    return "database is locked" in text or "lock timeout" in text


def busy_error(engine: sa.Engine, failed: str, table: sa.Table | None = None, key_value: int | None = None,
               kept: str = "nothing was changed") -> DatabaseBusy:
    """The one line saying what `failed` ("study x could not take its lock") because the database stays locked by
    another process: who holds the lock row `key_value` of `table` (pid, host, when last seen) where it can be
    read, what to do, and what stays as it was (`kept`)."""
    holder = None
    if table is not None and key_value is not None:
        try:  # a reader passes a writer's lock on SQLite unless that writer is committing
            with engine.connect() as connection:
                holder = connection.execute(sa.select(table).where(
                    table.primary_key.columns.values()[0] == key_value)).first()
        except sa.exc.DBAPIError:
            holder = None
    if holder is None:
        who = "another process keeps it locked in the middle of a write (one paused with Ctrl-Z, perhaps)"
        act = "resume or stop that process"
    else:
        what = "campaign" if table is campaign_locks else "study"
        seen = (now() - holder.heartbeat_at).total_seconds()
        who = (f"another process keeps it locked in the middle of a write: the {what}'s lock is held by process "
               f"{holder.pid} on host {holder.host}, last seen {seen:.0f} s ago (paused with Ctrl-Z, perhaps)")
        act = f"resume it (fg, or kill -CONT {holder.pid}) or stop it"
    return DatabaseBusy(f"{failed}: {database_server(engine.url)} is busy, {who}; {act}, then try again; {kept}")


def take_lock(engine: sa.Engine, study_id: int, name: str, table: sa.Table = study_locks) -> StudyLock:
    """Become the one process running study `name`, taking over a stale lock; UserError while another holds it,
    DatabaseBusy while another process keeps the database locked in a write. With `table` = campaign_locks, the
    same for campaign `name` (`take_campaign_lock`)."""
    what = "campaign" if table is campaign_locks else "study"
    try:
        return Reconnecting.of(engine).run(lambda: _take_lock(engine, study_id, name, table, what))
    except sa.exc.OperationalError as error:
        if not is_busy(error):
            raise
        raise busy_error(engine, f"{what} {name} could not take its lock", table, study_id) from None


def _take_lock(engine: sa.Engine, study_id: int, name: str, table: sa.Table, what: str) -> StudyLock:
    key = table.primary_key.columns.values()[0]
    token, host = uuid.uuid4().hex, socket.gethostname()
    mine = dict(token=token, pid=os.getpid(), host=host, heartbeat_at=now())
    try:
        with engine.begin() as connection:
            connection.execute(table.insert().values({key.name: study_id, **mine}))
        return StudyLock(engine, study_id, name, token, table)
    except sa.exc.IntegrityError:
        pass
    with engine.connect() as connection:
        holder = connection.execute(sa.select(table).where(key == study_id)).first()
    if holder is None:  # released in the meantime: try again
        return _take_lock(engine, study_id, name, table, what)
    seen = (now() - holder.heartbeat_at).total_seconds()
    if seen < LOCK_STALE_SECONDS and not (holder.host == host and not _alive(holder.pid)):
        raise UserError(f"{what} {name} is being run by process {holder.pid} on host {holder.host} "
                        f"(last seen {seen:.0f} s ago); wait for it or stop it")
    if not take_over(engine, table, study_id, holder, mine):
        raise UserError(f"{what} {name} is being run by another process (its lock changed while this one "
                        "looked: refreshed by its holder, or just taken over); wait for it or stop it")
    return StudyLock(engine, study_id, name, token, table)


def take_over(engine: sa.Engine, table: sa.Table, key_value: int, holder: sa.Row, mine: dict) -> bool:
    """Replace the lock row `holder` (as read) by `mine`, only if it is still exactly that row: a holder that
    refreshed its heartbeat since it was read is alive, and keeps its lock. Whether it was taken."""
    key = table.primary_key.columns.values()[0]
    with engine.begin() as connection:
        return connection.execute(table.update().where(
            key == key_value, table.c.token == holder.token, table.c.heartbeat_at == holder.heartbeat_at)
            .values(**mine)).rowcount == 1


def connect_args(url: sa.URL, wait_ms: float | None = None) -> dict[str, Any]:
    """What a connection to `url` opens with: a bound on waiting for a lock another process keeps (one paused in the
    middle of a write: a lock row, a row, a table being created), `wait_ms` (by default LOCK_WAIT_MS) as SQLite's
    busy timeout or PostgreSQL's lock_timeout, so that a write gives up and says so instead of waiting as long as the
    pause; and on a server, at most 10 s to connect."""
    wait = LOCK_WAIT_MS if wait_ms is None else wait_ms
    if url.get_backend_name() == "sqlite":
        return {"timeout": wait / 1000}
    if url.get_backend_name() == "postgresql":
        return {"connect_timeout": 10, "options": f"-c lock_timeout={int(wait)}"}
    return {}


def take_campaign_lock(engine: sa.Engine, campaign_id: int, name: str) -> StudyLock:
    """Become the one process running campaign `name` (`compare`); its studies are locked one by one inside."""
    return take_lock(engine, campaign_id, name, campaign_locks)


def _alive(pid: int) -> bool:
    """Whether a process with this id exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class StudyLock:
    """A held study lock; a background thread refreshes its heartbeat until `release`."""

    def __init__(self, engine: sa.Engine, study_id: int, name: str, token: str, table: sa.Table = study_locks) -> None:
        self.engine, self.study_id, self.name, self.token = engine, study_id, name, token
        self.table, self.key = table, table.primary_key.columns.values()[0]
        self.what = "campaign" if table is campaign_locks else "study"
        self.lost: str | None = None  # why the lock is no longer ours, once it is not
        self.unreachable = False  # lost because the database could not be reached for LOCK_STALE_SECONDS
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat_until_released, daemon=True, name="study-heartbeat")
        self._thread.start()

    def beat(self) -> bool:
        """Refresh the heartbeat; False when another process has taken the study over."""
        with self.engine.begin() as connection:
            return self._claim(connection)

    def _claim(self, connection: sa.Connection, remove: bool = False) -> bool:
        """Refresh the heartbeat in `connection`'s transaction (with `remove`, delete the lock row), where the
        lock row still has this holder's token; whether it had. The row stays locked by this transaction until
        it ends."""
        statement = self.table.delete() if remove else self.table.update().values(heartbeat_at=now())
        return connection.execute(statement.where(self.key == self.study_id,
                                                  self.table.c.token == self.token)).rowcount == 1

    def _beat_until_released(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(LOCK_STALE_SECONDS / 6):
            try:
                if not self.beat():
                    self.lost = "another process took it over"
                    return
                last = time.monotonic()
            except (sa.exc.OperationalError, sa.exc.InterfaceError) as error:  # busy or away: try at the next beat
                if time.monotonic() - last >= LOCK_STALE_SECONDS:  # by now another process may take it over
                    self.lost = (f"the {self.what}'s lock could not be refreshed for {time.monotonic() - last:.0f} s "
                                 f"({' '.join(str(getattr(error, 'orig', error)).split())})")
                    self.unreachable = True
                    return
            except Exception as error:  # noqa: BLE001  (the thread must not die unseen)
                self.lost = f"its heartbeat failed: {type(error).__name__}: {' '.join(str(error).split())}"
                return

    def check(self) -> None:
        """Raise LockLost (a UserError, one line) when this process no longer holds the lock: the heartbeat
        found it taken over, or the lock row is now another process's; ServerLost when the heartbeat could
        not reach the database for LOCK_STALE_SECONDS."""
        if self.lost is None:
            self.lost = Reconnecting.of(self.engine).run(self._read_taken_by)
        self.stop_if_lost()

    def _read_taken_by(self) -> str | None:
        with self.engine.connect() as connection:
            return self._taken_by(connection)

    def stop_if_lost(self) -> None:
        """Raise LockLost when the heartbeat found the lock lost; reads no database, so it may run at every
        training step and stop a holder that was paused and taken over at once."""
        if self.lost is not None:
            raise self._lost_error()

    def _lost_error(self) -> LockLost | ServerLost:
        """The one line saying that, and why, this process stopped."""
        if self.unreachable:
            return ServerLost(f"lost {database_server(self.engine.url)}: {self.lost}")
        return LockLost(f"lost the lock of {self.what} {self.name}: {self.lost}; stopped (the trials it stored are "
                        "kept; run it again once the other process is done)")

    def _taken_by(self, connection: sa.Connection) -> str | None:
        """Why the lock row is not this holder's (who holds it now), or None while it is."""
        holder = connection.execute(sa.select(self.table.c.token, self.table.c.pid, self.table.c.host)
                                    .where(self.key == self.study_id)).first()
        if holder is None:
            return "its lock was removed by another process"
        return None if holder.token == self.token else f"process {holder.pid} on host {holder.host} took it over"

    @contextmanager
    def fenced(self, removing_study: bool = False) -> Iterator[sa.Connection]:
        """A write transaction that commits only while this process holds the lock: after the writes, in
        the same transaction, the lock row is claimed by this holder's token (and stays locked until the
        commit, so no takeover can come in between); when it is another process's or gone, everything is
        rolled back and LockLost raised. The claim comes last so that a database-wide write lock (SQLite's)
        is taken only by the writes themselves, not by what the caller computes first (Ax's proposals). A
        write that failed because the new holder wrote the same record first is a LockLost too.
        `removing_study`, for the transaction that deletes the study (which the lock row refers to): the
        claim comes first and deletes the lock row, so the commit releases the lock with the study."""
        self.stop_if_lost()
        try:
            with self.engine.begin() as connection:
                if removing_study:
                    self._hold(connection, remove=True)
                yield connection
                if not removing_study:
                    self._hold(connection)
        except sa.exc.DBAPIError as error:
            try:
                with self.engine.connect() as connection:
                    taken_by = self._taken_by(connection)
            except sa.exc.DBAPIError:
                if not is_busy(error):
                    raise error from None
                taken_by = None  # the lock row cannot even be read: a writer is committing, or stopped doing so
            if taken_by is None and is_busy(error):  # still ours, and another process keeps the database locked
                raise busy_error(self.engine, f"{self.what} {self.name} could not write its records",
                                 kept="what it stored before is kept") from None
            if taken_by is None:  # still ours: the failure is the write's own
                raise
            self.lost = taken_by
            raise self._lost_error() from None

    def _hold(self, connection: sa.Connection, remove: bool = False) -> None:
        """Claim the lock row in `connection`'s transaction (`_claim`); LockLost when it is not this holder's."""
        if not self._claim(connection, remove):
            self.lost = self._taken_by(connection) or "another process took it over"
            self.stop_if_lost()

    def release(self, again: bool = True) -> None:
        """Stop the heartbeat and delete the lock row, if it is still ours; after a lost connection, again once the
        server answers (not without `again`: one try)."""
        self._stop.set()
        self._thread.join()

        def delete() -> None:
            with self.engine.begin() as connection:
                connection.execute(self.table.delete().where(
                    self.key == self.study_id, self.table.c.token == self.token))

        Reconnecting.of(self.engine).run(delete) if again else delete()

    def __enter__(self) -> StudyLock:
        return self

    def __exit__(self, error_type: type[BaseException] | None, *exc: object) -> None:
        """Release the lock; when the block raised and the database cannot be reached, the block's error is the
        one to tell: the lock row is left, and taken over as a dead holder's."""
        try:
            self.release(again=error_type is None)
        except (sa.exc.OperationalError, sa.exc.InterfaceError):
            if error_type is None:
                raise
