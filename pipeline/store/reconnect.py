"""Riding through a restart of the database server: a lost connection costs a pause and a line, not the command.

SQLAlchemy's two ways with a dropped connection ("Dealing with Disconnects" in its pooling guide) are both used.
Pessimistic: a server's engine tests each connection before use (`pool_pre_ping`, set by the Store), so a restart
between two uses of the database passes unseen. Optimistic: an operation whose connection dropped while it ran
(DBAPIError.connection_invalidated, or any error after SQLAlchemy met a disconnect, as Ax's retry of a write raises
its own) or that could not connect is run again once the server answers, for at most RECONNECT_SECONDS; after that
it is ServerLost, one line. An operation given to `Reconnecting.run` is one whole transaction built from its
arguments (a Store method; an Ax write, made again from Ax's stored state), so running it again writes what it would
have written; a lock holder's writes stay fenced, since each run claims the lock row again (LockLost when another
process took the study over meanwhile). SQLite has no server to come back: its operations run once, as before.
"""
from __future__ import annotations

import os
import time
import weakref
from dataclasses import dataclass
from typing import Callable, TypeVar

import sqlalchemy as sa

from pipeline.errors import DatabaseFault, ServerLost, TrainingFailed, UserError

T = TypeVar("T")


def env_number(name: str, default: float) -> float:
    """A positive number from the environment variable `name`, else `default`; anything else is a one-line
    UserError naming the variable."""
    text = os.environ.get(name, "")
    try:
        value = float(text) if text else default
        if not value > 0:
            raise ValueError
    except ValueError:
        raise UserError(f"{name} must be a positive number, not {text!r}") from None
    return value


# How long an operation waits for a database server that dropped its connection (a restart, a fail-over) to answer
# again before the command stops with ServerLost. A holder's lock is taken over once LOCK_STALE_SECONDS pass
# without a heartbeat, whichever comes first.
RECONNECT_SECONDS = env_number("ROBUST_TUNE_RECONNECT_SECONDS", 60)
POLL_SECONDS = 0.5  # how often a lost server is asked whether it answers again


def database_server(url: sa.URL) -> str:
    """How messages name a database: its server's host and port, or its SQLite file; never a password."""
    if url.get_backend_name() == "sqlite":
        return f"the database {url.database}"
    if url.host:
        return f"the database server {url.host}" + (f":{url.port}" if url.port else "")
    return f"the database {url.render_as_string(hide_password=True)}"


@dataclass(frozen=True)
class Reconnected:
    """The connection to the database server was lost and is back; `message` says so in one line."""

    message: str


def _reason(error: BaseException) -> str:
    """The driver's own words for `error`, on one line."""
    cause = getattr(error, "orig", None) or error
    return " ".join(str(cause).split("\n", 1)[0].split()) or type(cause).__name__


class Reconnecting:
    """Runs operations on one engine's database again after a lost connection (see the module), telling `notify`
    each time the server came back. One per engine (`of`), shared by the Store, its locks and Ax's writes."""

    _of: weakref.WeakKeyDictionary[sa.Engine, Reconnecting] = weakref.WeakKeyDictionary()

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.notify: Callable[[Reconnected], None] = lambda event: None  # the command's: its progress lines
        self.server = engine.dialect.name != "sqlite"
        self.disconnects = 0  # disconnects SQLAlchemy met on this engine (its handle_error event), from any thread
        self.disconnected_at = 0.0  # when it met the last one (time.monotonic)
        self.disconnect = ""  # the driver's words for it
        if self.server:
            sa.event.listen(engine, "handle_error", self._met)

    @classmethod
    def of(cls, engine: sa.Engine) -> Reconnecting:
        """The engine's one Reconnecting."""
        if engine not in cls._of:
            cls._of[engine] = cls(engine)
        return cls._of[engine]

    def _met(self, context: sa.engine.ExceptionContext) -> None:
        if context.is_disconnect:
            self.disconnects += 1
            self.disconnected_at = time.monotonic()
            self.disconnect = _reason(context.original_exception)

    def run(self, operation: Callable[[], T], after_loss: Callable[[], None] = lambda: None) -> T:
        """`operation()`, run again once the server answers when it failed on a lost connection; `after_loss` runs
        before each new attempt (to drop what the failed one left in memory). ServerLost once the server has not
        answered for RECONNECT_SECONDS."""
        if not self.server:
            return operation()
        lost_at: float | None = None  # when the first attempt met the loss
        while True:
            before = self.disconnects
            try:
                result = operation()
            except Exception as error:
                if not self.lost(error, before):
                    raise
                if lost_at is None:  # a library may have waited on it before it gave up (Ax retries once, 5 s on)
                    lost_at = self.disconnected_at if self.disconnects > before else time.monotonic()
                self.wait(lost_at, error)
                back_after = time.monotonic() - lost_at
                after_loss()
                continue
            if lost_at is not None:
                self.notify(Reconnected(f"lost the connection to {database_server(self.engine.url)}; reconnected "
                                        f"after {back_after:.0f} s"))
            return result

    def lost(self, error: BaseException, disconnects_before: int) -> bool:
        """Whether `error` came from a lost connection: its connection was invalidated, SQLAlchemy met a disconnect
        while the operation ran (a library's retry then raises an error of its own), it could not connect, or the
        server does not answer now. The tool's own one-line errors (LockLost among them) never are."""
        if isinstance(error, (UserError, ServerLost, TrainingFailed, DatabaseFault)):
            return False
        if self.disconnects > disconnects_before:
            return True
        if not isinstance(error, sa.exc.DBAPIError):
            return False
        return error.connection_invalidated or error.statement is None or not self.answers()

    def answers(self) -> bool:
        """Whether the server takes a connection and a query now."""
        try:
            with self.engine.connect() as connection:
                connection.execute(sa.text("select 1"))
        except sa.exc.DBAPIError:
            return False
        return True

    def wait(self, lost_at: float, error: BaseException) -> None:
        """Until the server answers; ServerLost, naming it and `error`'s cause, once RECONNECT_SECONDS have passed
        since `lost_at` without an answer."""
        while not self.answers():
            if time.monotonic() - lost_at >= RECONNECT_SECONDS:  # the driver's words, not a library's after them
                reason = _reason(error) if isinstance(error, sa.exc.DBAPIError) else self.disconnect
                raise ServerLost(f"lost {database_server(self.engine.url)} ({reason}); it did not answer "
                                 f"for {RECONNECT_SECONDS:.0f} s (ROBUST_TUNE_RECONNECT_SECONDS)")
            time.sleep(POLL_SECONDS)
