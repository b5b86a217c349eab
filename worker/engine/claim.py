"""A claim: one batch of email under one lease token for one sender, with the quota reserved for it.

Its life is claim -> deliver -> finish | release. `claim_batch` takes due rows with
`FOR UPDATE SKIP LOCKED` and marks the suppressed ones; `reserve` takes quota for what was claimed;
`finish` is the bookkeeping every claim ends with, whether it sent everything, some or nothing:
the journal applied, the unsent emails released, the unused quota given back.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import date
from typing import Any

import psycopg
from psycopg.rows import dict_row

from worker.core.logs import event
from worker.core.masking import mask_address
from worker.engine import queue_sql as q
from worker.engine.database import Pool, fetch_scalar
from worker.engine.senders import RELEASE_QUOTA, RESERVE

log = logging.getLogger("mailroom.worker")


@dataclass
class Quota:
    """Quota reserved for one claim: how much, on which UTC day, and how much the sends used."""

    sender_id: int
    day: date
    granted: int
    used: int = 0


@dataclass(frozen=True)
class Lease:
    """Who claims, and for how long a claim holds before another worker may rescue it."""

    owner: str
    seconds: float


async def claim_batch(
    pool: Pool, lease: Lease, sender_id: int, token: uuid.UUID, limit: int
) -> list[dict[str, Any]]:
    """Claim up to `limit` due emails for the sender under `token`; suppressed ones come back marked so."""
    params = {
        "limit": limit,
        "owner": lease.owner,
        "token": token,
        "lease": lease.seconds,
        "sender": sender_id,
    }
    async with pool.connection() as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(q.CLAIM_IN_INDEX_ORDER)
        await cur.execute(q.CLAIM, params)
        rows = await cur.fetchall()
        suppressed = [r["id"] for r in rows if r["status"] == "suppressed"]
        if suppressed:
            await cur.execute(q.LOG_SUPPRESSED, {"ids": suppressed, "owner": lease.owner})
    _log_claim(sender_id, rows, len(suppressed))
    return rows


def _log_claim(sender_id: int, rows: list[dict[str, Any]], suppressed: int) -> None:
    for row in rows:
        if row["status"] == "suppressed":
            recipient = mask_address(row["recipient_email"])
            reason = row["suppression_reason"]
            log.info(
                "email %s to %s suppressed: %s",
                row["id"],
                recipient,
                reason,
                extra=event("suppressed", email_id=row["id"], recipient=recipient, reason=reason),
            )
    if rows:
        log.info(
            "claimed %d email(s), %d suppressed",
            len(rows),
            suppressed,
            extra=event("claimed", sender_id=sender_id, claimed=len(rows), suppressed=suppressed),
        )


async def reserve(pool: Pool, sender_id: int, wanted: int) -> Quota:
    """Reserve quota for `wanted` emails of the sender today; the grant may be smaller."""
    async with pool.connection() as conn:
        cur = await conn.execute(RESERVE, (sender_id, wanted))
        row = await cur.fetchone()
    assert row is not None
    return Quota(sender_id, row[1], int(row[0] or 0))


async def refund(pool: Pool, quota: Quota) -> None:
    """Give back the quota of the emails that did not use it, to the day it was reserved on."""
    unused = quota.granted - quota.used
    if unused > 0:
        await fetch_scalar(pool, RELEASE_QUOTA, (quota.sender_id, unused, quota.day))
        quota.granted = quota.used


async def release(pool: Pool, token: uuid.UUID, ids: list[int]) -> None:
    """Return claimed, unsent emails to the queue (only while this claim still holds them)."""
    if not ids:
        return
    async with pool.connection() as conn:
        await conn.execute(q.RELEASE, {"ids": ids, "token": token})
    log.info(
        "released %d claimed email(s) back to the queue", len(ids), extra=event("released", count=len(ids))
    )


async def apply_journal(pool: Pool, token: uuid.UUID) -> None:
    """Move this claim's journalled sends into the queue and the attempt log (one statement)."""
    async with pool.connection() as conn:
        await conn.execute(q.APPLY_SENT, {"tokens": [token]})


async def finish(pool: Pool, token: uuid.UUID, quota: Quota, unsent: list[int]) -> None:
    """A claim's bookkeeping: its journal into the queue and the log, what it did not send back to
    the queue, the sender's last use, the quota it did not use. Each step runs even when one before
    it failed (the first failure is raised at the end); lease rescue applies the journal of a worker
    that dies before it is done."""
    steps: list[Callable[[], Awaitable[Any]]] = [
        lambda: apply_journal(pool, token),
        lambda: release(pool, token, unsent),
        # Once per batch, not per email: the sender row is also what quota reservations lock.
        lambda: fetch_scalar(pool, q.TOUCH_SENDER, (quota.sender_id,)),
        lambda: refund(pool, quota),
    ]
    failure: psycopg.Error | None = None
    for step in steps:
        try:
            await step()
        except psycopg.Error as exc:
            failure = failure or exc
    if failure is not None:
        raise failure
