"""What a bounce or complaint changes: its event row, the bounce list, the email's status, a notice.

Every change happens in the caller's transaction, after the event row is inserted under its unique
dedupe key: a report delivered again inserts nothing and so changes nothing a second time. Every
string is made storable first (`storable`), so no report fails for ever on a NUL or a bad byte.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

import psycopg

from worker.core.masking import mask_address, mask_addresses_in
from worker.core.webhook_events import EventSource
from worker.producers.bounces import COMPLAINTS_CHANNEL as COMPLAINTS_CHANNEL
from worker.producers.bounces.parse import MAX_DIAGNOSTIC, Kind, RecipientReport, Source
from worker.producers.bounces.quarantine import QUARANTINE_CAP as QUARANTINE_CAP
from worker.producers.bounces.quarantine import keep
from worker.producers.bounces.storable import storable, storable_or_none

log = logging.getLogger(__name__)


INSERT_EVENT = """
INSERT INTO mailroom.bounce_events (email_id, recipient, kind, status, action, diagnostic, source,
                                    source_message_id, raw_size, dedupe_key, sender_account_id, campaign_id)
VALUES (%(email_id)s, %(recipient)s, %(kind)s, %(status)s, %(action)s, %(diagnostic)s, %(source)s,
        %(source_message_id)s, %(raw_size)s, %(dedupe_key)s, %(sender)s, %(campaign)s)
ON CONFLICT (dedupe_key) DO NOTHING
RETURNING id
"""

# A hard bounce wins over a soft one; a complaint is never downgraded.
UPSERT_HARD = """
INSERT INTO mailroom.bounce_list (email, bounce_type, reason, smtp_code, enhanced_code, sender_account_id, campaign_id)
VALUES (%(recipient)s, 'hard', %(reason)s, %(code)s, %(status)s, %(sender)s, %(campaign)s)
ON CONFLICT (email) DO UPDATE
SET last_bounced_at = now(), bounce_count = mailroom.bounce_list.bounce_count + 1,
    bounce_type = CASE WHEN mailroom.bounce_list.bounce_type = 'complaint' THEN 'complaint' ELSE 'hard' END,
    reason = EXCLUDED.reason, smtp_code = EXCLUDED.smtp_code, enhanced_code = EXCLUDED.enhanced_code
"""

# A soft bounce counts only while the address is soft: a hard bounce or a complaint stays as it is.
# The policy that turns repeated soft bounces into a hold or a hard bounce is the claim's (worker.engine.queue_sql.CLAIM).
UPSERT_SOFT = """
INSERT INTO mailroom.bounce_list (email, bounce_type, reason, smtp_code, enhanced_code, sender_account_id, campaign_id)
VALUES (%(recipient)s, 'soft', %(reason)s, %(code)s, %(status)s, %(sender)s, %(campaign)s)
ON CONFLICT (email) DO UPDATE
SET last_bounced_at = now(), bounce_count = mailroom.bounce_list.bounce_count + 1,
    reason = EXCLUDED.reason, smtp_code = EXCLUDED.smtp_code, enhanced_code = EXCLUDED.enhanced_code
WHERE mailroom.bounce_list.bounce_type = 'soft'
"""

UPSERT_COMPLAINT = """
INSERT INTO mailroom.bounce_list (email, bounce_type, reason, sender_account_id, campaign_id)
VALUES (%(recipient)s, 'complaint', %(reason)s, %(sender)s, %(campaign)s)
ON CONFLICT (email) DO UPDATE
SET last_bounced_at = now(), bounce_count = mailroom.bounce_list.bounce_count + 1, bounce_type = 'complaint',
    reason = EXCLUDED.reason, smtp_code = NULL, enhanced_code = NULL
