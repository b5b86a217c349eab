"""The database failing over, as every Mailroom process meets it (docs/high-availability.md).

Production PostgreSQL fails over: the primary crashes and a standby is promoted, or the primary turns
read-only and stays up while another node takes its place. To a Mailroom process both look the same
from where it stands: a connection that breaks, a server that says it is shutting down, a statement
refused because the server no longer takes writes. `unavailable_reason` is the one rule that says
which errors mean "the database is unavailable" (as opposed to "this statement or this row is
wrong"); everything that talks to PostgreSQL asks it. What follows from it is the same everywhere:
drop that connection (`Pool` closes a pool connection rather than lending it again), wait as the
process's `DatabaseCircuit` says, and connect again through the multi-host URL, whose
`target_session_attrs=read-write` finds the node that takes writes now.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from worker.core import metrics
from worker.core.logs import event

log = logging.getLogger("mailroom.database")

# The words of `unavailable_reason` (and of the `reason` label of mailroom_database_unavailable_total):
# no connection, a lost one, or none that takes writes (the multi-host URL found no primary); a hot
# standby, or a primary demoted while it stays up; 57P01 admin shutdown, 57P02 crash shutdown, 57P03
# starting up; class 53, too many connections or out of memory or disk; any other operational error
# (a lock or statement timeout, a serialization failure).
UNREACHABLE = "unreachable"
READ_ONLY = "read-only"
SHUTTING_DOWN = "shutting down"
OVERLOADED = "overloaded"
INTERRUPTED = "interrupted"
REASONS = (UNREACHABLE, READ_ONLY, SHUTTING_DOWN, OVERLOADED, INTERRUPTED)


class ReadOnlyServer(psycopg.OperationalError):
    """The server a connection is on takes no writes any more (a standby, or a demoted primary)."""


def unavailable_reason(exc: BaseException) -> str | None:
    """Why `exc` means the database cannot take work now, or None when it is about the work itself.

    Unavailable: a connection that could not be made, was lost or timed out (psycopg's InterfaceError,
    an OperationalError without a SQLSTATE or of class 08, a pool timeout), a server shutting down or
    not yet accepting connections (class 57), one out of resources (class 53), and one that takes no
    writes (25006 read_only_sql_transaction, `ReadOnlyServer`). Any other OperationalError (a lock or
    statement timeout, a serialization failure) counts too: waiting and trying again is its remedy as
    well. Anything else (a constraint, a bad value, a bug) is about the work and is never retried as
    an outage."""
    if isinstance(exc, ReadOnlyServer | psycopg.errors.ReadOnlySqlTransaction):
        return READ_ONLY
    if isinstance(exc, psycopg.InterfaceError):
        return UNREACHABLE
    if not isinstance(exc, psycopg.OperationalError):
        return None
    state = exc.sqlstate or ""
    if not state or state.startswith("08"):
        return UNREACHABLE
    if state.startswith("57"):
        return SHUTTING_DOWN
    if state.startswith("53"):
        return OVERLOADED
    return INTERRUPTED


def database_unavailable(exc: BaseException) -> bool:
    """Whether `exc` means the database is unavailable (see `unavailable_reason`)."""
    return unavailable_reason(exc) is not None


def said(exc: BaseException) -> str:
    """The first line of an error, for a log line (psycopg's messages run on over several)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def server_read_only(conn: psycopg.BaseConnection[Any]) -> bool:
    """Whether the server said it takes no writes: PostgreSQL 14 and later report `in_hot_standby` and
    `default_transaction_read_only` on every change (a reload included) before the next reply, at no
    cost. False when nothing was said (a pooler in between reports neither): the statement's 25006
    then says it."""
    status = conn.info.parameter_status
    return status("in_hot_standby") == "on" or status("default_transaction_read_only") == "on"


async def check_writable(conn: psycopg.AsyncConnection[Any]) -> None:
    """The pool's check before it lends a connection: the connection answers (psycopg_pool's own
    check, one empty query) and its server still takes writes. One on a read-only server is closed, so
    the pool opens another through the multi-host URL instead of keeping it."""
    await AsyncConnectionPool.check_connection(conn)
    if server_read_only(conn):
        await conn.close()
        raise ReadOnlyServer("the server turned read-only (a standby, or a demoted primary)")


# How often an idle LISTEN connection (the worker's, the console's) asks whether its server still takes
# writes: a LISTEN on a demoted primary that stays up would hear nothing while the new one takes them.
WRITABLE_CHECK_SECONDS = 2.0
# Answered for the statement's own transaction: on for a hot standby, and for a primary whose
# default_transaction_read_only was turned on (a node losing its leadership). Asked, not read from the
# reported parameters: an idle session hears of a reload only when it next runs a statement.
_TAKES_WRITES = "SHOW transaction_read_only"


async def check_takes_writes(conn: psycopg.AsyncConnection[Any]) -> None:
    """Raise `ReadOnlyServer` when the connection's server takes no writes (one round trip)."""
    cur = await conn.execute(_TAKES_WRITES)
    row = await cur.fetchone()
    if row is not None and row[0] == "on":
        raise ReadOnlyServer("the server takes no writes (a standby, or a demoted primary)")


@dataclass(frozen=True)
class CircuitView:
    """What health and the console say about a process's database circuit."""

    open: bool
    failures: int
    unavailable_seconds: float  # since the first failure of this outage; 0 when none
    reason: str  # one of REASONS, or "" when the database is available
    error: str  # the last error's first line
    retry_in_seconds: float


# Every circuit of this process, for its health probes (`worker.ops.metrics_server`).
_CIRCUITS: weakref.WeakSet[DatabaseCircuit] = weakref.WeakSet()


def open_circuits() -> list[tuple[str, CircuitView]]:
    """The role and view of each of this process's circuits that is open now."""
    return [(c.role, view) for c in list(_CIRCUITS) if (view := c.view()).open]


class DatabaseCircuit:
    """One process's view of its database: available, failing, or open (failed `threshold` times in a
    row, so every task waits before trying again, the wait doubling up to `cap_seconds`).

    Every task that meets an unavailable database calls `failed` and then `pause`s; the first
    success after an outage (`succeeded`, one test of an integer when nothing failed) closes it. The
    log says when an outage begins, when the circuit opens and when the database is back, once each
    however many tasks meet it; metrics count the failures by reason and show the circuit's state."""

    def __init__(
        self,
        role: str,
        *,
        threshold: int = 3,
        base_seconds: float = 0.5,
        cap_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.role = role
        self.threshold = threshold
        self.base_seconds = base_seconds
        self.cap_seconds = cap_seconds
        self.clock = clock
        self.failures = 0
        self.opened = False
        self._since = 0.0
        self._delay = base_seconds
        self._retry_at = 0.0
        self._reason = ""
        self._error = ""
        _CIRCUITS.add(self)

    def failed(self, exc: BaseException) -> None:
        """Count one failure of a database operation (the reason from `unavailable_reason`)."""
        now = self.clock()
        reason = unavailable_reason(exc) or INTERRUPTED
        self.failures += 1
        self._reason, self._error = reason, said(exc)
        metrics.count_database_unavailable(self.role, reason)
        if self.failures == 1:
            self._since, self._retry_at = now, now + self.base_seconds
            log.warning(
                "%s: database unavailable (%s: %s); retrying",
                self.role,
                reason,
                self._error,
                extra=event("database_unavailable", role=self.role, reason=reason),
            )
        elif not self.opened and self.failures >= self.threshold and now - self._since >= self.base_seconds:
            # Several tries over more than a blip (a process's tasks all fail at once when it begins).
            self._open(now)
        elif self.opened and now >= self._retry_at:
            # A try after the wait failed: wait longer before the next one.
            self._delay = min(self._delay * 2, self.cap_seconds)
            self._retry_at = now + self._delay

    def _open(self, now: float) -> None:
        self.opened = True
        self._delay = self.base_seconds
        self._retry_at = now + self._delay
        metrics.set_database_circuit(self.role, True)
        log.warning(
            "%s: database still unavailable after %d failures in %.1fs (%s: %s); circuit open, "
            "trying again at most every %.0fs",
            self.role,
            self.failures,
            now - self._since,
            self._reason,
            self._error,
            self.cap_seconds,
            extra=event("database_circuit_open", role=self.role, reason=self._reason, failures=self.failures),
        )

    def succeeded(self) -> None:
        """A database operation worked: an outage, if there was one, is over."""
        if self.failures:
            self._close()

    def _close(self) -> None:
        seconds = self.clock() - self._since
        log.warning(
            "%s: database available again after %.1fs (%d failed tries)",
            self.role,
            seconds,
            self.failures,
            extra=event(
                "database_available", role=self.role, seconds=round(seconds, 3), failures=self.failures
            ),
        )
        if self.opened:
            metrics.set_database_circuit(self.role, False)
        self.failures, self.opened, self._delay = 0, False, self.base_seconds
        self._reason = self._error = ""

    def wait_seconds(self) -> float:
        """How long a task that just failed waits before trying again."""
        if not self.failures:
            return 0.0
        if not self.opened:
            return self.base_seconds
        return max(self._retry_at - self.clock(), 0.0)

    async def pause(self) -> None:
        """Wait as `wait_seconds` says."""
        await asyncio.sleep(self.wait_seconds())

    def view(self) -> CircuitView:
        """The circuit now, for health, metrics and the console."""
        since = self.clock() - self._since if self.failures else 0.0
        return CircuitView(self.opened, self.failures, since, self._reason, self._error, self.wait_seconds())


class Pool(AsyncConnectionPool[psycopg.AsyncConnection[Any]]):
    """psycopg's pool for a process that must live through a failover: it lends only connections whose
    server takes writes (`check_writable`), closes a connection that met an unavailable database
    instead of lending it again (a read-only server's connection is healthy to psycopg_pool), and
    tells the process's circuit how each use went.

    A server that went away or turned read-only did so for every connection to it: the idle ones are
    dropped together (psycopg_pool 3.3's `drain`), not found out one checkout at a time with the
    pool's back-off between its checks (1, 2, 4 ... seconds)."""

    def __init__(self, conninfo: str, *, circuit: DatabaseCircuit, **kwargs: Any) -> None:
        super().__init__(conninfo, check=self._check, **kwargs)
        self.circuit = circuit

    async def _check(self, conn: psycopg.AsyncConnection[Any]) -> None:
        try:
            await check_writable(conn)
        except Exception as exc:
            await self._drop_idle(exc)
            raise

    async def _drop_idle(self, exc: BaseException) -> None:
        if unavailable_reason(exc) in (UNREACHABLE, READ_ONLY, SHUTTING_DOWN):
            drain = getattr(self, "drain", None)  # psycopg_pool 3.3 and later
            if drain is not None:
                await drain()

    @asynccontextmanager
    async def connection(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 -- psycopg_pool's own signature
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection for the block, as psycopg_pool lends it; see the class."""
        try:
            async with super().connection(timeout) as conn:
                try:
                    yield conn
                except BaseException as exc:
                    if database_unavailable(exc):
                        await conn.close()  # the pool replaces a closed connection
                        await self._drop_idle(exc)
                    raise
        except Exception as exc:
            if database_unavailable(exc):
                self.circuit.failed(exc)
            raise
        self.circuit.succeeded()
