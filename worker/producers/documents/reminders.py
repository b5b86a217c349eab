"""Reminder emails to expected signers who have not signed yet (reference 04).

Each reminder is a `reminder_logs` row and an email enqueued through `worker.core.outbox` in the same
transaction, the email pointing back at its log row (`reference_type = 'reminder_log'`). The trigger
`email_queue_reminder_outcome` (`mailroom.reminder_logs_follow_email` in schema.sql) copies the email's
outcome (sent, failed, bounced, suppressed, cancelled) into the log row, so the delivery engine knows
nothing of reminders.

A signer reminded less than the configured interval ago (`MAILROOM_REMINDER_INTERVAL_SECONDS`) is
refused with the reason; reminders that failed or were cancelled do not count, since nobody got
them. A signer whose address is suppressed is skipped too, with the reason, by the rule the claim
applies (`mailroom.suppression_reason` in schema.sql, for a transactional email: an unsubscribe does not
stop a reminder, and one to an address that soft-bounced less than three times goes and waits out the
claim's hold). So are signers whose address a privacy erasure replaced (`…@erased.invalid`): nobody is
there to remind.
"""

from __future__ import annotations

import getpass
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from worker.core.config import ConfigError, Settings
from worker.core.masking import ERASED_DOMAIN, mask_address
from worker.core.outbox import EmailRequest, enqueue
from worker.core.validation import ValidationError
from worker.producers.documents.records import REMINDER_TEMPLATE, Document, get_document
from worker.producers.documents.signing_links import link_for

log = logging.getLogger("mailroom.reminders")

REFERENCE_TYPE = "reminder_log"
# A reminder is about a document the signer is party to, not a campaign: sent as transactional email.
TRANSACTIONAL = True


@dataclass(frozen=True)
class ReminderResult:
    """What one `send_reminders` run did: how many reminders it queued and whom it skipped, and why."""

    doc_id: str
    queued: int
    skipped: dict[str, str] = field(default_factory=dict)
    log_ids: tuple[int, ...] = ()

    def summary(self) -> str:
        """One line per skipped signer after a headline, for the CLI and the console."""
        head = f"{self.doc_id}: queued {self.queued} reminder(s)"
        if not self.skipped:
            return head
        lines = [f"{head}, skipped {len(self.skipped)}:"]
        lines.extend(f"  {email}: {reason}" for email, reason in self.skipped.items())
        return "\n".join(lines)


# Expected signers who have not signed, with what would stop a reminder to them now.
SELECT_UNSIGNED = """
SELECT e.id AS signer_id, e.email, e.name, e.locale, recent.requested_at AS reminded_at,
       mailroom.suppression_reason(e.email, %(transactional)s) AS suppressed
FROM mailroom.expected_signers e
LEFT JOIN mailroom.signatures s ON s.doc_id = e.doc_id AND s.signer_email = e.email
LEFT JOIN LATERAL (
    SELECT r.requested_at FROM mailroom.reminder_logs r
    WHERE r.doc_id = e.doc_id AND r.recipient_email = e.email
      AND r.status NOT IN ('failed', 'cancelled')
      AND r.requested_at > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(interval)s)
    ORDER BY r.requested_at DESC LIMIT 1
) recent ON true
WHERE e.doc_id = %(doc_id)s AND s.id IS NULL
ORDER BY e.id
"""
INSERT_LOG = """
INSERT INTO mailroom.reminder_logs (doc_id, recipient_email, requested_at, requested_by, template)
VALUES (%(doc_id)s, %(email)s, coalesce(%(now)s::timestamptz, now()), %(by)s, %(template)s)
RETURNING id
"""
SET_LOG_EMAIL = "UPDATE mailroom.reminder_logs SET email_id = %s WHERE id = %s"


def _interval(settings: Settings, interval: timedelta | None) -> float:
    return (interval.total_seconds() if interval is not None else settings.reminder_interval_seconds) or 0.0


def _refusal(row: dict[str, Any], interval_seconds: float) -> str | None:
    if row["email"].endswith("@" + ERASED_DOMAIN):
        return "the address was erased by a privacy request"
    if row["suppressed"] is not None:
        return f"address is {row['suppressed']}"
    if row["reminded_at"] is not None:
        allowed = row["reminded_at"] + timedelta(seconds=interval_seconds)
        return (
            f"already reminded at {row['reminded_at']:%Y-%m-%d %H:%M:%S %Z};"
            f" the next reminder is allowed after {allowed:%Y-%m-%d %H:%M:%S %Z}"
        )
    return None


def _unsigned(
    conn: psycopg.Connection[Any], doc_id: str, now: datetime | None, interval_seconds: float
) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        params = {"doc_id": doc_id, "now": now, "interval": interval_seconds, "transactional": TRANSACTIONAL}
        return cur.execute(SELECT_UNSIGNED, params).fetchall()


