"""The completer: the one place that persists what executing an email came to.

A `Result` goes in; out of here come the journal row of a send (through the group commit of
`worker.engine.sent_journal`), a failure or retry with its backoff, the lists and counters a refusal
touches, and the quota: charged per result (a send or a permanent refusal, what the provider counted)
and the rest refunded when the claim ends (`finish`), whether it sent all, some or none of its emails.
The quota is reserved with the claim itself (`worker.engine.claim.take`), in the claim's transaction.

What else an email's completion writes, the schema's triggers on `mailroom.email_queue` write in the
same transaction (see `migrations/schema.sql`): `email_queue_event_outcome` copies the outcome to the
birthday event it was sent for (`mailroom.events_follow_email`),
`email_queue_reminder_outcome` to the signature reminder it sent (`mailroom.reminder_logs_follow_email`),
and `email_queue_notify_update` tells the console and the producers (`mailroom_queue`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import psycopg
from psycopg.types.json import Jsonb

from worker.core import tracing
from worker.core.config import Settings
from worker.core.failover import database_unavailable
from worker.core.logs import event
from worker.core.masking import mask_address, mask_addresses_in
from worker.engine import queue_sql as q
from worker.engine.attempts import Attempt
from worker.engine.claim import Claim
from worker.engine.classify import Reply, Verdict, backoff_seconds, classify
from worker.engine.clock import Clock
from worker.engine.database import Borrowed, Pool
from worker.engine.outcomes import OutcomeKind, Result
from worker.engine.queue_sql import RELEASE_QUOTA
from worker.engine.rows import ClaimedEmail
from worker.engine.sent_journal import Sent, SentRecorder

log = logging.getLogger("mailroom.worker")


class Statement(NamedTuple):
    """A statement and its parameters, run in an attempt's transaction. `needs_held`: the statement
    returns a row only while the claim still holds the email (`queue_sql.COMPLETE`); without one the
    email was rescued meanwhile, and the whole transaction is undone (`record_attempt`)."""

    sql: str
    params: dict[str, object]
    needs_held: bool = False


SENT_IDS_KEPT = 100_000

# Lower-cased address -> (address as stored, To/Cc/Bcc), as `recipient_kinds` returns it.
Kinds = dict[str, tuple[str, str]]


def recipient_kinds(row: Mapping[str, Any]) -> Kinds:
    """`worker.core.message.recipient_kinds`, loaded with the first email that needs it (email building
    is not loaded by a worker that has sent nothing)."""
    from worker.core.message import recipient_kinds as kinds_of

    return kinds_of(row)


class _Rollback(Exception):
    """Undo a failure's recording: the claim no longer held the email."""


@dataclass(frozen=True)
class CompleterOptions:
    """How a completer records: as which worker (its name), retrying a lost database how long, and
    reading backoff from which clock."""

    owner: str
    retry_seconds: float
    clock: Clock


