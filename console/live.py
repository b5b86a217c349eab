"""Live updates: one dedicated LISTEN connection on `mailroom_changes`, and a coalescer for bursts.

Statement-level triggers on every table send `{"table": ..., "op": ...}`. The feed reports each
notification's table and every change of connection state; after a (re)connect it asks for a full
refresh, since anything may have changed while it was away. It never listens on a server that takes
no writes (a standby, or a primary demoted in a failover, which would hear nothing): it asks before
LISTEN and every few seconds after, and leaves such a server for the primary the URL leads to now.
The coalescer turns a burst of thousands of notifications into at most one refresh per interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable

import psycopg

from worker.core.failover import WRITABLE_CHECK_SECONDS, check_takes_writes, said

CHANNEL = "mailroom_changes"
# A complaint arrived (the bounce intake's NOTIFY, `{"event_id": ..., "email_id": ...}`): the operator is told.
COMPLAINTS = "mailroom_complaints"
ALL_TABLES = "*"


class LiveFeed:
    """LISTEN until cancelled, reconnecting with backoff and reporting 'live' or 'reconnecting'."""

    def __init__(
        self,
        url: str,
        on_change: Callable[[set[str]], None],
        on_state: Callable[[str], None],
        *,
        max_delay: float = 5.0,
        on_complaint: Callable[[dict[str, object]], None] | None = None,
    ) -> None:
        self.url = url
        self.on_change = on_change
        self.on_state = on_state
        self.on_complaint = on_complaint
        self.max_delay = max_delay
        self.state = "connecting"
        self.backend_pid: int | None = None
        self.connects = 0
        self.received = 0
        self.lost_because = ""  # why the connection was last lost (the first line of the error)

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.on_state(state)

    async def run(self) -> None:
        """The feed's loop; run it as a background task and cancel it to stop."""
        delay = 0.1
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, application_name="mailroom-console-listen"
                ) as conn:
                    await check_takes_writes(conn)
                    await conn.execute(f"LISTEN {CHANNEL}")
                    if self.on_complaint is not None:
                        await conn.execute(f"LISTEN {COMPLAINTS}")
                    self.backend_pid = conn.info.backend_pid
                    self.connects += 1
                    delay = 0.1
                    self._set_state("live")
                    # A full refresh after every (re)connect: notifications sent meanwhile are lost.
                    self.on_change({ALL_TABLES})
                    await self._hear(conn)
            except psycopg.Error as exc:
                self.backend_pid = None
                self.lost_because = said(exc)
                self._set_state("reconnecting")
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.max_delay)

    async def _hear(self, conn: psycopg.AsyncConnection[object]) -> None:
        while True:
            async for note in conn.notifies(timeout=WRITABLE_CHECK_SECONDS):
                self.received += 1
                if note.channel == COMPLAINTS and self.on_complaint is not None:
                    self.on_complaint(_object_of(note.payload))
                else:
                    self.on_change({_table_of(note.payload)})
            await check_takes_writes(conn)  # ReadOnlyServer: a failover; reconnect to the primary


def _object_of(payload: str) -> dict[str, object]:
    with contextlib.suppress(ValueError):
        found = json.loads(payload)
        if isinstance(found, dict):
            return found
    return {}


def _table_of(payload: str) -> str:
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        table = json.loads(payload).get("table")
        if isinstance(table, str):
            return table
    return ALL_TABLES


class Coalescer:
    """Collects changed tables and calls `flush` at most once per `interval` seconds.

    The first change after a quiet spell is flushed at once; changes within the interval after a
    flush wait for its end, so a burst costs one refresh at its start and one at each interval.
    """

    def __init__(
        self,
        flush: Callable[[set[str]], None],
        schedule: Callable[[float, Callable[[], None]], object],
        *,
        interval: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._flush = flush
        self._schedule = schedule
        self.interval = interval
        self._clock = clock
        self._dirty: set[str] = set()
        self._pending = False
        self._last = -1e9
        self.flushes = 0

    @property
    def pending(self) -> bool:
        """Whether a flush is scheduled and has not run yet."""
        return self._pending

    def add(self, tables: set[str]) -> None:
        """Note changed tables; schedule a flush unless one is already due."""
        self._dirty |= tables
        if self._pending:
            return
        self._pending = True
        wait = max(0.0, self._last + self.interval - self._clock())
        self._schedule(wait, self._fire)

    def _fire(self) -> None:
        self._pending = False
        self._last = self._clock()
        dirty, self._dirty = self._dirty, set()
        if dirty:
            self.flushes += 1
            self._flush(dirty)
