"""What the worker runs beside delivery: a producer is a background task with its channels and interval.

A producer's `run_once` does one bounded unit of work in its own transaction on the connection it is
given and returns how many items it handled; the worker calls it again at once while it returns more
than zero, and otherwise waits for a NOTIFY on one of its channels or for its interval to pass. The
command line decides which producers a worker runs (`worker.cli.wiring`); the engine only runs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from worker.core.config import Settings
from worker.core.failover import database_unavailable
from worker.core.listen import Waker
from worker.engine.database import Pool

log = logging.getLogger("mailroom.worker")

RunOnce = Callable[[psycopg.AsyncConnection[Any], Settings], Awaitable[int]]


@dataclass(frozen=True)
class Producer:
    """A background task of the worker: what wakes it, how often it looks anyway, what it does."""

    name: str
    run_once: RunOnce
    channels: tuple[str, ...] = ()
    interval_seconds: float = 30.0
    # What the producer holds beyond a round (sessions, tasks of its own), let go when the worker stops.
    close: Callable[[], Awaitable[None]] | None = None


async def run_producer(
    producer: Producer,
    pool: Pool,
    settings: Settings,
    waker: Waker,
    stopping: asyncio.Event,
    rested: asyncio.Event | None = None,
) -> None:
    """Run one producer until stopped: again at once while it finds work, else on NOTIFY or timer.
    `rested` is set once a round ends with nothing left to do (or failed: it waits its interval)."""
    try:
        await _rounds(producer, pool, settings, waker, stopping, rested or asyncio.Event())
    finally:
        if producer.close is not None:
            await producer.close()


async def _rounds(
    producer: Producer,
    pool: Pool,
    settings: Settings,
    waker: Waker,
    stopping: asyncio.Event,
    rested: asyncio.Event,
) -> None:
    while not stopping.is_set():
        ticket = waker.ticket()
        done = 0
        try:
            async with pool.connection() as conn:
                done = await producer.run_once(conn, settings)
        except Exception as exc:
            if database_unavailable(exc):
                # Said once for the process by the pool's circuit; this producer waits as it says.
                log.debug("producer %s: database unavailable (%s); retrying", producer.name, exc)
                await waker.wait(max(pool.circuit.wait_seconds(), 0.1), ticket)
                continue
            # One producer's bug must not stop delivery or the other producers; say so loudly.
            log.exception(
                "producer %s failed; trying again in %.0fs", producer.name, producer.interval_seconds
            )
        if done <= 0:
            rested.set()
            await waker.wait(producer.interval_seconds, ticket)


# How long a producer with channels waits for the worker's LISTEN connection before its first round
# (a NOTIFY sent before the LISTEN would be missed; the listener's connect wakes it, and also a
# listener that failed or gave up): a server slower than this costs one round more, as before.
FIRST_LISTEN_SECONDS = 5.0


class Producers:
    """The producers one worker runs: the wakers NOTIFY on their channels reaches (`routes`), and
    whether each has finished a round with nothing left to do since the worker started (`rested`)."""

    def __init__(self, producers: Sequence[Producer]) -> None:
        self.producers = list(producers)
        self.wakers = {p.name: Waker() for p in self.producers}
        self._rested = {p.name: asyncio.Event() for p in self.producers}

    def routes(self) -> dict[str, list[Waker]]:
        """Channel -> the wakers of the producers that listen to it."""
        routes: dict[str, list[Waker]] = {}
        for producer in self.producers:
            for channel in producer.channels:
                routes.setdefault(channel, []).append(self.wakers[producer.name])
        return routes

    def tasks(
        self, pool: Pool, settings: Settings, stopping: asyncio.Event
    ) -> dict[str, Callable[[], Awaitable[None]]]:
        """Each producer's task, named. Made before the worker's listener starts: a producer with
        channels does its first round once the listener's first connect has woken it (so a NOTIFY
        between its first look and the LISTEN cannot be missed, and that wake-up costs no second
        round), or after `FIRST_LISTEN_SECONDS`."""
        self._rested = {p.name: asyncio.Event() for p in self.producers}
        tasks: dict[str, Callable[[], Awaitable[None]]] = {}
        for producer in self.producers:
            waker, rested = self.wakers[producer.name], self._rested[producer.name]
            listened = waker.ticket() if producer.channels else None
            tasks[f"producer {producer.name}"] = functools.partial(
                _after_listen, listened, producer, pool, settings, waker, stopping, rested
            )
        return tasks

    def wake(self) -> None:
        """Wake every producer (the listener stopped: none waits for its connect any longer)."""
        for waker in self.wakers.values():
            waker.notify()

    async def rested(self, stopping: asyncio.Event) -> None:
        """Return once every producer has finished a round with nothing left to do, or on a stop."""
        for rested in self._rested.values():
            if rested.is_set():
                continue
            waits = (asyncio.ensure_future(rested.wait()), asyncio.ensure_future(stopping.wait()))
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
            if stopping.is_set():
                return


async def _after_listen(listened: asyncio.Event | None, producer: Producer, *args: Any) -> None:
    if listened is not None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FIRST_LISTEN_SECONDS):
                await listened.wait()
    await run_producer(producer, *args)
