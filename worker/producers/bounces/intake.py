"""One incoming message, from any source: parse it, find the email it is about, apply it or quarantine it.

The email and its recipient are named by the VERP token of an address the report was sent to (the
envelope recipient, X-Original-To, Delivered-To, To) or of the returned original's Return-Path;
failing that, by the original's Message-ID, which names the email and the recipient of its copy under
a MAC (`worker.core.recipient_tokens`). A report carrying a return path whose token is not authentic
is quarantined, never matched another way. A report acts only for the recipient its token names:
one naming another recipient of the same email is quarantined, and nothing is guessed (an email's
only address, a Message-ID without a MAC).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from psycopg.rows import dict_row

from worker.core import tracing
from worker.core.failover import database_unavailable
from worker.core.recipient_tokens import parse_message_id
from worker.core.return_path import looks_like_return_path, parse_return_path, recipient_hash
from worker.producers.bounces.effects import Applied, EmailRef, apply_report, quarantine
from worker.producers.bounces.parse import Report, Unparseable, parse_report

log = logging.getLogger(__name__)

Verdict = Literal["recorded", "duplicate", "ignored", "quarantined"]

EMAIL = """
SELECT q.id, q.created_at, q.message_id, q.recipient_email, q.to_extra, q.cc, q.bcc, q.sender_account_id,
       q.campaign_id, s.bounce_domain AS sender_bounce_domain