class Completer:
    """Records results and ends claims for one worker process; counts the emails it sent."""

    def __init__(
        self, pool: Pool, recorder: SentRecorder, settings: Settings, options: CompleterOptions
    ) -> None:
        self.pool = pool
        self.recorder = recorder
        self.settings = settings
        self.options = options
        # Emails sent, each counted once however often it went out (a lost lease's email sent again):
        # ids remembered in rounds of SENT_IDS_KEPT, so a long-running worker's memory stays flat.
        self._sent_ids: set[int] = set()
        self._sent_before = 0

    @property
    def sent(self) -> int:
        """How many emails this worker sent, each once."""
        return self._sent_before + len(self._sent_ids)

    async def complete(self, db: Borrowed, claim: Claim, sender_id: int, result: Result) -> bool:
        """Record one result before the next message goes out on its connection; False if the claim's
        lease was lost (then nothing of the email changes). A send joins the group commit of every
        slot's sends; anything else is one transaction that also updates lists and counters."""
        with tracing.span("mailroom.record"):  # a no-op while tracing is off
            return await self._complete(db, claim, sender_id, result)

    async def _complete(self, db: Borrowed, claim: Claim, sender_id: int, result: Result) -> bool:
        if result.charged:
            # Charged as soon as the provider counted it, before the recording that may fail or find
            # the lease lost: the message went out either way (`finish` refunds the rest).
            claim.used += 1
        retry_at = self._retry_at(result)
        _log_result(result, retry_at)
        owner, retry_seconds = self.options.owner, self.options.retry_seconds
        if result.kind is not OutcomeKind.SENT:
            statements = failure_statements(result, retry_at, sender_id, claim.token, owner)
            return await record_attempt(db, statements, result.email.id, retry_seconds)
        held = await self._record_sent(db, result, sender_id, claim.token)
        if result.attempt.refused:
            # Sent to the others: the refusals are facts about those addresses, recorded lease held or
            # not (none of these statements needs the claim to hold the email).
            statements = refusal_statements(result.email, result.attempt, sender_id)
            await record_attempt(db, statements, result.email.id, retry_seconds)
        if held:
            if len(self._sent_ids) >= SENT_IDS_KEPT:
                self._sent_before += len(self._sent_ids)
                self._sent_ids.clear()
            self._sent_ids.add(result.email.id)
        return held

    def _retry_at(self, result: Result) -> datetime | None:
        """When a retried email is due again: exponential backoff with jitter from the engine's clock."""
        if result.kind is not OutcomeKind.RETRY:
            return None
        settings = self.settings
        delay = backoff_seconds(
            result.email.retry_count, settings.retry_base_seconds, settings.retry_cap_seconds, random.random()
        )
        return self.options.clock.now() + timedelta(seconds=delay)

    async def _record_sent(self, db: Borrowed, result: Result, sender_id: int, token: uuid.UUID) -> bool:
        reply = result.attempt.reply
        sent = Sent(result.email.id, token, sender_id, reply.code, reply.enhanced, reply.text or "(no text)",
                    result.attempt.duration_ms, result.message_id)  # fmt: skip
        try:
            return await self.recorder.record(sent)
        except psycopg.Error as exc:
            if database_unavailable(exc):
                raise
            # The journal refused this row for its content (the rest of its group commit went in):
            # record the send on its own, with a reply text that can be stored.
            log.error("email %s: the sent journal refused it (%s); recording it directly", sent.email_id, exc)
            complete = complete_statement(result, None, sender_id, token, self.options.owner)
            complete.params["response"] = f"(reply not storable: {type(exc).__name__})"
            return await record_attempt(db, [complete], sent.email_id, self.options.retry_seconds)

    async def finish(self, claim: Claim, unsent: list[int]) -> None:
        """End the claim in one transaction: claim row locked first, its journal applied, `unsent`
        returned, the sender's last use noted, the quota neither a send nor a permanent refusal used given
        back, the row deleted. Nothing happens when the claim was rescued meanwhile (its lease had
        expired). When it fails, the unsent emails still go back on their own; lease rescue does the rest."""
        try:
            await _finish(self.pool, claim, unsent)
        except psycopg.Error:
            with contextlib.suppress(psycopg.Error):
                await self.release(claim.token, unsent)
            raise

    async def release(self, token: uuid.UUID, ids: list[int]) -> None:
        """Return claimed, unsent emails to the queue on their own (only while the claim still holds them)."""
        if ids:
            async with self.pool.connection() as conn:
                await conn.execute(q.RELEASE, {"ids": ids, "token": token})


