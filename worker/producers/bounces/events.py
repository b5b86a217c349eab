"""Bounces and complaints reported by webhook: find the email each names and apply it like a DSN.

An event names its email by Mailroom's id or by the Message-ID Mailroom gave it, and its recipient
must be one of that email's addresses; anything else is quarantined (its JSON) and answered as
unmatched. The dedupe key holds the provider's event id when there is one, else the event's digest,
so a webhook delivered again changes nothing twice.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

import psycopg

from worker.core.masking import mask_address
from worker.core.webhook_events import EventOutcome, WebhookEvent
from worker.producers.bounces.effects import EmailRef, apply_report, quarantine
from worker.producers.bounces.intake import _OUR_MESSAGE_ID, _addresses, _email, _sent_as
from worker.producers.bounces.parse import MAX_DIAGNOSTIC, RecipientReport

log = logging.getLogger(__name__)

_ACTION = {"hard": "failed", "soft": "delayed", "complaint": None}


def apply_events(conn: psycopg.Connection[Any], events: Sequence[WebhookEvent]) -> list[EventOutcome]:
    """Apply each event once, all in one transaction: recorded, duplicate or unmatched (quarantined)."""
    with conn.transaction():
        return [_apply_one(conn, event) for event in events]


def _apply_one(conn: psycopg.Connection[Any], event: WebhookEvent) -> EventOutcome:
    row = _find_email(conn, event)
    recipient = event.recipient.strip().lower()
    reason = None
    if row is None:
        reason = "names no email sent by Mailroom (no known email id or Message-ID)"
    elif recipient not in _addresses(row):
        reason = f"names no recipient of email {row['id']}"
    if row is None or reason is not None:
        quarantine(conn, event.raw, f"{event.source} webhook event {reason}", recipient or None)
        return EventOutcome("unmatched", str(reason))
    report = RecipientReport(
        recipient,
        event.kind,
        event.status,
        _ACTION[event.kind],
        event.diagnostic[:MAX_DIAGNOSTIC] if event.diagnostic else None,
        event.smtp_code,
    )
    identity = event.event_id or hashlib.sha256(event.raw).hexdigest()
    applied = apply_report(
        conn,
        EmailRef(int(row["id"]), row["sender_account_id"], row["campaign_id"]),
        recipient,
        report,
        source=event.source,
        source_id=f"{event.source}:{identity}",
        source_message_id=event.event_id,
        raw_size=len(event.raw),
    )
    if not applied.new:
        return EventOutcome("duplicate", f"{event.kind} for email {row['id']} seen before", int(row["id"]))
    log.info("bounce: %s webhook %s for %s", event.source, event.kind, mask_address(recipient))
    return EventOutcome("recorded", f"{event.kind} for email {row['id']}", int(row["id"]))


def _find_email(conn: psycopg.Connection[Any], event: WebhookEvent) -> dict[str, Any] | None:
    """The email the event names by id, else by the Message-ID Mailroom sent it with."""
    if event.email_id is not None and event.email_id > 0:
        row = _email(conn, event.email_id)
        if row is not None:
            return row
    message_id = (event.message_id or "").strip()
    if not message_id:
        return None
    if not message_id.startswith("<"):
        message_id = f"<{message_id}>"
    match = _OUR_MESSAGE_ID.match(message_id.lower())
    if match is None:
        return None
    row = _email(conn, int(match.group(1)))
    if row is not None and _sent_as(row, message_id, int(match.group(2), 16)):
        return row
    return None
