"""What one attempt means for its email (sent, retry, failed, release) and how a failed one is recorded."""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from worker.core.config import Settings
from worker.core.logs import event
from worker.core.masking import mask_address, mask_addresses_in
from worker.core.message import recipient_kinds
from worker.engine import queue_sql as q
from worker.engine.classify import Reply, Verdict, backoff_seconds, classify
from worker.engine.database import Borrowed
from worker.engine.recording import Sent, SentRecorder
from worker.engine.rows import ClaimedEmail
from worker.engine.smtp import Attempt

log = logging.getLogger("mailroom.worker")


class _Rollback(Exception):
    """Undo a failure's recording: the claim no longer held the email."""


@dataclass
class Outcome:
    """One attempt's result for its email."""

    email_id: int
    outcome: str  # sent, retry, failed, release
    verdict: Verdict
    attempt: Attempt
    retry_at: datetime | None
    message_id: str | None


def decide(email: ClaimedEmail, attempt: Attempt, message_id: str, settings: Settings) -> Outcome:
    """Classify the reply and choose the email's outcome (and its retry time); log anything but a send."""
    verdict = classify(attempt.reply)
    retry_at = None
    if verdict is Verdict.SENT:
        outcome = "sent"
    elif verdict in (Verdict.AUTH, Verdict.SENDER):
        outcome = "release"  # the sender's fault: back to the queue, the email's retry budget untouched
    elif verdict in (Verdict.TRANSIENT, Verdict.LOCAL) and email.retry_count < email.max_retries:
        outcome = "retry"
        delay = backoff_seconds(
            email.retry_count, settings.retry_base_seconds, settings.retry_cap_seconds, random.random()
        )
        retry_at = datetime.now(UTC) + timedelta(seconds=delay)
    else:
        outcome = "failed"
    result = Outcome(email.id, outcome, verdict, attempt, retry_at, message_id)
    if outcome != "sent":
        _log_failed_attempt(email, result)
    for address, reply in attempt.refused:
        _log_refused(email.id, address, reply)
    return result


def _log_refused(email_id: int, address: str, reply: Reply) -> None:
    recipient = mask_address(address)
    text = mask_addresses_in(reply.text[:200])
    log.warning(
        "email %s: recipient %s refused: %s %s",
        email_id,
        recipient,
        reply.code,
        text,
        extra=event(
            "recipient_refused",
            email_id=email_id,
            recipient=recipient,
            code=reply.code,
            enhanced=reply.enhanced,
            reply=text,
        ),
    )


def failed_locally(email: ClaimedEmail, reason: str) -> Outcome:
    """An attempt that failed before any SMTP reply, for a reason of ours: the email fails, nothing else."""
    attempt = Attempt(Reply(None, reason, "build"), 0)
    return Outcome(email.id, "failed", Verdict.LOCAL, attempt, None, None)


def _log_failed_attempt(email: ClaimedEmail, outcome: Outcome) -> None:
    recipient = mask_address(email.recipient_email)
    reply = outcome.attempt.reply
    text = mask_addresses_in(reply.text[:200])  # replies echo addresses: never a full one in a log line
    log.warning(
        "email %s to %s: %s %s (%s) -> %s",
        email.id,
        recipient,
        reply.code,
        text,
        outcome.verdict.value,
        outcome.outcome,
        extra=event(
            "attempt_failed",
            email_id=email.id,
            recipient=recipient,
            attempt=email.retry_count + 1,
            code=reply.code,
            enhanced=reply.enhanced,
            reply=text,
            phase=reply.phase,
            verdict=outcome.verdict.value,
            outcome=outcome.outcome,
            retry_at=outcome.retry_at.isoformat() if outcome.retry_at else None,
        ),
    )


def failure_statements(
    outcome: Outcome, email: ClaimedEmail, sender_id: int, token: uuid.UUID, owner: str
) -> list[tuple[str, dict[str, Any]]]:
    """The statements that record an attempt that did not send, one of them `COMPLETE` (the email's new
    state: it returns a row only while the claim still holds the email), then the lists and counters."""
    reply = outcome.attempt.reply
    complete = {
        "id": outcome.email_id,
        "outcome": outcome.outcome,
        "log_outcome": outcome.verdict.value,
        "code": reply.code,
        "enhanced": reply.enhanced,
        "response": reply.text or "(no text)",
        "duration_ms": outcome.attempt.duration_ms,
        "retry_at": outcome.retry_at,
        "message_id": outcome.message_id,
        "sender": sender_id,
        "token": token,
        "owner": owner,
    }
    statements: list[tuple[str, dict[str, Any]]] = [(q.COMPLETE, complete)]
    if outcome.attempt.many:
        # Each recipient had its own transaction: its refusal (at MAIL, RCPT or DATA) is tied to it
        # and puts that address alone on the bounce list; the email's reply is that of its last copy.
        statements += refusal_statements(email, outcome.attempt, sender_id, errors=1)
        statements += accepted_statements(email, outcome.attempt)
        return _charged(statements, outcome, token)
    bounced = outcome.verdict is Verdict.BOUNCE
    if bounced:
        bounce = {
            "emails": [email.recipient_email],
            "reasons": [reply.text],
            "codes": [reply.code],
            "enhanced": [reply.enhanced],
            "campaigns": [email.campaign_id],
            "sender": sender_id,
        }
        statements.append((q.RECORD_BOUNCES, bounce))
    statements.append((q.COUNT_USAGE, {"sender": sender_id, "bounces": int(bounced), "errors": 1}))
    return _charged(statements, outcome, token)