async def _finish(pool: Pool, claim: Claim, unsent: list[int]) -> None:
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        await cur.execute(q.LOCK_CLAIM, (claim.token,))
        row = await cur.fetchone()
        if row is None:
            return  # rescued by another worker, which did all of this already
        reserved, _, day = row
        await cur.execute(q.LOCK_SENDER, (claim.sender_id,))
        await cur.execute(q.APPLY_SENT, (claim.token,))
        sent = int((await cur.fetchone() or (0,))[0])
        if unsent:
            await cur.execute(q.RELEASE, {"ids": unsent, "token": claim.token})
        # Once per batch, not per email: the sender row is also what quota reservations lock.
        await cur.execute(q.TOUCH_SENDER, (claim.sender_id,))
        # The worker knows best what it used: a send the relay accepted counts even if recording it failed.
        unused = int(reserved) - max(claim.used, sent)
        if unused > 0:
            await cur.execute(RELEASE_QUOTA, (claim.sender_id, unused, day))
        await cur.execute(q.END_CLAIM, (claim.token,))
    if unsent:
        log.info(
            "released %d claimed email(s) back to the queue",
            len(unsent),
            extra=event("released", count=len(unsent)),
        )


def failure_statements(
    result: Result, retry_at: datetime | None, sender_id: int, token: uuid.UUID, owner: str
) -> list[Statement]:
    """The statements that record an attempt that did not send: the email's new state
    (`complete_statement`), then the lists and counters."""
    statements = [complete_statement(result, retry_at, sender_id, token, owner)]
    email = result.email
    reply = result.attempt.reply
    if result.attempt.many:
        # Each recipient had its own transaction: its refusal (at MAIL, RCPT or DATA) is tied to it
        # and puts that address alone on the bounce list; the email's reply is that of its last copy.
        kinds = recipient_kinds(email.as_row())  # once for both lists
        statements += refusal_statements(email, result.attempt, sender_id, errors=1, kinds=kinds)
        statements += accepted_statements(email, result.attempt, kinds)
        return _charged(statements, result, token)
    bounced = result.verdict is Verdict.BOUNCE
    if bounced:
        bounce: dict[str, object] = {
            "emails": [email.recipient_email],
            "reasons": [reply.text],
            "codes": [reply.code],
            "enhanced": [reply.enhanced],
            "campaigns": [email.campaign_id],
            "sender": sender_id,
        }
        statements.append(Statement(q.RECORD_BOUNCES, bounce))
    statements.append(Statement(q.COUNT_USAGE, {"sender": sender_id, "bounces": int(bounced), "errors": 1}))
    return _charged(statements, result, token)


def complete_statement(
    result: Result, retry_at: datetime | None, sender_id: int, token: uuid.UUID, owner: str
) -> Statement:
    """`COMPLETE`: the email's new state and its attempt's log row, while the claim still holds it."""
    reply = result.attempt.reply
    complete: dict[str, object] = {
        "id": result.email.id,
        "outcome": result.kind.value,
        "log_outcome": result.verdict.value,
        "code": reply.code,
        "enhanced": reply.enhanced,
        "response": reply.text or "(no text)",
        "duration_ms": result.attempt.duration_ms,
        "retry_at": retry_at,
        "message_id": result.message_id,
        "sender": sender_id,
        "token": token,
        "owner": owner,
    }
    return Statement(q.COMPLETE, complete, needs_held=True)


def _charged(statements: list[Statement], result: Result, token: uuid.UUID) -> list[Statement]:
    if result.kind is not OutcomeKind.SENT and result.charged:
        # A permanent refusal used quota like a send. The claim row first: the lock order of rescue.
        statements.insert(0, Statement(q.COUNT_USED, {"token": token}))
    return statements


def accepted_statements(email: ClaimedEmail, attempt: Attempt, kinds: Kinds | None = None) -> list[Statement]:
    """Record the recipients whose copy was accepted in an attempt that did not end sent: the retry
    leaves them out (`queue_sql.CLAIM` drops them as already delivered)."""
    if not attempt.accepted:
        return []
    kinds = recipient_kinds(email.as_row()) if kinds is None else kinds
    accepted = [
        {"recipient": address, "kind": kinds.get(address.lower(), (address, "to"))[1]}
        for address in attempt.accepted
    ]
    return [Statement(q.RECORD_ACCEPTED, {"email_id": email.id, "accepted": Jsonb(accepted)})]


