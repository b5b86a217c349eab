"""Bounces and complaints reported by webhook: find the email each names and apply it like a DSN.

An event names its email by Mailroom's id (the relay's tag) or by the Message-ID Mailroom gave its
copy (authentic under the return-path key, and then naming that copy's recipient too), and its
recipient must be one of that email's addresses, the one the Message-ID names when it names one; anything else is quarantined (its JSON) and answered as
unmatched. The dedupe key holds the provider's event id when there is one, else the event's digest,
so a webhook delivered again changes nothing twice.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

import psycopg

from worker.core.failover import database_unavailable
from worker.core.masking import mask_address
from worker.core.recipient_tokens import parse_message_id
from worker.core.return_path import recipient_hash
from worker.core.webhook_events import EventOutcome, EventSink, WebhookEvent
from worker.producers.bounces.effects import EmailRef, apply_report, quarantine
from worker.producers.bounces.intake import addresses_of, email_row
from worker.producers.bounces.parse import MAX_DIAGNOSTIC, RecipientReport

log = logging.getLogger(__name__)

_ACTION = {"hard": "failed", "soft": "delayed", "complaint": None}


def event_sink(key: bytes | None) -> EventSink:
    """`apply_events` with the return-path key that authenticates Message-IDs (None: none is trusted)."""

    def sink(conn: psycopg.Connection[Any], events: Sequence[WebhookEvent]) -> list[EventOutcome]:
        return apply_events(conn, events, key)

    return sink


def apply_events(
    conn: psycopg.Connection[Any], events: Sequence[WebhookEvent], key: bytes | None = None
) -> list[EventOutcome]:
    """Apply each event once, all in one transaction: recorded, duplicate or unmatched (quarantined)."""
    with conn.transaction():
        return [_apply_or_keep(conn, event, key) for event in events]


def _apply_or_keep(conn: psycopg.Connection[Any], event: WebhookEvent, key: bytes | None) -> EventOutcome:
    """One event under a savepoint: one the database refuses is quarantined, the batch goes on (a
    provider would otherwise retry the whole batch for days)."""
    try:
        with conn.transaction():
            return _apply_one(conn, event, key)
    except psycopg.Error as exc:
        if database_unavailable(exc):
            raise  # lost, read-only, shutting down: not the event's fault, never quarantined
        reason = f"{event.source} webhook event refused by the database: {type(exc).__name__}"
        log.warning("bounce: %s", reason)
        quarantine(conn, event.raw, reason, None, client=f"webhook:{event.source}")
        return EventOutcome("unmatched", reason)


def _apply_one(conn: psycopg.Connection[Any], event: WebhookEvent, key: bytes | None) -> EventOutcome:
    row, named_hash = _find_email(conn, event, key)
    recipient = event.recipient.strip().lower()
    reason = None
    if row is None:
        reason = "names no email sent by Mailroom (no known email id or authentic Message-ID)"
    elif recipient not in addresses_of(row):
        reason = f"names no recipient of email {row['id']}"
    elif named_hash is not None and key is not None and recipient_hash(recipient, key) != named_hash:
        reason = f"names another recipient of email {row['id']} than its Message-ID"
    if row is None or reason is not None:
        why = f"{event.source} webhook event {reason}"
        quarantine(conn, event.raw, why, recipient or None, client=f"webhook:{event.source}")
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
        EmailRef(
            int(row["id"]), row["sender_account_id"], row["campaign_id"], many=len(addresses_of(row)) > 1
        ),
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


def _find_email(
    conn: psycopg.Connection[Any], event: WebhookEvent, key: bytes | None
) -> tuple[dict[str, Any] | None, str | None]:
    """The email the event names by id, else by the Message-ID Mailroom sent its copy with (and then
    the recipient hash that Message-ID carries)."""
    if event.email_id is not None and event.email_id > 0:
        row = email_row(conn, event.email_id)
        if row is not None:
            return row, None
    message_id = (event.message_id or "").strip()
    named = parse_message_id(message_id, key) if message_id and key is not None else None
    if named is None:
        return None, None
    return email_row(conn, named[0]), named[1]