def _charged(
    statements: list[tuple[str, dict[str, Any]]], outcome: Outcome, token: uuid.UUID
) -> list[tuple[str, dict[str, Any]]]:
    if outcome.verdict is Verdict.PERMANENT:
        # The provider counted it: quota used. The claim row first: the lock order of rescue.
        statements.insert(0, (q.COUNT_USED, {"token": token}))
    return statements


def accepted_statements(email: ClaimedEmail, attempt: Attempt) -> list[tuple[str, dict[str, Any]]]:
    """Record the recipients whose copy was accepted in an attempt that did not end sent: the retry
    leaves them out (`queue_sql.CLAIM` drops them as already delivered)."""
    if not attempt.accepted:
        return []
    kinds = recipient_kinds(email.as_row())
    accepted = [
        {"recipient": address, "kind": kinds.get(address.lower(), (address, "to"))[1]}
        for address in attempt.accepted
    ]
    return [(q.RECORD_ACCEPTED, {"email_id": email.id, "accepted": Jsonb(accepted)})]


def refusal_statements(
    email: ClaimedEmail, attempt: Attempt, sender_id: int, errors: int = 0
) -> list[tuple[str, dict[str, Any]]]:
    """Record the recipients refused at RCPT, each with its reply; a bad mailbox (a 5.1.x refusal, as
    `classify` judges a single recipient's) goes on the bounce list; the sender's day counts them."""
    kinds = recipient_kinds(email.as_row())
    refused = [
        {
            "recipient": address,
            "kind": kinds.get(address.lower(), (address, "to"))[1],
            "code": reply.code,
            "enhanced": reply.enhanced,
            "reason": reply.text or "(no text)",
        }
        for address, reply in attempt.refused
    ]
    statements: list[tuple[str, dict[str, Any]]] = []
    if refused:
        statements.append((q.RECORD_REFUSED, {"email_id": email.id, "refused": Jsonb(refused)}))
    bounced = [(address, reply) for address, reply in attempt.refused if classify(reply) is Verdict.BOUNCE]
    if bounced:
        bounce = {
            "emails": [address for address, _ in bounced],
            "reasons": [reply.text for _, reply in bounced],
            "codes": [reply.code for _, reply in bounced],
            "enhanced": [reply.enhanced for _, reply in bounced],
            "campaigns": [email.campaign_id] * len(bounced),
            "sender": sender_id,
        }
        statements.append((q.RECORD_BOUNCES, bounce))
    if bounced or errors:
        statements.append((q.COUNT_USAGE, {"sender": sender_id, "bounces": len(bounced), "errors": errors}))
    return statements


async def record_failure(
    db: Borrowed, statements: list[tuple[str, dict[str, Any]]], email_id: int, retry_seconds: float
) -> bool:
    """Commit a failed attempt in one transaction, retrying a lost database for `retry_seconds`;
    False if the claim no longer held the email (its lease expired), and then nothing changes."""
    deadline = time.monotonic() + retry_seconds
    while True:
        try:
            conn = await db.get()
            async with conn.transaction():
                for statement, params in statements:
                    cur = await conn.execute(statement, params)
                    if statement is q.COMPLETE and await cur.fetchone() is None:
                        raise _Rollback  # not held any more (rescued): lists and counters stay as they are
            return True
        except _Rollback:
            return False
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            if time.monotonic() > deadline:
                raise
            log.warning("recording email %s failed (%s); retrying", email_id, exc)
            await db.give_back()
            await asyncio.sleep(0.5)


async def record_attempt(
    recorder: SentRecorder,
    db: Borrowed,
    outcome: Outcome,
    email: ClaimedEmail,
    sender_id: int,
    token: uuid.UUID,
    owner: str,
    retry_seconds: float,
) -> bool:
    """Record one attempt; False if the claim no longer held the email. A send goes to the group commit
    of every slot's sends; a failure is one transaction that also updates lists and counters."""
    if outcome.outcome != "sent":
        statements = failure_statements(outcome, email, sender_id, token, owner)
        return await record_failure(db, statements, email.id, retry_seconds)
    held = await _record_sent(recorder, db, outcome, email, sender_id, token, owner, retry_seconds)
    if outcome.attempt.refused:
        # Sent to the others: the refusals are facts about those addresses, recorded lease held or not.
        await record_failure(
            db, refusal_statements(email, outcome.attempt, sender_id), email.id, retry_seconds
        )
    return held


async def _record_sent(
    recorder: SentRecorder,
    db: Borrowed,
    outcome: Outcome,
    email: ClaimedEmail,
    sender_id: int,
    token: uuid.UUID,
    owner: str,
    retry_seconds: float,
) -> bool:
    reply = outcome.attempt.reply
    sent = Sent(outcome.email_id, token, sender_id, reply.code, reply.enhanced, reply.text or "(no text)",
                outcome.attempt.duration_ms, outcome.message_id)  # fmt: skip
    try:
        return await recorder.record(sent)
    except (psycopg.OperationalError, psycopg.InterfaceError):
        raise
    except psycopg.Error as exc:
        # The journal refused this row for its content (the rest of its group commit went in):
        # record the send on its own, with a reply text that can be stored.
        log.error("email %s: the sent journal refused it (%s); recording it directly", email.id, exc)
        statements = failure_statements(outcome, email, sender_id, token, owner)[:1]
        statements[0][1]["response"] = f"(reply not storable: {type(exc).__name__})"
        return await record_failure(db, statements, email.id, retry_seconds)