def reminder_candidates(
    conn: psycopg.Connection[Any],
    doc_id: str,
    now: datetime | None = None,
    *,
    interval: timedelta | None = None,
    settings: Settings | None = None,
) -> int:
    """How many signers `send_reminders` would mail now (unsigned, not reminded within the interval, not suppressed)."""
    settings = settings or Settings.from_env()
    get_document(conn, doc_id)
    seconds = _interval(settings, interval)
    return sum(1 for row in _unsigned(conn, doc_id, now, seconds) if _refusal(row, seconds) is None)


def _data(document: Document, row: dict[str, Any], settings: Settings) -> dict[str, Any]:
    return {
        "name": row["name"] or row["email"],
        "title": document.title or document.doc_id,
        "doc_id": document.doc_id,
        "url": document.url,
        "description": document.description,
        "signing_url": _signing_url(document, row, settings),
    }


def _signing_url(document: Document, row: dict[str, Any], settings: Settings) -> str:
    """The signer's own link to the signing page; empty (the email still goes) without a secret key."""
    try:
        return link_for(settings, row["signer_id"], document.doc_id, row["email"], document.checksum)
    except ConfigError:
        log.warning(
            "reminder for %s carries no signing link: MAILROOM_SECRET_KEY is not set", document.doc_id
        )
        return ""


def _queue_reminder(
    conn: psycopg.Connection[Any],
    document: Document,
    row: dict[str, Any],
    now: datetime | None,
    requested_by: str,
    settings: Settings,
) -> int:
    """Log one signer's reminder and enqueue its email in the signer's locale; the log row's id."""
    with conn.cursor(row_factory=dict_row) as cur:
        params = {"doc_id": document.doc_id, "email": row["email"], "now": now, "by": requested_by,
                  "template": REMINDER_TEMPLATE}  # fmt: skip
        log_row = cur.execute(INSERT_LOG, params).fetchone()
        assert log_row is not None
        log_id = int(log_row["id"])
        request = EmailRequest(
            to=row["email"],
            to_name=row["name"] or None,
            template=REMINDER_TEMPLATE,
            locale=row["locale"],
            data=_data(document, row, settings),
            idempotency_key=f"{REFERENCE_TYPE}:{log_id}",
            reference_type=REFERENCE_TYPE,
            reference_id=str(log_id),
            transactional=TRANSACTIONAL,
        )
        email_id = enqueue(conn, request, settings=settings, created_by=requested_by or None)
        cur.execute(SET_LOG_EMAIL, (email_id, log_id))
    return log_id


def send_reminders(
    conn: psycopg.Connection[Any],
    doc_id: str,
    now: datetime | None = None,
    *,
    interval: timedelta | None = None,
    requested_by: str | None = None,
    settings: Settings | None = None,
) -> ReminderResult:
    """Enqueue a reminder to every expected signer of `doc_id` who has not signed, in the caller's transaction.

    The caller commits. The document row is locked until then, so two operators reminding at once
    queue one reminder per signer. Each reminder is rendered in the signer's locale and logged in
    `reminder_logs`; a signer reminded within the interval (default `MAILROOM_REMINDER_INTERVAL_SECONDS`)
    is skipped with the reason. `now` defaults to the database clock.
    """
    settings = settings or Settings.from_env()
    if requested_by is None:
        try:
            requested_by = getpass.getuser()
        except (KeyError, OSError):
            requested_by = ""
    document = get_document(conn, doc_id, lock=True)
    if conn.info.transaction_status != TransactionStatus.INTRANS:
        raise ValueError("send_reminders needs an open transaction: use a non-autocommit connection")
    seconds = _interval(settings, interval)
    queued: list[int] = []
    skipped: dict[str, str] = {}
    for row in _unsigned(conn, doc_id, now, seconds):
        reason = _refusal(row, seconds)
        if reason is not None:
            skipped[row["email"]] = reason
            continue
        try:
            # A savepoint per signer: one signer whose email cannot be built does not stop the others.
            with conn.transaction():
                log_id = _queue_reminder(conn, document, row, now, requested_by, settings)
        except ValidationError as exc:
            skipped[row["email"]] = f"reminder could not be built: {exc}"
            log.warning("reminder for %s to %s not queued: %s", doc_id, mask_address(row["email"]), exc)
            continue
        queued.append(log_id)
    log.info("reminders for %s: %d queued, %d skipped", doc_id, len(queued), len(skipped))
    return ReminderResult(doc_id=doc_id, queued=len(queued), skipped=skipped, log_ids=tuple(queued))
