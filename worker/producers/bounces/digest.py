"""The complaint digest: new complaints told to the administrators, one email per period, through the queue.

A complaint suppresses its address at once (`effects`); the administrators (MAILROOM_ADMIN_EMAILS) hear
of it in a digest, never one email per complaint. Periods are fixed slots of
MAILROOM_COMPLAINT_DIGEST_SECONDS (an hour by default) on the database's clock; a digest is a row of
`complaint_digests`, unique by its period, so however many workers run this producer a period has at
most one digest. Each complaint it tells of is marked with the digest's id in the same transaction as
the digest email is enqueued: a complaint is told once, and a complaint committed late is told in the
next digest. Addresses are masked in the email, as in the logs; `mailroom bounces list` shows them.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row

from worker.core.config import Settings
from worker.core.masking import mask_address
from worker.engine.producer import Producer
from worker.producers.bounces import COMPLAINTS_CHANNEL

if TYPE_CHECKING:
    from worker.core.reputation import Reputation

log = logging.getLogger("mailroom.worker")

LISTED = 50  # complaints listed in one digest; the rest are counted

PERIOD = """
SELECT date_bin(make_interval(secs => %(seconds)s), coalesce(%(now)s, now()),
                timestamptz '2000-01-01 00:00:00+00') AS period_start
"""

UNDIGESTED = """
SELECT count(*) AS complaints, array_agg(DISTINCT sender_account_id) FILTER (WHERE sender_account_id IS NOT NULL)
           AS senders
FROM mailroom.bounce_events WHERE kind = 'complaint' AND digest_id IS NULL
"""

NEWEST = """
SELECT e.received_at, e.recipient, e.status, e.email_id, e.campaign_id, s.name AS sender
FROM mailroom.bounce_events e
LEFT JOIN mailroom.sender_accounts s ON s.id = e.sender_account_id
WHERE e.kind = 'complaint' AND e.digest_id IS NULL
ORDER BY e.id DESC
LIMIT %s
"""

# The period's one digest: a second worker (or a second run) in the same period inserts nothing.
CLAIM_PERIOD = """
INSERT INTO mailroom.complaint_digests (period_start, complaints)
VALUES (%(period)s, %(complaints)s)
ON CONFLICT (period_start) DO NOTHING
RETURNING id
"""

MARK_TOLD = """
UPDATE mailroom.bounce_events SET digest_id = %(digest)s
WHERE kind = 'complaint' AND digest_id IS NULL
"""

DIGEST_EMAIL = "UPDATE mailroom.complaint_digests SET email_id = %(email)s WHERE id = %(digest)s"


async def digest_once(
    conn: psycopg.AsyncConnection[Any], settings: Settings, *, now: datetime | None = None
) -> int:
    """Enqueue this period's complaint digest if it is due; 1 when one was enqueued, else 0.

    `now` stands in for the database's clock (tests); nothing happens without administrators.
    """
    if not settings.admin_emails:
        return 0
    async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(PERIOD, {"seconds": settings.complaint_digest_seconds, "now": now})
        period = (await cur.fetchone() or {})["period_start"]
        await cur.execute(UNDIGESTED)
        found = await cur.fetchone() or {}
        complaints = int(found.get("complaints") or 0)
        if not complaints:
            return 0
        await cur.execute(CLAIM_PERIOD, {"period": period, "complaints": complaints})
        claimed = await cur.fetchone()
        if claimed is None:
            return 0  # this period's digest went out already: these wait for the next period
        digest_id = int(claimed["id"])
        await cur.execute(NEWEST, (LISTED,))
        newest = await cur.fetchall()
        reputations = await _reputations(cur, {int(s) for s in found.get("senders") or []})
        await cur.execute(MARK_TOLD, {"digest": digest_id})
        # Enqueueing (templates, links, content rules) is loaded with the first digest: most rounds find none.
        from worker.core.outbox import EmailRequest, enqueue_async

        request = EmailRequest(
            to=list(settings.admin_emails),
            subject=f"Mailroom: {complaints} new complaint{'s' if complaints != 1 else ''}",
            text=digest_text(complaints, period, settings.complaint_digest_seconds, newest, reputations),
            idempotency_key=f"mailroom:complaint-digest:{digest_id}",
            transactional=True,
            track=False,
            priority=5,
            reference_type="complaint_digest",
            reference_id=str(digest_id),
        )
        email_id = await enqueue_async(conn, request, settings=settings)
        await cur.execute(DIGEST_EMAIL, {"email": email_id, "digest": digest_id})
    log.info("complaint digest %s: %d complaint(s), email %s", digest_id, complaints, email_id)
    return 1


async def _reputations(cur: psycopg.AsyncCursor[dict[str, Any]], sender_ids: set[int]) -> list[Reputation]:
    """The complaint and hard-bounce rates of the senders the new complaints count against."""
    if not sender_ids:
        return []
    from worker.core.reputation import DEFAULT_WINDOW, REPUTATION, Reputation

    await cur.execute(REPUTATION, {"window": DEFAULT_WINDOW, "name": None})
    return [Reputation.from_row(r) for r in await cur.fetchall() if int(r["id"]) in sender_ids]


def digest_text(
    complaints: int,
    period: datetime,
    seconds: float,
    newest: list[dict[str, Any]],
    reputations: list[Reputation],
) -> str:
    """The digest's plain-text body: what came in, who sent it, how the senders stand, what to run."""
    lines = [
        f"{complaints} recipient{'s' if complaints != 1 else ''} reported email as spam since the last digest"
        f" (period starting {period:%Y-%m-%d %H:%M} UTC; one digest every {seconds / 60:.0f} min at most).",
        "Each address is suppressed already: nothing more is sent to it.",
        "",
        f"{'received (UTC)':<20} {'recipient':<28} {'sender':<16} {'campaign':<16} email",
    ]
    for row in newest:
        lines.append(
            f"{row['received_at']:%Y-%m-%d %H:%M:%S}  {mask_address(row['recipient']):<28}"
            f" {row['sender'] or '-':<16} {row['campaign_id'] or '-':<16} {row['email_id'] or '-'}"
        )
    if complaints > len(newest):
        lines.append(f"... and {complaints - len(newest)} earlier")
    if reputations:
        lines += ["", "Senders over their last deliveries (mailroom health fails above 0.3% complaints):"]
        lines += [
            f"  {r.sender}: {r.complaints} complaint(s), {r.hard_bounces} hard bounce(s)"
            f" in {r.deliveries} deliveries ({r.complaint_rate or 0:.2%} complaints)"
            if r.deliveries
            else f"  {r.sender}: no deliveries on record"
            for r in reputations
        ]
    lines += ["", "Every complaint in full: mailroom bounces list --kind complaint", ""]
    return "\n".join(lines)


PRODUCER = Producer(
    "complaint-digest",
    lambda conn, settings: digest_once(conn, settings),
    channels=(COMPLAINTS_CHANNEL,),
    # Looks every minute whether a new period began: a complaint waits at most a period and a minute.
    interval_seconds=60.0,
)
