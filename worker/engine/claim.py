"""A claim: one batch of email under one lease token for one sender, with the quota reserved for it.

Its life is claim -> execute -> complete. `take` claims due rows with `FOR UPDATE SKIP LOCKED`,
fails those past the queue lifetime, marks the suppressed ones, reserves quota for the rest and
writes the claim's row (`mailroom.claims`) -- all in one transaction, so a failure anywhere leaves
nothing stranded. The completer (`worker.engine.completer`) records each email's result and ends
the claim in one transaction, whether it sent all, some or none of its emails: the journal applied,
the unsent emails returned, the unused quota given back. A worker that dies before it finishes leaves
that to `mailroom.rescue_expired_claims`, which does the same from the claim's row.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, TypedDict

import psycopg
from psycopg.types.json import Jsonb

from worker.core.logs import event
from worker.core.masking import mask_address
from worker.engine import queue_sql as q
from worker.engine.clock import SYSTEM, Clock
from worker.engine.database import Pool
from worker.engine.queue_sql import RESERVE
from worker.engine.rows import ClaimedEmail, claimed_email

log = logging.getLogger("mailroom.worker")

# A paced sender's claim holds at most this many seconds of its sending.
PACED_CLAIM_SECONDS = 5

EXPIRED = "expired: in the queue longer than the queue lifetime (MAILROOM_QUEUE_LIFETIME_SECONDS)"
OWN_EXPIRED = "expired: its own lifetime ended (expires_at) before it could be sent"


class Dropped(TypedDict):
    """One recipient a claim left out of a many-recipient email, as `queue_sql.RECORD_DROPPED` reads it."""

    email_id: int
    recipient: str
    kind: str
    reason: str


@dataclass(frozen=True)
class Lease:
    """Who claims, for how long a claim holds before another worker may rescue it, the queue lifetime,
    and the clock that says what is due."""

    owner: str
    seconds: float
    lifetime_seconds: float = 5 * 86400.0
    clock: Clock = SYSTEM


@dataclass
class Claim:
    """One batch under one lease token: the emails to send, and the quota reserved for them."""

    token: uuid.UUID
    sender_id: int
    day: date | None = None
    reserved: int = 0
    used: int = 0  # sends and permanent refusals: what the provider counted
    emails: list[ClaimedEmail] = field(default_factory=list)
    seen: int = 0  # rows the claim statement returned (suppressed and expired included)
    short: int = 0  # claimed emails the sender's quota did not cover (returned at once)
    suppressed: int = 0  # emails the claim suppressed (their address is on a list)
    expired: int = 0  # emails the claim failed for being past the queue lifetime
    claimed_at: float = field(default_factory=time.monotonic)  # for the claim-to-finish histogram
    # The streams the claim found nothing due in (tried before the one it took from, or all of them),
    # and the one it took from.
    empty_streams: tuple[str, ...] = ()
    stream: str | None = None


def claim_size(send_delay_ms: int, batch_size: int, own_batch_size: int | None = None) -> int:
    """How many emails to claim for a sender: its own batch size (how many it sends before the worker
    records their results and looks at its bounces and errors again), within the worker's `batch_size`
    (its default and ceiling), but no more than a paced sender sends in `PACED_CLAIM_SECONDS`, so its
    claim (and its reserved quota) is never held for long and a more urgent email waits for the next
    claim a few seconds at most."""
    if own_batch_size is not None:
        batch_size = max(1, min(batch_size, own_batch_size))
    if send_delay_ms <= 0:
        return batch_size
    return max(1, min(batch_size, PACED_CLAIM_SECONDS * 1000 // send_delay_ms))


# What an account serves unless it says otherwise (sender_accounts.streams' default).
STREAMS = ("transactional", "broadcast")


async def take(
    pool: Pool,
    lease: Lease,
    sender_id: int,
    limit: int,
    streams: Sequence[str] = STREAMS,
    domains: Sequence[str] = (),
) -> Claim:
    """Claim up to `limit` due emails for the sender, reserve quota and record the claim, in one transaction.

    The emails are of one stream: the first of `streams` (the sender's, in the turn the caller gives)
    that has due email; those with a From of their own only when its domain is one of `domains`."""
    claim = Claim(uuid.uuid4(), sender_id)
    params = {
        "limit": limit,
        "owner": lease.owner,
        "token": claim.token,
        "lease": lease.seconds,
        "sender": sender_id,
        "lifetime": lease.lifetime_seconds,
        "expired": EXPIRED,
        "own_expired": OWN_EXPIRED,
        "ahead": lease.clock.ahead,
        "domains": list(domains),
    }
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        await cur.execute(q.LOCK_SENDER, (sender_id,))
        await cur.execute(q.CLAIM_IN_INDEX_ORDER)
        rows, claim.empty_streams = await _claimed(conn, params, streams)
        claim.stream = streams[len(claim.empty_streams)] if rows else None
        claim.seen = len(rows)
        suppressed = [r.id for r in rows if r.status == "suppressed"]
        claim.suppressed = len(suppressed)
        claim.expired = sum(r.status == "failed" for r in rows)
        if suppressed:
            await cur.execute(q.LOG_SUPPRESSED, {"ids": suppressed, "owner": lease.owner})
        assigned = [r for r in rows if r.status == "assigned"]
        if assigned:
            await cur.execute(RESERVE, (sender_id, len(assigned)))
            reservation = await cur.fetchone()
            assert reservation is not None
            granted, claim.day = reservation
            claim.reserved = int(granted or 0)
            claim.emails, surplus = assigned[: claim.reserved], assigned[claim.reserved :]
            claim.short = len(surplus)
            if surplus:
                await cur.execute(q.UNCLAIM, {"ids": [e.id for e in surplus], "token": claim.token})
            if claim.emails:
                await cur.execute(q.INSERT_CLAIM, {**params, "day": claim.day, "reserved": claim.reserved})
        # Recorded for the emails this claim suppressed or keeps (not those handed back for want of quota).
        dropped = _dropped(rows, claim.emails)
        if dropped:
            await cur.execute(q.RECORD_DROPPED, {"dropped": Jsonb(dropped)})
    _log_dropped(dropped)
    _log_claim(sender_id, rows, len(suppressed))
    return claim


async def _claimed(
    conn: psycopg.AsyncConnection[Any], params: Mapping[str, object], streams: Sequence[str]
) -> tuple[list[ClaimedEmail], tuple[str, ...]]:
    """The claim's rows: of the first stream, in the order given, that has due email (none: []); and
    the streams found empty before it."""
    async with conn.cursor(row_factory=claimed_email) as claimed:
        for n, stream in enumerate(streams):
            await claimed.execute(q.CLAIM, {**params, "stream": stream})
            if rows := await claimed.fetchall():
                return rows, tuple(streams[:n])
    return [], tuple(streams)


def _dropped(rows: list[ClaimedEmail], kept: list[ClaimedEmail]) -> list[Dropped]:
    """The recipients the claim left out of the many-recipient emails it suppressed (all of them) or
    keeps, in To, Cc, Bcc order, each once, with its kind."""
    many = [row for row in rows if row.dropped]
    if not many:
        return []
    from worker.core.message import recipient_kinds  # email building: not loaded before it is needed

    kept_ids = {row.id for row in kept}
    return [
        {"email_id": row.id, "recipient": address, "kind": kind, "reason": dropped[key]}
        for row in many
        if (dropped := row.dropped) and (row.status == "suppressed" or row.id in kept_ids)
        for key, (address, kind) in recipient_kinds(row.as_row()).items()
        if key in dropped and dropped[key] != q.ALREADY_DELIVERED  # recorded as accepted
    ]


def _log_dropped(dropped: list[Dropped]) -> None:
    for recipient in dropped:
        masked = mask_address(recipient["recipient"])
        log.info(
            "email %s: %s recipient %s dropped: %s",
            recipient["email_id"],
            recipient["kind"],
            masked,
            recipient["reason"],
            extra=event(
                "recipient_suppressed",
                email_id=recipient["email_id"],
                recipient=masked,
                reason=recipient["reason"],
            ),
        )


def _log_claim(sender_id: int, rows: list[ClaimedEmail], suppressed: int) -> None:
    for row in rows:
        if row.status == "suppressed":
            recipient = mask_address(row.recipient_email)
            reason = row.suppression_reason
            log.info(
                "email %s to %s suppressed: %s",
                row.id,
                recipient,
                reason,
                extra=event("suppressed", email_id=row.id, recipient=recipient, reason=reason),
            )
        elif row.status == "failed":
            log.warning(
                "email %s failed: %s",
                row.id,
                row.last_error,
                extra=event("expired", email_id=row.id),
            )
    if rows:
        log.info(
            "claimed %d email(s), %d suppressed",
            len(rows),
            suppressed,
            extra=event("claimed", sender_id=sender_id, claimed=len(rows), suppressed=suppressed),
        )
