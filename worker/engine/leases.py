"""The leases of a worker's claims: renewed while it works on them, and a dead worker's rescued."""

from __future__ import annotations

import asyncio
import logging
import uuid

import psycopg

from worker.core.listen import Waker
from worker.core.logs import event
from worker.engine import queue_sql as q
from worker.engine.database import Pool

log = logging.getLogger("mailroom.worker")


async def renew_forever(pool: Pool, lease_seconds: float, tokens: set[uuid.UUID]) -> None:
    """Every third of a lease, extend the leases of the claims in `tokens` (until cancelled)."""
    interval = max(lease_seconds / 3, 0.05)
    while True:
        await asyncio.sleep(interval)
        if not tokens:
            continue
        try:
            async with pool.connection() as conn:
                await conn.execute(q.RENEW_LEASES, {"lease": lease_seconds, "tokens": list(tokens)})
        except psycopg.Error as exc:
            log.warning("lease renewal failed: %s", exc)


async def rescue_forever(pool: Pool, lease_seconds: float, waker: Waker) -> None:
    """Every half lease, return expired claims (with their journal applied) to the queue (until cancelled)."""
    interval = max(lease_seconds / 2, 0.1)
    while True:
        try:
            async with pool.connection() as conn:
                cur = await conn.execute(q.RESCUE_EXPIRED)
                rescued = await cur.fetchall()
                # Journal rows of a claim that lost its emails: kept a whole lease period longer than
                # any live claim could need them.
                await conn.execute(q.FORGET_ORPHANED_JOURNAL, {"age": 2 * lease_seconds})
            if rescued:
                log.warning(
                    "returned %d email(s) with expired leases to the queue",
                    len(rescued),
                    extra=event("leases_rescued", count=len(rescued)),
                )
                waker.notify()
        except psycopg.Error as exc:
            log.warning("lease rescue failed: %s", exc)
        await asyncio.sleep(interval)
