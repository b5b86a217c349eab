"""What the worker runs beside delivery: a producer is a background task with its channels and interval.

A producer's `run_once` does one bounded unit of work in its own transaction on the connection it is
given and returns how many items it handled; the worker calls it again at once while it returns more
than zero, and otherwise waits for a NOTIFY on one of its channels or for its interval to pass. The
command line decides which producers a worker runs (`worker.cli.wiring`); the engine only runs them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
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
    producer: Producer, pool: Pool, settings: Settings, waker: Waker, stopping: asyncio.Event
) -> None:
    """Run one producer until stopped: again at once while it finds work, else on NOTIFY or timer."""
    try:
        await _rounds(producer, pool, settings, waker, stopping)
    finally:
        if producer.close is not None:
            await producer.close()


async def _rounds(
    producer: Producer, pool: Pool, settings: Settings, waker: Waker, stopping: asyncio.Event
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
            await waker.wait(producer.interval_seconds, ticket)