FROM mailroom.email_queue q
LEFT JOIN mailroom.sender_accounts s ON s.id = q.sender_account_id
WHERE q.id = %s
FOR UPDATE OF q
"""


@dataclass(frozen=True)
class Outcome:
    """What became of one message."""

    verdict: Verdict
    detail: str
    applied: tuple[Applied, ...] = ()


@dataclass(frozen=True)
class _Identity:
    email_id: int
    recipient_hash: str  # the keyed hash of the one recipient the token names
    row: dict[str, Any] | None


def ingest(
    conn: psycopg.Connection[Any],
    raw: bytes,
    key: bytes,
    envelope_recipients: Sequence[str] = (),
    *,
    client: str | None = None,
    bounce_domain: str | None = None,
) -> Outcome:
    """Process one message in one transaction of its own: recorded, duplicate, ignored or quarantined.

    `client` says who handed it in (the SMTP peer address, `pipe`, `mailbox:<name>`): the quarantine's
    per-client limit counts by it. `bounce_domain` is MAILROOM_BOUNCE_DOMAIN: an email sent from a VERP
    return path (on it, or on its sender's own) is named by its token only, never by a Message-ID
    alone, which anyone who saw a reply quoting it could copy. A message the database refuses (what
    it says, not the database being down) is quarantined: that is permanent, never worth a retry."""
    with tracing.span("mailroom.bounce.intake", {"mailroom.report.bytes": len(raw)}, kind="consumer") as span:
        outcome = _transact(conn, raw, key, envelope_recipients, client, bounce_domain)
        if span is not None:
            tracing.note(span, _attributes(outcome))
        return outcome


def _attributes(outcome: Outcome) -> dict[str, str | int]:
    """What an intake span says: the verdict and the kinds of what was applied (never the addresses)."""
    return {
        "mailroom.report.verdict": outcome.verdict,
        "mailroom.report.kinds": ",".join(sorted({str(a.kind) for a in outcome.applied})),
        "mailroom.report.applied": sum(a.new for a in outcome.applied),
    }


def _transact(
    conn: psycopg.Connection[Any],
    raw: bytes,
    key: bytes,
    envelope_recipients: Sequence[str],
    client: str | None,
    bounce_domain: str | None,
) -> Outcome:
    try:
        with conn.transaction():
            return _ingest(conn, raw, key, envelope_recipients, client, bounce_domain)
    except psycopg.Error as exc:
        if database_unavailable(exc):
            raise  # lost, read-only, shutting down: not the message's fault, never quarantined
        reason = f"refused by the database: {type(exc).__name__}"
        log.warning("bounce: a message %s", reason)
        return keep_in_quarantine(conn, raw, reason, envelope_recipients, client=client)


def _ingest(
    conn: psycopg.Connection[Any],
    raw: bytes,
    key: bytes,
    envelope_recipients: Sequence[str],
    client: str | None,
    bounce_domain: str | None,
) -> Outcome:
    envelope = envelope_recipients[0] if envelope_recipients else None
    parsed = parse_report(raw, envelope_recipients)
    if isinstance(parsed, Unparseable):
        return _quarantine(conn, raw, parsed.reason, envelope, client=client)
    if all(r.kind is None for r in parsed.recipients):
        detail = f"{parsed.source} report with nothing to act on ({parsed.feedback_type or 'success'})"
        log.info("bounce: %s", detail)
        return Outcome("ignored", detail)
    identity = _identify(conn, parsed, key, bounce_domain)
    if isinstance(identity, str):
        return _quarantine(conn, raw, identity, envelope, client=client)
    return _apply(conn, raw, parsed, identity, key, envelope, client)


def keep_in_quarantine(
    conn: psycopg.Connection[Any],
    raw: bytes,
    reason: str,
    envelope_recipients: Sequence[str] = (),
    *,
    client: str | None = None,
) -> Outcome:
    """Quarantine a message without reading it (too large, say), in a transaction of its own."""
    with conn.transaction():
        envelope = envelope_recipients[0] if envelope_recipients else None
        return _quarantine(conn, raw, reason, envelope, client=client)


def _quarantine(
    conn: psycopg.Connection[Any], raw: bytes, reason: str, envelope: str | None, *, client: str | None = None
) -> Outcome:
    quarantine(conn, raw, reason, envelope, client=client)
    return Outcome("quarantined", reason)


def _identify(
    conn: psycopg.Connection[Any], report: Report, key: bytes, bounce_domain: str | None
) -> _Identity | str:
    """The email the report names, or why none can be trusted."""
    forged = False
    for address in report.addressed_to:
        token = parse_return_path(address, key)
        if token is not None:
            return _Identity(token[0], token[1], email_row(conn, token[0]))
        forged = forged or looks_like_return_path(address)
    if forged:
        return "return path token is not authentic"
    for message_id in report.original_message_ids:
        named = parse_message_id(message_id, key)
        if named is not None:
            row = email_row(conn, named[0])
            if row is not None and (bounce_domain or row["sender_bounce_domain"]):
                return (
                    "names by Message-ID alone an email sent from a VERP return path (only its token counts)"
                )
            return _Identity(named[0], named[1], row)
    return "names no email sent by Mailroom (no return-path token, no authentic Message-ID)"


def email_row(conn: psycopg.Connection[Any], email_id: int) -> dict[str, Any] | None:
    if email_id > 2**63 - 1:
        return None
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(EMAIL, (email_id,)).fetchone()


def addresses_of(row: dict[str, Any] | None) -> list[str]:
    if row is None:
        return []
    extra = [*(row["to_extra"] or []), *(row["cc"] or []), *(row["bcc"] or [])]
    return list(dict.fromkeys(a.lower() for a in [row["recipient_email"], *extra]))


def _recipient(
    named: str | None, identity: _Identity, addresses: list[str], key: bytes, *, alone: bool
) -> str | None:
    """The address a recipient report acts for: always the one its token names, and only when the
    report names that address, names none (a feedback loop redacted it), or is the token's only
    report and names no recipient of the email (forwarding rewrote it). A report naming another
    recipient of the same email acts for nobody: that is one recipient speaking for another."""
    own = next((a for a in addresses if recipient_hash(a, key) == identity.recipient_hash), None)
    named = named.strip().lower() if named else None
    if own is None or named is None or named == own:
        return own
    return own if alone and named not in addresses else None


def _apply(
    conn: psycopg.Connection[Any],
    raw: bytes,
    report: Report,
    identity: _Identity,
    key: bytes,
    envelope: str | None,
    client: str | None,
) -> Outcome:
    row = identity.row
    addresses = addresses_of(row)
    email = EmailRef(
        identity.email_id,
        row["sender_account_id"] if row else None,
        row["campaign_id"] if row else None,
        many=len(addresses) > 1,
    )
    source_id = report.message_id or hashlib.sha256(raw).hexdigest()
    applied: list[Applied] = []
    actionable = [r for r in report.recipients if r.kind is not None]
    for recipient_report in actionable:
        recipient = _recipient(
            recipient_report.recipient, identity, addresses, key, alone=len(actionable) == 1
        )
        if recipient is None:
            continue
        applied.append(
            apply_report(
                conn,
                email,
                recipient,
                recipient_report,
                source=report.source,
                source_id=source_id,
                source_message_id=report.message_id,
                raw_size=len(raw),
            )
        )
    if not applied:
        reason = f"reports no recipient of email {identity.email_id} its token names"
        return _quarantine(conn, raw, reason, envelope, client=client)
    new = tuple(a for a in applied if a.new)
    if not new:
        return Outcome(
            "duplicate", f"{report.source} report for email {identity.email_id} seen before", tuple(applied)
        )
    kinds = ", ".join(f"{a.kind}" for a in new)
    return Outcome(
        "recorded", f"{report.source} report for email {identity.email_id}: {kinds}", tuple(applied)
    )
