"""LISTEN on a dedicated autocommit connection, re-LISTEN after reconnects, and wake whoever waits.

A LISTEN connection hears only what its own server's commits notify: one left on a primary that was
demoted and stays up (read-only) would hear nothing while the new primary takes the writes. So the
listener asks its server every `WRITABLE_CHECK_SECONDS` whether it still takes writes, and before it
LISTENs at all, and leaves one that does not for the primary the multi-host URL leads to now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql

from worker.core.failover import WRITABLE_CHECK_SECONDS, ReadOnlyServer, check_takes_writes

log = logging.getLogger("mailroom.listen")


class Waker:
    """An event that wakes every waiter once per notify (no lost wake-ups, no busy loop)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        """Wake everyone waiting now."""
        self._event.set()
        self._event = asyncio.Event()

    def ticket(self) -> asyncio.Event:
        """Take before looking for work: a notify that comes while looking then ends the wait at once."""
        return self._event

    async def wait(self, seconds: float, ticket: asyncio.Event | None = None) -> bool:
        """Wait for a notify after `ticket` was taken (default: from now), at most `seconds`."""
        event = ticket or self._event
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that
        # arrives as the event fires, and a cancelled producer then waits on forever.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await event.wait()
            return True
        return False


class Listener:
    """Keeps one LISTEN connection open and wakes whoever a notification concerns.

    A notification on one of `channels` wakes `waker`; one on a channel of `routes` wakes that
    channel's wakers. Every (re)connect wakes them all, since something may have been missed.
    """

    def __init__(
        self,
        url: str,
        channels: Sequence[str],
        waker: Waker,
        routes: Mapping[str, Sequence[Waker]] | None = None,
    ) -> None:
        self.url = url
        self.waker = waker
        self._routes: dict[str, list[Waker]] = {channel: [waker] for channel in channels}
        for channel, wakers in (routes or {}).items():
            self._routes.setdefault(channel, []).extend(w for w in wakers if w is not waker)
        self.channels = tuple(self._routes)
        self.live = False
        self.unavailable = False

    def _wake_all(self) -> None:
        for waker in {id(w): w for wakers in self._routes.values() for w in wakers}.values():
            waker.notify()

    async def run(self) -> None:
        """Listen until cancelled, reconnecting with backoff; fall back to polling if LISTEN is refused."""
        delay = 0.2
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                    await check_takes_writes(conn)  # never LISTEN on a standby or a demoted primary
                    for channel in self.channels:
                        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    self.live = True
                    delay = 0.2
                    self._wake_all()  # full pass after every (re)connect: we may have missed something
                    await self._hear(conn)
            except (psycopg.errors.FeatureNotSupported, psycopg.errors.InsufficientPrivilege) as exc:
                self.live = False
                self.unavailable = True
                log.warning("LISTEN is unavailable (%s); polling instead", exc)
                return
            except psycopg.Error as exc:
                self._lost(exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _hear(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Wake whoever a notification concerns; every `WRITABLE_CHECK_SECONDS`, make sure the server
        still takes writes (raises `ReadOnlyServer` when it does not)."""
        while True:
            async for note in conn.notifies(timeout=WRITABLE_CHECK_SECONDS):
                for waker in self._routes.get(note.channel, ()):
                    waker.notify()
            await check_takes_writes(conn)

    def _lost(self, exc: psycopg.Error) -> None:
        if self.live:
            if isinstance(exc, ReadOnlyServer):
                log.warning("LISTEN connection's server turned read-only; reconnecting to the primary")
            else:
                log.warning("LISTEN connection lost (%s); reconnecting", exc)
        self.live = False
        self._wake_all()