def refusal_statements(
    email: ClaimedEmail, attempt: Attempt, sender_id: int, errors: int = 0, kinds: Kinds | None = None
) -> list[Statement]:
    """Record the recipients refused at RCPT, each with its reply; a bad mailbox (a 5.1.x refusal, as
    `classify` judges a single recipient's) goes on the bounce list; the sender's day counts them."""
    kinds = recipient_kinds(email.as_row()) if kinds is None else kinds
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
    statements: list[Statement] = []
    if refused:
        statements.append(Statement(q.RECORD_REFUSED, {"email_id": email.id, "refused": Jsonb(refused)}))
    bounced = [(address, reply) for address, reply in attempt.refused if classify(reply) is Verdict.BOUNCE]
    if bounced:
        bounce: dict[str, object] = {
            "emails": [address for address, _ in bounced],
            "reasons": [reply.text for _, reply in bounced],
            "codes": [reply.code for _, reply in bounced],
            "enhanced": [reply.enhanced for _, reply in bounced],
            "campaigns": [email.campaign_id] * len(bounced),
            "sender": sender_id,
        }
        statements.append(Statement(q.RECORD_BOUNCES, bounce))
    if bounced or errors:
        statements.append(
            Statement(q.COUNT_USAGE, {"sender": sender_id, "bounces": len(bounced), "errors": errors})
        )
    return statements


async def record_attempt(
    db: Borrowed, statements: list[Statement], email_id: int, retry_seconds: float
) -> bool:
    """Commit an attempt's statements in one transaction, retrying a lost database for `retry_seconds`;
    False if a statement that `needs_held` found the email no longer held by the claim (its lease
    expired and it was rescued), and then nothing changes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + retry_seconds
    while True:
        try:
            conn = await db.get()
            async with conn.transaction():
                for statement in statements:
                    cur = await conn.execute(statement.sql, statement.params)
                    if statement.needs_held and await cur.fetchone() is None:
                        raise _Rollback  # not held any more (rescued): lists and counters stay as they are
            db.pool.circuit.succeeded()
            return True
        except _Rollback:
            return False
        except psycopg.Error as exc:
            if not database_unavailable(exc):
                raise
            await db.discard()  # lost, shutting down or read-only: the next try connects anew
            db.pool.circuit.failed(exc)
            if loop.time() > deadline:
                raise
            log.info("recording email %s failed (%s); retrying", email_id, exc)
            await db.pool.circuit.pause()


def _log_result(result: Result, retry_at: datetime | None) -> None:
    """A line for anything but a send, and one per refused recipient."""
    if result.kind is not OutcomeKind.SENT:
        _log_failed_attempt(result, retry_at)
    for address, reply in result.attempt.refused:
        _log_refused(result.email.id, address, reply)


def _log_refused(email_id: int, address: str, reply: Reply) -> None:
    recipient = mask_address(address)
    text = mask_addresses_in(reply.text[:200])
    log.warning(
        "email %s: recipient %s refused: %s",
        email_id,
        recipient,
        mask_addresses_in(reply.said(200)),
        extra=event(
            "recipient_refused",
            email_id=email_id,
            recipient=recipient,
            code=reply.code,
            enhanced=reply.enhanced,
            reply=text,
        ),
    )


def _log_failed_attempt(result: Result, retry_at: datetime | None) -> None:
    email = result.email
    recipient = mask_address(email.recipient_email)
    reply = result.attempt.reply
    text = mask_addresses_in(reply.text[:200])  # replies echo addresses: never a full one in a log line
    log.warning(
        "email %s to %s: %s (%s) -> %s",
        email.id,
        recipient,
        mask_addresses_in(reply.said(200)),
        result.verdict.value,
        result.kind.value,
        extra=event(
            "attempt_failed",
            email_id=email.id,
            recipient=recipient,
            attempt=email.retry_count + 1,
            code=reply.code,
            enhanced=reply.enhanced,
            reply=text,
            phase=reply.phase,
            verdict=result.verdict.value,
            outcome=result.kind.value,
            retry_at=retry_at.isoformat() if retry_at else None,
        ),
    )
