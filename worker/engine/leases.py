"""The leases of a worker's claims: renewed while it works on them, a dead worker's rescued, and the
worker's heartbeat, by which health knows whether any worker is alive."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg

from worker.core import metrics
from worker.core.failover import database_unavailable
from worker.core.listen import Waker
from worker.core.logs import event
from worker.engine import queue_sql as q
from worker.engine.claim import EXPIRED, OWN_EXPIRED
from worker.engine.clock import SYSTEM, Clock
from worker.engine.database import Pool, fetch_row, fetch_scalar
from worker.engine.supervision import Fatal

log = logging.getLogger("mailroom.worker")

# How often a worker says it is alive (health calls a worker dead after a few missed beats).
HEARTBEAT_SECONDS = 15.0
# Pending email past the queue lifetime is swept this often (claiming catches what is claimed sooner):
# the sweep reads every pending row, and a lifetime is days.
EXPIRE_EVERY_SECONDS = 600.0


class HeldLeases:
    """The lease tokens of this process's claims, and until when each is known to hold on the engine's
    steady clock: from the moment the statement that last set it was sent (the claim, or a renewal),
    one lease on.

    A slot sends the next message of a claim only while at least half of its lease is known to be left
    (`fresh`); otherwise it renews that claim first (`renew_claim`) and sends only the emails the
    renewal found still held. A worker that stood still past its lease (a paused VM, a swap storm, a
    starved event loop, a renewal stuck behind a lock) has had its claim rescued and handed to
    another worker meanwhile: without this, it would send the next message too, and that email
    would go out twice."""

    def __init__(self, seconds: float, clock: Clock = SYSTEM) -> None:
        self.seconds = seconds
        self.clock = clock
        self._since: dict[uuid.UUID, float] = {}

    def __bool__(self) -> bool:
        return bool(self._since)

    def tokens(self) -> list[uuid.UUID]:
        """The tokens held now."""
        return list(self._since)

    def add(self, token: uuid.UUID, since: float) -> None:
        """A claim taken by a statement sent at `since` (the engine clock's `monotonic()`)."""
        self._since[token] = since

    def discard(self, token: uuid.UUID) -> None:
        """A claim ended."""
        self._since.pop(token, None)

    def renewed(self, tokens: list[uuid.UUID], since: float) -> None:
        """These leases were extended by a statement sent at `since`: only the tokens whose claim row
        the renewal found (a rescued claim's is gone; ended claims are left out)."""
        for token in tokens:
            if token in self._since:
                self._since[token] = max(self._since[token], since)

    def fresh(self, token: uuid.UUID) -> bool:
        """Whether at least half of the lease is known to be left."""
        since = self._since.get(token)
        return since is not None and self.clock.monotonic() - since < self.seconds / 2


async def renew_claim(pool: Pool, held: HeldLeases, token: uuid.UUID) -> set[int]:
    """Renew one claim's lease now; the ids of its emails it still holds (none: rescued and handed on)."""
    since = held.clock.monotonic()
    params = {"lease": held.seconds, "tokens": [token]}
    async with pool.connection() as conn:
        renewed = await _renew(conn, [token], held.seconds)
        cur = await conn.execute(q.RENEW_LEASES, params)
        ids = {int(row[0]) for row in await cur.fetchall()}
    held.renewed(renewed, since)
    return ids if renewed else set()


async def renew_once(pool: Pool, held: HeldLeases) -> None:
    """Extend the leases of every claim `held`; a claim rescued meanwhile is not renewed and stays
    not `fresh`, so its slot asks again before its next message (`renew_claim`) and leaves it."""
    tokens = held.tokens()
    if not tokens:
        return
    since = held.clock.monotonic()
    params = {"lease": held.seconds, "tokens": tokens}
    async with pool.connection() as conn:
        renewed = await _renew(conn, tokens, held.seconds)
        await conn.execute(q.RENEW_LEASES, params)
    held.renewed(renewed, since)


async def _renew(
    conn: psycopg.AsyncConnection[Any], tokens: list[uuid.UUID], seconds: float
) -> list[uuid.UUID]:
    """Extend the claim rows; the tokens of those it found."""
    cur = await conn.execute(q.RENEW_CLAIMS, {"lease": seconds, "tokens": tokens})
    return [row[0] for row in await cur.fetchall()]


async def renew_forever(pool: Pool, held: HeldLeases) -> None:
    """Every third of a lease, extend the leases of the claims `held`; raise `Fatal` when the database
    refused to renew them for half a lease (other workers would soon rescue, and re-send, what this one
    sends). A database that is unavailable (lost, failing over) is waited for instead: while it is, no
    slot sends past the one message its journal waits for, and a claim whose lease ran out meanwhile is
    rescued and never journalled by this worker (`queue_sql.JOURNAL_SENT`)."""
    lease_seconds = held.seconds
    interval = max(lease_seconds / 3, 0.05)
    renewed = time.monotonic()
    while True:
        await asyncio.sleep(interval)
        try:
            await renew_once(pool, held)
            renewed = time.monotonic()
        except psycopg.Error as exc:
            if database_unavailable(exc):
                log.debug("lease renewal: database unavailable (%s)", exc)
                continue
            log.warning("lease renewal failed: %s", exc)
            if time.monotonic() - renewed > lease_seconds / 2:
                raise Fatal(f"leases not renewed for {time.monotonic() - renewed:.0f}s ({exc})") from exc


async def rescue_once(pool: Pool, lease_seconds: float) -> list[int]:
    """Return expired claims to the queue (journal applied, unused quota refunded); the ids returned."""
    async with pool.connection() as conn:
        cur = await conn.execute(q.RESCUE_EXPIRED)
        rescued = [int(r[0]) for r in await cur.fetchall()]
        metrics.count_rescued(len(rescued))
        # Journal rows of a claim that lost its emails: kept a whole lease period longer than any live
        # claim could need them.
        await conn.execute(q.FORGET_ORPHANED_JOURNAL, {"age": 2 * lease_seconds})
    if rescued:
        log.warning(
            "returned %d email(s) with expired leases to the queue",
            len(rescued),
            extra=event("leases_rescued", count=len(rescued)),
        )
    return rescued


async def expire_pending(pool: Pool, lifetime_seconds: float, clock: Clock = SYSTEM) -> int:
    """Fail pending email older than the queue lifetime, and unsent email past its own; how many."""
    params = {
        "reason": EXPIRED,
        "own_reason": OWN_EXPIRED,
        "lifetime": lifetime_seconds,
        "ahead": clock.ahead,
    }
    async with pool.connection() as conn:
        cur = await conn.execute(q.EXPIRE_PENDING, params)
        expired = len(await cur.fetchall())
    metrics.count_email("", "expired", "sender", expired)  # no sender chosen yet: an empty label
    if expired:
        log.warning("%d email(s) expired in the queue", expired, extra=event("expired", count=expired))
    return expired


async def rescue_forever(
    pool: Pool, lease_seconds: float, lifetime_seconds: float, waker: Waker, clock: Clock = SYSTEM
) -> None:
    """Every half lease, rescue expired claims; every minute, expire old pending email (until cancelled)."""
    interval = max(lease_seconds / 2, 0.1)
    swept: float | None = None
    while True:
        try:
            if await rescue_once(pool, lease_seconds):
                waker.notify()
            if swept is None or clock.monotonic() - swept >= EXPIRE_EVERY_SECONDS:
                await expire_pending(pool, lifetime_seconds, clock)
                swept = clock.monotonic()
        except psycopg.Error as exc:
            _failed("lease rescue", exc)
        await clock.sleep(interval)


async def heartbeat_forever(pool: Pool, name: str) -> None:
    """Say this worker is alive every `HEARTBEAT_SECONDS` (until cancelled)."""
    while True:
        try:
            async with pool.connection() as conn:
                await conn.execute(q.HEARTBEAT, {"name": name})
        except psycopg.Error as exc:
            _failed("heartbeat", exc)
        await asyncio.sleep(HEARTBEAT_SECONDS)


def _failed(task: str, exc: psycopg.Error) -> None:
    """A periodic task's failure: said once for the process by its database circuit when the database is
    unavailable, here otherwise."""
    if database_unavailable(exc):
        log.debug("%s: database unavailable (%s)", task, exc)
    else:
        log.warning("%s failed: %s", task, exc)


async def say_gone(pool: Pool, name: str) -> None:
    """Remove this worker's heartbeat on a clean stop."""
    try:
        async with pool.connection() as conn:
            await conn.execute(q.WORKER_GONE, {"name": name})
    except psycopg.Error as exc:
        log.warning("could not remove the heartbeat of %s: %s", name, exc)


async def idle_seconds(pool: Pool, fallback: float, *, drain: bool, clock: Clock = SYSTEM) -> float:
    """How long an idle slot may sleep: until the next scheduled email is due, at most `fallback`."""
    try:
        due, lease_end = await fetch_row(pool, q.NEXT_DUE)
    except psycopg.Error:
        return 1.0
    if drain and lease_end is not None:
        # Another process's claim ends without a NOTIFY (sent email wakes nobody), and a dead one's
        # comes back at its lease end: look again within a second.
        fallback = min(fallback, 1.0)
        due = lease_end if due is None else min(due, lease_end)
    if due is None:
        return fallback
    return float(max(0.01, min(fallback, (due - clock.now()).total_seconds())))


async def drained(
    pool: Pool,
    lease_seconds: float,
    holding: bool,
    routes: Sequence[tuple[Sequence[str], Sequence[str]]],
    clock: Clock = SYSTEM,
) -> bool:
    """With `--drain`: rescue expired claims first; done when nothing is held under a live lease
    (`holding`: this process's own claims) and nothing due can be sent: no usable sender (`routes`, the
    streams and From domains of each usable one, empty), or nothing due that one of them may send (email
    of a stream no usable sender serves is left, and `worker --drain` says so as it stops)."""
    if await rescue_once(pool, lease_seconds):
        return False
    if holding or await fetch_scalar(pool, q.ANY_HELD):
        return False
    if not routes:
        return True
    senders = json.dumps([{"streams": list(s), "domains": list(d)} for s, d in routes])
    return not await fetch_scalar(pool, q.ANY_DUE, {"ahead": clock.ahead, "senders": senders})