"""

MARK_BOUNCED = """
UPDATE mailroom.email_queue SET status = 'bounced', last_error = %(error)s
WHERE id = %(email_id)s AND status = 'sent'
"""

# Warm-up and health read a sender's bounces per UTC day; a later DSN counts on the day it arrives.
COUNT_BOUNCE = """
INSERT INTO mailroom.sender_usage (sender_account_id, day, bounces)
VALUES (%(sender)s, (now() AT TIME ZONE 'UTC')::date, 1)
ON CONFLICT (sender_account_id, day) DO UPDATE SET bounces = mailroom.sender_usage.bounces + 1
"""

NOTIFY_COMPLAINT = "SELECT pg_notify(%s, %s)"


@dataclass(frozen=True)
class EmailRef:
    """The email a report is about, as far as the queue still holds it."""

    email_id: int
    sender_account_id: int | None = None
    campaign_id: str | None = None
    # Sent to several recipients: one recipient's bounce lists that address but never ends the email
    # (the others had their copies), so no recipient can change what the others' email shows.
    many: bool = False


@dataclass(frozen=True)
class Applied:
    """One recipient report applied (or found applied before, `new` False)."""

    kind: Kind
    recipient: str
    new: bool
    bounced_email: bool = False


def dedupe_key(email_id: int, recipient: str, report: RecipientReport, source_id: str) -> str:
    """The event's identity: the same report of the same source about the same email and address."""
    parts = (str(email_id), recipient, report.kind or "", report.status or "", report.action or "", source_id)
    # surrogatepass: the same key as before for every text that was storable; never an error
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def apply_report(
    conn: psycopg.Connection[Any],
    email: EmailRef,
    recipient: str,
    report: RecipientReport,
    *,
    source: Source | EventSource,
    source_id: str,
    source_message_id: str | None,
    raw_size: int,
) -> Applied:
    """Record one recipient report and apply it once; the caller owns the transaction."""
    kind = report.kind
    if kind is None:
        raise ValueError("a success report changes nothing")
    recipient = storable(recipient, 320)
    source_message_id = storable_or_none(source_message_id, 998)
    report = _storable_report(report)
    params = {
        "email_id": email.email_id,
        "recipient": recipient,
        "kind": kind,
        "status": report.status,
        "action": report.action,
        "diagnostic": report.diagnostic,
        "source": source,
        "source_message_id": source_message_id,
        "raw_size": raw_size,
        "dedupe_key": dedupe_key(email.email_id, recipient, report, source_id),
        "sender": email.sender_account_id,
        "campaign": email.campaign_id,
    }
    row = conn.execute(INSERT_EVENT, params).fetchone()
    if row is None:
        log.info(
            "bounce: %s report for email %s to %s seen before", kind, email.email_id, mask_address(recipient)
        )
        return Applied(kind, recipient, new=False)
    event_id = int(row[0] if isinstance(row, tuple) else row["id"])
    listed = {
        "recipient": recipient,
        "reason": _reason(report),
        "code": report.smtp_code,
        "status": report.status,
        "sender": email.sender_account_id,
        "campaign": email.campaign_id,
    }
    bounced = _apply_kind(conn, email, report, listed, event_id)
    log.info(
        "bounce: %s for email %s to %s (%s)%s: %s",
        kind,
        email.email_id,
        mask_address(recipient),
        report.status or "no status",
        ", email bounced" if bounced else "",
        mask_addresses_in(report.diagnostic or ""),
    )
    return Applied(kind, recipient, new=True, bounced_email=bounced)


def _storable_report(report: RecipientReport) -> RecipientReport:
    """The report with every text cut to its column and cleaned of what PostgreSQL cannot store."""
    return RecipientReport(
        storable_or_none(report.recipient, 320),
        report.kind,
        storable_or_none(report.status, 100),
        storable_or_none(report.action, 100),
        storable_or_none(report.diagnostic, MAX_DIAGNOSTIC),
        report.smtp_code,
    )


def _apply_kind(
    conn: psycopg.Connection[Any],
    email: EmailRef,
    report: RecipientReport,
    listed: dict[str, Any],
    event_id: int,
) -> bool:
    """List the address as the report says; True when the email turned `bounced`."""
    if report.kind == "complaint":
        conn.execute(UPSERT_COMPLAINT, listed)
        payload = json.dumps({"event_id": event_id, "email_id": email.email_id})
        conn.execute(NOTIFY_COMPLAINT, (COMPLAINTS_CHANNEL, payload))
        return False
    conn.execute(UPSERT_HARD if report.kind == "hard" else UPSERT_SOFT, listed)
    # A report that delivery failed ends the email even when the address is only soft (expired in a queue).
    if (report.kind == "hard" or report.action == "failed") and not email.many:
        return _mark_bounced(conn, email, report)
    return False


def _reason(report: RecipientReport) -> str:
    if report.kind == "complaint":
        return f"complaint: {report.status}"
    return (report.diagnostic or f"{report.action or 'bounce'} {report.status or ''}").strip()[:500]


def _mark_bounced(conn: psycopg.Connection[Any], email: EmailRef, report: RecipientReport) -> bool:
    """Turn a sent email `bounced` and count the bounce for its sender; False when it is not `sent`."""
    error = f"bounced after delivery: {report.status or ''} {report.diagnostic or ''}".strip()[:1000]
    changed = conn.execute(MARK_BOUNCED, {"email_id": email.email_id, "error": error}).rowcount == 1
    if changed and email.sender_account_id is not None:
        conn.execute(COUNT_BOUNCE, {"sender": email.sender_account_id})
    return changed


def quarantine(
    conn: psycopg.Connection[Any],
    raw: bytes,
    reason: str,
    envelope_recipient: str | None,
    *,
    client: str | None = None,
) -> bool:
    """Keep a report Mailroom cannot use for an operator, within the quarantine's bounds; False if it was
    kept before or not kept now (dropped and counted: see `quarantine.keep`)."""
    kept = keep(conn, raw, reason, envelope_recipient, client=client)
    log.warning(
        "bounce: quarantine %s a %d-byte message: %s", kept.verdict, len(raw), mask_addresses_in(kept.reason)
    )
    return kept.verdict == "kept"
