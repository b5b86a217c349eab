"""The delivery engine: slots that claim email in batches, send it over SMTP and record every attempt."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from worker.core.config import ConfigError, Settings
from worker.core.crypto import SecretBox, secret_box
from worker.core.dkim import DkimKey, sign_envelope
from worker.core.listen import Listener, Waker
from worker.core.masking import mask_address
from worker.core.message import Envelope, build_message
from worker.engine import claims as q
from worker.engine.classify import Reply, Verdict, backoff_seconds, classify
from worker.engine.producer import Producer
from worker.engine.recording import Sent, SentRecorder
from worker.engine.senders import ELIGIBLE_SENDERS, RELEASE_QUOTA, RESERVE, TAKE_SEND_SLOT
from worker.engine.smtp import Attempt, SmtpAccount, SmtpConnection

log = logging.getLogger("mailroom.worker")


# A paced sender's claim holds at most this many seconds of its sending.
PACED_CLAIM_SECONDS = 5

# Every worker connection: autocommit, and asynchronous commit for the worker's own bookkeeping.
_SESSION: dict[str, Any] = {"autocommit": True, "options": "-c synchronous_commit=off"}


@dataclass(frozen=True)
class WorkerOptions:
    """How one worker process runs."""

    concurrency: int = 4
    batch_size: int = 300  # per claim; a paced sender's claims are smaller (see `_claim_size`)
    drain: bool = False
    grace_seconds: float = 10.0
    poll_seconds: float = 30.0
    smtp_timeout: float = 30.0
    owner: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")


@dataclass(frozen=True)
class Sender:
    """An eligible sender account as the engine uses it."""

    account: SmtpAccount
    name: str
    from_email: str
    from_name: str | None
    send_delay_ms: int
    max_connections: int
    dkim: DkimKey | None = None


@dataclass
class _Outcome:
    email_id: int
    outcome: str  # sent, retry, failed, release
    verdict: Verdict
    attempt: Attempt
    retry_at: datetime | None
    message_id: str | None


@dataclass
class _Quota:
    """Quota reserved for one claim: how much, on which UTC day, and how much the sends used."""

    sender_id: int
    day: date
    granted: int
    used: int = 0


class _Borrowed:
    """A pool connection held across several statements, swapped for a fresh one after a failure."""

    def __init__(self, pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]]) -> None:
        self.pool = pool
        self.conn: psycopg.AsyncConnection[Any] | None = None

    async def get(self) -> psycopg.AsyncConnection[Any]:
        """The held connection, borrowing one first if needed."""
        if self.conn is None:
            self.conn = await self.pool.getconn()
        return self.conn

    async def give_back(self) -> None:
        """Return the connection; the pool discards it if it is broken."""
        conn, self.conn = self.conn, None
        if conn is not None:
            await self.pool.putconn(conn)


class Worker:
    """One worker process: `concurrency` slots, one LISTEN connection, lease renewal and rescue."""

    def __init__(
        self,
        url: str,
        settings: Settings,
        options: WorkerOptions,
        listen_url: str | None = None,
        producers: Sequence[Producer] | None = None,
    ) -> None:
        self.url = url
        self.settings = settings
        self.options = options
        self.waker = Waker()
        self.producers = list(producers or ())
        self._producer_wakers = {p.name: Waker() for p in self.producers}
        routes: dict[str, list[Waker]] = {}
        for producer in self.producers:
            for channel in producer.channels:
                routes.setdefault(channel, []).append(self._producer_wakers[producer.name])
        self.listener = Listener(listen_url or url, ("mailroom_queue",), self.waker, routes)
        self.stopping = asyncio.Event()
        self.pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self.recorder: SentRecorder | None = None
        self._tokens: set[uuid.UUID] = set()
        self._senders: list[Sender] = []
        self._senders_at = 0.0
        self._exhausted: set[int] = set()
        self._open: dict[int, int] = {}  # SMTP connections this process holds per sender account
        # Per slot: the bookkeeping of its last delivered claim, written beside its next claim.
        self._finishing: dict[int, asyncio.Task[None]] = {}
        self._box: SecretBox | None = None
        # DKIM keys decrypted once per sender account (and again only when its stored key changes)
        self._dkim_keys: dict[tuple[int, bytes], DkimKey] = {}
        self.sent = 0

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Deliver until stopped (or, with `drain`, until nothing is due)."""
        self.pool = AsyncConnectionPool(
            self.url,
            min_size=1,
            max_size=self.options.concurrency + 3 + len(self.producers),
            open=False,
            check=AsyncConnectionPool.check_connection,
            # Asynchronous commit for the worker's own bookkeeping: a killed worker loses nothing (the
            # server has every commit); only a crash of PostgreSQL itself can forget the last few hundred
            # milliseconds, and then those emails are sent again (delivery is at-least-once anyway).
            kwargs=_SESSION,
        )
        await self.pool.open(wait=True, timeout=30)
        self.recorder = SentRecorder(
            self._connect_for_recording, self.options.owner, self._record_retry_seconds()
        )
        background = [
            asyncio.create_task(self.recorder.run(), name="record"),
            asyncio.create_task(self.listener.run(), name="listen"),
            asyncio.create_task(self._renew_leases(), name="renew"),
            asyncio.create_task(self._rescue_loop(), name="rescue"),
            *(asyncio.create_task(self._produce(p), name=f"producer-{p.name}") for p in self.producers),
        ]
        slots = [
            asyncio.create_task(self._slot(i), name=f"slot-{i}") for i in range(self.options.concurrency)
        ]
        log.info(
            "worker %s started: %d slots, batch %d", self.options.owner, len(slots), self.options.batch_size
        )
        stop_wait = asyncio.create_task(self.stopping.wait())
        try:
            running: set[asyncio.Task[Any]] = set(slots)
            failure: BaseException | None = None
            while running and not self.stopping.is_set():
                done, _ = await asyncio.wait(running | {stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                running -= done
                failed = [t for t in done if t is not stop_wait and t.exception() is not None]
                if failed:
                    failure = failed[0].exception()
                    log.error("a delivery slot failed (%s); stopping this worker", failure)
                    self.stop()
            if running:
                # Stopping: in-flight sends get the grace period, then whatever is left is cancelled.
                self.waker.notify()
                _, late = await asyncio.wait(running, timeout=self.options.grace_seconds)
                for task in late:
                    task.cancel()
                await asyncio.gather(*running, return_exceptions=True)
            if failure is not None:
                raise failure
        finally:
            stop_wait.cancel()
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await asyncio.gather(*self._finishing.values(), return_exceptions=True)
            await self.pool.close()
            log.info("worker %s stopped after sending %d", self.options.owner, self.sent)

    def stop(self) -> None:
        """Stop claiming; in-flight sends finish within the grace period, the rest is released."""
        self.stopping.set()
        self.waker.notify()

    # -- producers ------------------------------------------------------------------------------

    async def _produce(self, producer: Producer) -> None:
        """Run one producer until cancelled: again at once while it finds work, else on NOTIFY or timer."""
        assert self.pool is not None
        waker = self._producer_wakers[producer.name]
        while not self.stopping.is_set():
            ticket = waker.ticket()
            done = 0
            try:
                async with self.pool.connection() as conn:
                    done = await producer.run_once(conn, self.settings)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                log.warning("producer %s: database unavailable (%s); retrying", producer.name, exc)
                await waker.wait(1.0, ticket)
                continue
            except Exception:
                # One producer's bug must not stop delivery or the other producers; say so loudly.
                log.exception(
                    "producer %s failed; trying again in %.0fs", producer.name, producer.interval_seconds
                )
            if done <= 0:
                await waker.wait(producer.interval_seconds, ticket)

    # -- slots ----------------------------------------------------------------------------------

    async def _slot(self, index: int) -> None:
        connections: dict[int, SmtpConnection] = {}
        try:
            while not self.stopping.is_set():
                ticket = self.waker.ticket()
                try:
                    worked = await self._one_batch(index, connections)
                    if worked:
                        continue
                    # Nothing to send: the last batch's bookkeeping is done (or its error raised) first.
                    await self._await_finishing(index)
                    if self.options.drain and not await self._anything_due():
                        return
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    log.warning("slot %d: database unavailable (%s); retrying", index, exc)
                    await self._idle(1.0)
                    continue
                # No usable sender for this slot (limits, connection caps): wait for a change, not for due mail.
                await self._idle(
                    self._fallback_seconds() if worked is None else await self._idle_timeout(), ticket
                )
        finally:
            try:
                await self._await_finishing(index)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                log.warning(
                    "slot %d: the last batch's bookkeeping failed (%s); lease rescue applies it", index, exc
                )
            finally:
                for sender_id in list(connections):
                    await self._close_connection(connections, sender_id)

    async def _one_batch(self, index: int, connections: dict[int, SmtpConnection]) -> bool | None:
        """Claim and deliver one batch: True if it did work, False if nothing was due, None if no sender."""
        held = next(iter(connections), None)
        sender = await self._pick_sender(index, held)
        if sender is None:
            return None
        sender_id = sender.account.sender_id
        if sender_id == held and connections[held].account != sender.account:
            # The account was reconfigured (new password, host, TLS): reconnect with the new settings.
            await connections.pop(held).close()
            connections[sender_id] = SmtpConnection(sender.account)
        elif sender_id != held:
            # Counted before the next await, so two slots never both take a sender's last connection.
            self._open[sender_id] = self._open.get(sender_id, 0) + 1
            if held is not None:
                await self._close_connection(connections, held)
            connections[sender_id] = SmtpConnection(sender.account)
        token = uuid.uuid4()
        # Claim first, then reserve quota for what was claimed: an idle wake-up costs one claim, no writes.
        rows = await self._claim(sender_id, token, self._claim_size(sender))
        if not rows:
            return False
        assigned = [r for r in rows if r["status"] == "assigned"]
        if not assigned:
            return True
        quota = await self._reserve(sender_id, len(assigned))
        if quota.granted < len(assigned):
            surplus, assigned = assigned[quota.granted :], assigned[: quota.granted]
            await self._release(token, [e["id"] for e in surplus])
            self._exhausted.add(sender_id)
            if not assigned:
                return True
        self._tokens.add(token)
        try:
            unsent = await self._deliver(sender, token, assigned, connections, quota)
        except BaseException:
            # Cancelled after the grace period, or failed: hand back whatever this claim still holds,
            # and the quota of every email that was not recorded as having used it. Shielded whole: a
            # second cancellation must not cut it short.
            with contextlib.suppress(psycopg.Error):
                await asyncio.shield(self._finish_batch(token, sender_id, quota, [e["id"] for e in assigned]))
            raise
        # The slot's connection goes on to the next claim while this one's bookkeeping is written
        # (a claim and its bookkeeping took a tenth of a slot's time); the batch before must be done
        # by the time this one is, so a slot never has more than two under way.
        previous = self._finishing.pop(index, None)
        self._finishing[index] = asyncio.create_task(self._finish_batch(token, sender_id, quota, unsent))
        if previous is not None:
            # Its error, if any, is this slot's now (after this claim's bookkeeping is under way).
            await asyncio.shield(previous)
        return True

    async def _await_finishing(self, index: int) -> None:
        """Wait for the slot's previous batch's bookkeeping; its database errors are this slot's."""
        finishing = self._finishing.pop(index, None)
        if finishing is not None:
            # Shielded: a slot cancelled after the grace period must not cut the bookkeeping short.
            await asyncio.shield(finishing)

    def _claim_size(self, sender: Sender) -> int:
        """How many emails to claim for this sender: the batch size, but no more than a paced sender
        sends in `PACED_CLAIM_SECONDS`, so its claim (and its reserved quota) is never held for long
        and a more urgent email waits for the next claim a few seconds at most."""
        if sender.send_delay_ms <= 0:
            return self.options.batch_size
        return max(1, min(self.options.batch_size, PACED_CLAIM_SECONDS * 1000 // sender.send_delay_ms))

    async def _reserve(self, sender_id: int, wanted: int) -> _Quota:
        assert self.pool is not None
        async with self.pool.connection() as conn:
            cur = await conn.execute(RESERVE, (sender_id, wanted))
            row = await cur.fetchone()
        assert row is not None
        return _Quota(sender_id, row[1], int(row[0] or 0))

    async def _refund(self, quota: _Quota) -> None:
        """Give back the quota of the emails that did not use it, to the day it was reserved on."""
        unused = quota.granted - quota.used
        if unused > 0:
            await self._scalar(RELEASE_QUOTA, (quota.sender_id, unused, quota.day))
            quota.granted = quota.used

    async def _claim(self, sender_id: int, token: uuid.UUID, limit: int) -> list[dict[str, Any]]:
        assert self.pool is not None
        params = {
            "limit": limit,
            "owner": self.options.owner,
            "token": token,
            "lease": self.settings.lease_seconds,
            "sender": sender_id,
        }
        async with (
            self.pool.connection() as conn,
            conn.transaction(),
            conn.cursor(row_factory=dict_row) as cur,
        ):
            await cur.execute(q.CLAIM_IN_INDEX_ORDER)
            await cur.execute(q.CLAIM, params)
            rows = await cur.fetchall()
            suppressed = [r["id"] for r in rows if r["status"] == "suppressed"]
            if suppressed:
                await cur.execute(q.LOG_SUPPRESSED, {"ids": suppressed, "owner": self.options.owner})
        for row in rows:
            if row["status"] == "suppressed":
                recipient = mask_address(row["recipient_email"])
                log.info(
                    "email %s to %s suppressed: %s",
                    row["id"],
                    recipient,
                    row["suppression_reason"],
                    extra=_fields(
                        "suppressed",
                        email_id=row["id"],
                        recipient=recipient,
                        reason=row["suppression_reason"],
                    ),
                )
        if rows:
            log.info(
                "claimed %d email(s), %d suppressed",
                len(rows),
                len(suppressed),
                extra=_fields("claimed", sender_id=sender_id, claimed=len(rows), suppressed=len(suppressed)),
            )
        return rows

    async def _deliver(
        self,
        sender: Sender,
        token: uuid.UUID,
        emails: Sequence[dict[str, Any]],
        connections: dict[int, SmtpConnection],
        quota: _Quota,
    ) -> list[int]:
        """Send a claim's emails in order, recording each attempt; return the ids left unsent."""
        sender_id = sender.account.sender_id
        connection = connections[sender_id]
        pending = list(emails)
        assert self.pool is not None
        # One database connection for the whole batch: a pool checkout costs a health-check round trip.
        db = _Borrowed(self.pool)
        # Each message is built one turn ahead, so its MAIL, RCPT and DATA can ride behind the body
        # before it (see SmtpConnection.send).
        upcoming = self._build(sender, pending[0]) if pending else None
        try:
            while pending:
                if self.stopping.is_set():
                    break
                email = pending.pop(0)
                built = upcoming
                upcoming = self._build(sender, pending[0]) if pending else None
                await self._pace_sender(sender)
                if isinstance(built, Exception):
                    # A row written around the API (a header that is not text, say): fail this email only.
                    attempt = Attempt(Reply(None, f"cannot build the message: {built}", "build"), 0)
                    outcome = _Outcome(email["id"], "failed", Verdict.LOCAL, attempt, None, None)
                else:
                    assert built is not None
                    next_envelope = upcoming if isinstance(upcoming, Envelope) else None
                    attempt = await connection.send(built, next_envelope)
                    outcome = self._decide(email, attempt, built.message_id)
                if outcome.outcome == "sent" or outcome.verdict is Verdict.PERMANENT:
                    # Charged as soon as the provider counted it (a permanent refusal too), before the
                    # recording that may fail or find the lease lost: the message went out either way.
                    quota.used += 1
                if not await self._record(db, sender, token, outcome, email):
                    # Our lease expired and the claim went back to the queue: another worker owns the
                    # rest of this batch now, so sending it here would send it twice.
                    log.warning("lease lost for %d claimed email(s); leaving them to the queue", len(pending))
                    pending.clear()
                    break
                if outcome.verdict is Verdict.AUTH:
                    await self._suspend(sender, attempt)
                    break
        finally:
            connection.forget_announced()  # a stop or a lost lease leaves the next one unsent
            await db.give_back()
        return [e["id"] for e in pending]

    async def _finish_batch(self, token: uuid.UUID, sender_id: int, quota: _Quota, unsent: list[int]) -> None:
        """A delivered claim's bookkeeping: its journal into the queue and the log, what it did not send
        back to the queue, the sender's last use, the quota it did not use. Runs beside the slot's next
        claim; the lease is renewed until it is done, and lease rescue applies the journal of a worker
        that dies before it is."""
        try:
            steps: list[Callable[[], Awaitable[None]]] = [
                lambda: self._apply_journal(token),
                lambda: self._release(token, unsent),
                # Once per batch, not per email: the sender row is also what quota reservations lock.
                lambda: self._scalar(q.TOUCH_SENDER, (sender_id,)),
                lambda: self._refund(quota),
            ]
            failure: psycopg.Error | None = None
            for step in steps:
                try:
                    await step()
                except psycopg.Error as exc:  # each step on its own: one failure must not skip the rest
                    failure = failure or exc
            if failure is not None:
                raise failure
        finally:
            self._tokens.discard(token)
            if self.options.drain:
                # Slots of a draining worker that found nothing wait for in-flight claims like this one.
                self.waker.notify()

    @staticmethod
    def _build(sender: Sender, email: dict[str, Any]) -> Envelope | Exception:
        """The message as it goes on the wire, or why it cannot be built."""
        try:
            envelope = build_message(email, sender.from_email, sender.from_name)
            if sender.dkim is not None:
                # Inline on the event loop on purpose (~1 ms a message): see worker.core.dkim.
                envelope = sign_envelope(envelope, sender.dkim)
        except (TypeError, ValueError, AttributeError) as exc:
            return exc
        return envelope

    def _decide(self, email: dict[str, Any], attempt: Attempt, message_id: str) -> _Outcome:
        verdict = classify(attempt.reply)
        retry_at = None
        if verdict is Verdict.SENT:
            outcome = "sent"
        elif verdict is Verdict.AUTH:
            outcome = "release"
        elif verdict in (Verdict.TRANSIENT, Verdict.LOCAL) and email["retry_count"] < email["max_retries"]:
            outcome = "retry"
            delay = backoff_seconds(
                email["retry_count"],
                self.settings.retry_base_seconds,
                self.settings.retry_cap_seconds,
                random.random(),
            )
            retry_at = datetime.now(UTC) + timedelta(seconds=delay)
        else:
            outcome = "failed"
        if outcome != "sent":
            recipient = mask_address(email["recipient_email"])
            log.warning(
                "email %s to %s: %s %s (%s) -> %s",
                email["id"],
                recipient,
                attempt.reply.code,
                attempt.reply.text[:200],
                verdict.value,
                outcome,
                extra=_fields(
                    "attempt_failed",
                    email_id=email["id"],
                    recipient=recipient,
                    attempt=email["retry_count"] + 1,
                    code=attempt.reply.code,
                    enhanced=attempt.reply.enhanced,
                    reply=attempt.reply.text[:200],
                    phase=attempt.reply.phase,
                    verdict=verdict.value,
                    outcome=outcome,
                    retry_at=retry_at.isoformat() if retry_at else None,
                ),
            )
        return _Outcome(email["id"], outcome, verdict, attempt, retry_at, message_id)

    async def _connect_for_recording(self) -> psycopg.AsyncConnection[Any]:
        """The sent journal's own connection, set up like the pool's."""
        return await psycopg.AsyncConnection.connect(self.url, **_SESSION)

    def _record_retry_seconds(self) -> float:
        """How long recording an attempt keeps retrying a lost database before the claim is given up."""
        return max(self.settings.lease_seconds, 5.0)

    async def _record(
        self, db: _Borrowed, sender: Sender, token: uuid.UUID, outcome: _Outcome, email: dict[str, Any]
    ) -> bool:
        """Commit the attempt before the next message goes out on this connection; False if the lease was lost.

        So a killed worker leaves at most one message per connection sent but not recorded.
        A sent email goes to the group commit of every slot's sends; a failure is one transaction
        that also updates lists and counters.
        """
        reply = outcome.attempt.reply
        sender_id = sender.account.sender_id
        if outcome.outcome == "sent":
            assert self.recorder is not None
            sent = Sent(
                outcome.email_id,
                token,
                sender_id,
                reply.code,
                reply.enhanced,
                reply.text or "(no text)",
                outcome.attempt.duration_ms,
                outcome.message_id,
            )
            held = await self.recorder.record(sent)
            if held:
                self.sent += 1
            return held
        statements: list[tuple[str, dict[str, Any]]] = [
            (
                q.COMPLETE,
                {
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
                    "owner": self.options.owner,
                },
            )
        ]
        bounced = outcome.verdict is Verdict.BOUNCE
        if bounced:
            statements.append(
                (
                    q.RECORD_BOUNCES,
                    {
                        "emails": [email["recipient_email"]],
                        "reasons": [reply.text],
                        "codes": [reply.code],
                        "enhanced": [reply.enhanced],
                        "campaigns": [email["campaign_id"]],
                        "sender": sender_id,
                    },
                )
            )
        statements.append((q.COUNT_USAGE, {"sender": sender_id, "bounces": int(bounced), "errors": 1}))
        deadline = time.monotonic() + self._record_retry_seconds()
        while True:
            try:
                conn = await db.get()
                async with conn.transaction():
                    held = await (await conn.execute(*statements[0])).fetchone() is not None
                    if held:  # lists and counters change only for an attempt this worker still owned
                        for statement, params in statements[1:]:
                            await conn.execute(statement, params)
                return held
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if time.monotonic() > deadline:
                    raise
                log.warning("recording email %s failed (%s); retrying", email["id"], exc)
                await db.give_back()
                await asyncio.sleep(0.5)

    async def _apply_journal(self, token: uuid.UUID) -> None:
        """Move this claim's journalled sends into the queue and the attempt log (one statement)."""
        assert self.pool is not None
        async with self.pool.connection() as conn:
            await conn.execute(q.APPLY_SENT, {"tokens": [token]})

    async def _release(self, token: uuid.UUID, ids: list[int]) -> None:
        if not ids:
            return
        assert self.pool is not None
        async with self.pool.connection() as conn:
            await conn.execute(q.RELEASE, {"ids": ids, "token": token})
        log.info(
            "released %d claimed email(s) back to the queue",
            len(ids),
            extra=_fields("released", count=len(ids)),
        )

    async def _suspend(self, sender: Sender, attempt: Attempt) -> None:
        reason = f"authentication failed: {attempt.reply.code} {attempt.reply.text}"[:500]
        assert self.pool is not None
        async with self.pool.connection() as conn:
            await conn.execute(q.SUSPEND_SENDER, {"sender": sender.account.sender_id, "reason": reason})
        self._senders_at = 0.0
        log.error(
            "sender account %s suspended: %s",
            sender.name,
            reason,
            extra=_fields("sender_suspended", sender=sender.name, reason=reason),
        )

    # -- senders --------------------------------------------------------------------------------

    async def _pick_sender(self, index: int, held: int | None) -> Sender | None:
        """The sender this slot should use: the one it holds a connection to, while that is usable,
        else one with quota left and fewer than `max_connections` open connections in this process."""
        if time.monotonic() - self._senders_at > 5.0 or not self._senders:
            await self._load_senders()
        usable = [
            s
            for s in self._senders
            if s.account.sender_id not in self._exhausted
            and (s.account.sender_id == held or self._open.get(s.account.sender_id, 0) < s.max_connections)
        ]
        if not usable:
            return None
        for sender in usable:
            if sender.account.sender_id == held:
                return sender
        return usable[index % len(usable)]

    async def _close_connection(self, connections: dict[int, SmtpConnection], sender_id: int) -> None:
        await connections.pop(sender_id).close()
        self._open[sender_id] -= 1

    async def _load_senders(self) -> None:
        assert self.pool is not None
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(ELIGIBLE_SENDERS)
            rows = await cur.fetchall()
        senders = []
        for row in rows:
            password = None
            dkim = None
            try:
                if row["smtp_password_encrypted"] is not None:
                    if self._box is None:
                        self._box = secret_box(self.settings)
                    password = self._box.decrypt(row["smtp_password_encrypted"])
                if row["dkim_private_key_encrypted"] is not None:
                    dkim = self._dkim_key(row)
            except ConfigError as exc:
                log.error("sender account %s skipped: %s", row["name"], exc)
                continue
            account = SmtpAccount(
                row["id"],
                row["smtp_host"],
                row["smtp_port"],
                row["smtp_security"],
                row["smtp_username"],
                password,
                self.options.smtp_timeout,
            )
            senders.append(
                Sender(
                    account,
                    row["name"],
                    row["from_email"],
                    row["from_name"],
                    row["send_delay_ms"],
                    row["max_connections"],
                    dkim,
                )
            )
        self._senders = senders
        self._senders_at = time.monotonic()
        self._exhausted.clear()

    def _dkim_key(self, row: dict[str, Any]) -> DkimKey:
        """The sender's DKIM key, decrypted the first time it is seen."""
        cache_key = (int(row["id"]), bytes(row["dkim_private_key_encrypted"]))
        key = self._dkim_keys.get(cache_key)
        if key is None:
            if self._box is None:
                self._box = secret_box(self.settings)
            pem = self._box.decrypt(cache_key[1]).encode("ascii")
            key = DkimKey(row["dkim_domain"], row["dkim_selector"], pem)
            self._dkim_keys[cache_key] = key
        return key

    async def _pace_sender(self, sender: Sender) -> None:
        """Wait for the paced sender's next send slot, taken in PostgreSQL so every worker shares it."""
        if sender.send_delay_ms <= 0:
            return
        wait = await self._scalar(
            TAKE_SEND_SLOT, {"sender": sender.account.sender_id, "delay": sender.send_delay_ms / 1000}
        )
        if wait:
            await asyncio.sleep(float(wait))

    # -- idle, leases, rescue -----------------------------------------------------------------

    async def _idle(self, seconds: float, ticket: asyncio.Event | None = None) -> None:
        if not self.stopping.is_set():
            await self.waker.wait(seconds, ticket)

    def _fallback_seconds(self) -> float:
        return self.options.poll_seconds if self.listener.live else min(self.options.poll_seconds, 1.0)

    async def _idle_timeout(self) -> float:
        """Sleep until the next scheduled email is due, a NOTIFY arrives, or the fallback timer fires."""
        fallback = self._fallback_seconds()
        try:
            due, lease_end = await self._row(q.NEXT_DUE)
        except psycopg.Error:
            return 1.0
        if self.options.drain and lease_end is not None:
            # Another process's claim ends without a NOTIFY (sent email wakes nobody), and a dead
            # one's comes back at its lease end: look again within a second.
            fallback = min(fallback, 1.0)
            due = lease_end if due is None else min(due, lease_end)
        if due is None:
            return fallback
        return float(max(0.01, min(fallback, (due - datetime.now(UTC)).total_seconds())))

    async def _anything_due(self) -> bool:
        if not self._senders or len(self._exhausted) >= len(self._senders):
            return False
        return bool(await self._scalar(q.ANY_DUE, ()))

    async def _row(self, statement: str, params: Sequence[Any] | dict[str, Any] = ()) -> tuple[Any, ...]:
        assert self.pool is not None
        async with self.pool.connection() as conn:
            cur = await conn.execute(statement, params)
            row = await cur.fetchone()
        assert row is not None
        return tuple(row)

    async def _scalar(self, statement: str, params: Sequence[Any] | dict[str, Any]) -> Any:
        assert self.pool is not None
        async with self.pool.connection() as conn:
            cur = await conn.execute(statement, params)
            row = await cur.fetchone()
        return row[0] if row else None

    async def _renew_leases(self) -> None:
        interval = max(self.settings.lease_seconds / 3, 0.05)
        while True:
            await asyncio.sleep(interval)
            if not self._tokens:
                continue
            try:
                assert self.pool is not None
                async with self.pool.connection() as conn:
                    await conn.execute(
                        q.RENEW_LEASES, {"lease": self.settings.lease_seconds, "tokens": list(self._tokens)}
                    )
            except psycopg.Error as exc:
                log.warning("lease renewal failed: %s", exc)

    async def _rescue_loop(self) -> None:
        interval = max(self.settings.lease_seconds / 2, 0.1)
        while True:
            try:
                assert self.pool is not None
                async with self.pool.connection() as conn:
                    cur = await conn.execute(q.RESCUE_EXPIRED)
                    rescued = await cur.fetchall()
                    # Journal rows of a claim that lost its emails: kept a whole lease period longer than
                    # any live claim could need them.
                    await conn.execute(q.FORGET_ORPHANED_JOURNAL, {"age": 2 * self.settings.lease_seconds})
                if rescued:
                    log.warning(
                        "returned %d email(s) with expired leases to the queue",
                        len(rescued),
                        extra=_fields("leases_rescued", count=len(rescued)),
                    )
                    self.waker.notify()
            except psycopg.Error as exc:
                log.warning("lease rescue failed: %s", exc)
            await asyncio.sleep(interval)


def _fields(event: str, **fields: Any) -> dict[str, Any]:
    """`extra` for a log line a machine reads: the event's name and facts (see `worker.core.logs`)."""
    return {"fields": {"event": event, **fields}}


async def run_worker(
    url: str,
    settings: Settings,
    options: WorkerOptions,
    listen_url: str | None = None,
    producers: Sequence[Producer] = (),
) -> int:
    """Run one worker until SIGTERM/SIGINT (or until drained); return how many emails it sent."""
    import signal

    worker = Worker(url, settings, options, listen_url, producers)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, worker.stop)
    await worker.run()
    return worker.sent
