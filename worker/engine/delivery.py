"""The delivery engine: slots that claim email in batches, send it over SMTP and record every attempt.

A worker process runs `concurrency` slots beside its background tasks (the sent-journal recorder,
the LISTEN connection, lease renewal and rescue, the producers it was given). Each slot holds one
SMTP connection and loops: pick a sender, claim a batch (`worker.engine.claim`), execute its emails
in order (`worker.engine.execute`: each returns a `Result`), have the completer record each result
before the next message goes out (`worker.engine.completer`), and hand the end of the claim to a
task that runs beside the slot's next claim.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg

from worker.core import tracing
from worker.core.config import Settings
from worker.core.db import connection_kwargs
from worker.core.failover import DatabaseCircuit, database_unavailable
from worker.core.listen import Listener, Waker
from worker.core.logs import event
from worker.core.metrics import observe_claim_finished
from worker.engine import claim as claiming
from worker.engine import leases
from worker.engine.clock import SYSTEM, Clock
from worker.engine.completer import Completer, CompleterOptions
from worker.engine.counting import count_claim, count_result
from worker.engine.database import Borrowed, Pool
from worker.engine.leases import drained, idle_seconds
from worker.engine.producer import Producer, Producers
from worker.engine.rows import ClaimedEmail
from worker.engine.sender_book import Sender, SenderBook
from worker.engine.sender_health import SenderHealth
from worker.engine.sent_journal import SentRecorder
from worker.engine.shared import Shared
from worker.engine.supervision import WorkerFailed, supervise, supervise_slots
from worker.engine.traces import ClaimTraces, claim_attributes, outcome
from worker.engine.transport import Transport

if TYPE_CHECKING:
    from worker.engine.execute import Built

log = logging.getLogger("mailroom.worker")

# psycopg_pool retries a connection it cannot make with a doubling wait; after this long it gives up
# and the next request starts again from a one-second wait.
RECONNECT_SECONDS = 10.0


@dataclass(frozen=True)
class WorkerOptions:
    """How one worker process runs."""

    concurrency: int = 4
    batch_size: int = 300  # per claim; a paced sender's claims are smaller (see `claim.claim_size`)
    drain: bool = False
    grace_seconds: float = 10.0
    poll_seconds: float = 30.0
    owner: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    # What the engine reads for due times and backoff (tests move a `worker.engine.clock.MovedClock`).
    clock: Clock = SYSTEM


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
        self.lease = claiming.Lease(
            options.owner, settings.lease_seconds, settings.queue_lifetime_seconds, options.clock
        )
        self.waker = Waker()
        self._producers = Producers(producers or ())
        self.producers = self._producers.producers
        # Lost, read-only or shutting-down database: every task of this process waits as it says.
        self.circuit = DatabaseCircuit("worker")
        self.listener = Listener(listen_url or url, ("mailroom_queue",), self.waker, self._producers.routes())
        self.stopping = asyncio.Event()
        self._pool: Pool | None = None
        self._book: SenderBook | None = None
        self._health: SenderHealth | None = None
        self.failure: str | None = None  # why a supervised task stopped the worker
        self._recorder: SentRecorder | None = None  # the sent journal's group commit (while `run` runs)
        self._completer: Completer | None = None
        # This process's claims, and how long each lease is known to hold (see `leases.HeldLeases`).
        self._held = leases.HeldLeases(settings.lease_seconds, options.clock)
        # Per slot: the end of its last delivered claim, written beside its next claim.
        self._finishing: dict[int, asyncio.Task[None]] = {}
        self._sent_earlier = 0  # by the completers of earlier runs of this worker
        self._drain_checks: Shared[bool] = Shared()  # see `_drained`

    @property
    def sent(self) -> int:
        """How many emails this worker sent, each once."""
        return self._sent_earlier + (self._completer.sent if self._completer else 0)

    @property
    def completer(self) -> Completer:
        """Where results are recorded and claims end (while `run` runs)."""
        assert self._completer is not None
        return self._completer

    @property
    def pool(self) -> Pool:
        """The process's connection pool (open while `run` runs)."""
        assert self._pool is not None
        return self._pool

    @property
    def book(self) -> SenderBook:
        """The senders this process may use (while `run` runs)."""
        assert self._book is not None
        return self._book

    @property
    def health(self) -> SenderHealth:
        """What attempts do to their sender accounts: suspension and circuits (while `run` runs)."""
        assert self._health is not None
        return self._health

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Deliver until stopped (or, with `drain`, until nothing is due)."""
        self._pool = Pool(
            self.url,
            circuit=self.circuit,
            min_size=1,
            max_size=self.options.concurrency + 3 + len(self.producers),
            open=False,
            # A connection that cannot be made is tried again with a backoff that starts anew after
            # this long: the pool is back within seconds of a failover, not minutes.
            reconnect_timeout=RECONNECT_SECONDS,
            kwargs=connection_kwargs(self.settings),
        )
        await self._pool.open(wait=True, timeout=30)
        self._book = SenderBook(self._pool, self.settings)
        self._health = SenderHealth(self._pool, self.settings)
        self._recorder = recorder = SentRecorder(
            self._connect_for_recording,
            self.options.owner,
            self._retry_seconds(),
            prepared=not self.settings.transaction_pooler,
            circuit=self.circuit,
        )
        completing = CompleterOptions(self.options.owner, self._retry_seconds(), self.options.clock)
        if self._completer is not None:
            self._sent_earlier += self._completer.sent
        self._completer = Completer(self._pool, recorder, self.settings, completing)
        slots = [
            asyncio.create_task(self._slot(i), name=f"slot-{i}") for i in range(self.options.concurrency)
        ]
        await asyncio.sleep(0)  # the slots' first read of the senders takes the pool's open connection
        background = self._start_background(recorder)
        log.info(
            "worker %s started: %d slots, batch %d", self.options.owner, len(slots), self.options.batch_size
        )
        try:
            await supervise_slots(
                slots, self.stopping, self.stop, self.waker.notify, self.options.grace_seconds
            )
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await asyncio.gather(*self._finishing.values(), return_exceptions=True)
            await leases.say_gone(self._pool, self.options.owner)
            await self._pool.close()
            log.info("worker %s stopped after sending %d", self.options.owner, self.sent)
        if self.failure is not None:
            raise WorkerFailed(self.failure)

    def _start_background(self, recorder: SentRecorder) -> list[asyncio.Task[None]]:
        """The worker's background tasks, each supervised: restarted when it fails, fatal if it keeps failing."""
        pool, settings, lease_seconds = self.pool, self.settings, self.settings.lease_seconds
        tasks: dict[str, Callable[[], Awaitable[None]]] = {
            "recorder": recorder.run,
            "listener": self._listen,
            "lease renewal": lambda: leases.renew_forever(pool, self._held),
            "lease rescue": lambda: leases.rescue_forever(
                pool, lease_seconds, settings.queue_lifetime_seconds, self.waker, self.options.clock
            ),
            "heartbeat": lambda: leases.heartbeat_forever(pool, self.options.owner),
        }
        tasks.update(self._producers.tasks(pool, settings, self.stopping))  # before the listener starts
        return [
            asyncio.create_task(supervise(name, task, self._fail), name=name) for name, task in tasks.items()
        ]

    async def _listen(self) -> None:
        try:
            await self.listener.run()
        finally:  # LISTEN refused (polling instead), or a failure: no producer waits for its connect
            self._producers.wake()

    def _fail(self, reason: str) -> None:
        """A supervised task cannot go on: stop the worker, which then exits with the reason."""
        log.error("worker %s stopping: %s", self.options.owner, reason)
        self.failure = self.failure or reason
        self.stop()

    def stop(self) -> None:
        """Stop claiming; in-flight sends finish within the grace period, the rest is released."""
        self.stopping.set()
        self.waker.notify()

    # -- slots ----------------------------------------------------------------------------------

    async def _slot(self, index: int) -> None:
        connections: dict[int, Transport] = {}
        try:
            while not self.stopping.is_set():
                ticket = self.waker.ticket()
                looked = time.monotonic()
                try:
                    worked = await self._one_batch(index, connections)
                    if worked:
                        continue
                    # Nothing to send: the last batch's bookkeeping is done (or its error raised) first.
                    await self._await_finishing(index)
                    if self.options.drain and await self._drained(looked):
                        return
                except psycopg.Error as exc:
                    if not database_unavailable(exc):
                        raise
                    # The circuit said so in the log (once for every task); this slot waits as it says.
                    log.debug("slot %d: database unavailable (%s); retrying", index, exc)
                    await self._idle(max(self.circuit.wait_seconds(), 0.1))
                    continue
                # No usable sender for this slot (limits, connection caps): wait for a change, not for due mail.
                await self._idle(
                    self._fallback_seconds() if worked is None else await self._idle_timeout(), ticket
                )
        finally:
            await self._end_slot(index, connections)

    async def _end_slot(self, index: int, connections: dict[int, Transport]) -> None:
        try:
            await self._await_finishing(index)
        except psycopg.Error as exc:
            if not database_unavailable(exc):
                raise
            log.warning(
                "slot %d: the last batch's bookkeeping failed (%s); lease rescue applies it", index, exc
            )
        finally:
            for sender_id in list(connections):
                await self.book.close(connections, sender_id)

    async def _one_batch(self, index: int, connections: dict[int, Transport]) -> bool | None:
        """Claim and deliver one batch: True if it did work, False if nothing was due, None if no sender.

        A sender with nothing due for it leaves the slot to another that serves other streams or From
        domains, if one does: each is tried once."""
        tried: set[int] = set()
        worked: bool | None = None
        while (sender := await self.book.pick(index, next(iter(connections), None), tried)) is not None:
            worked = await self._batch_for(sender, index, connections)
            if worked is not False or not self.book.serves_others(sender, tried):
                return worked
            tried.add(sender.id)
        return worked

    async def _batch_for(self, sender: Sender, index: int, connections: dict[int, Transport]) -> bool:
        """Claim and deliver one batch for `sender`: True if it did work, False if nothing was due."""
        limit = claiming.claim_size(sender.send_delay_ms, self.options.batch_size, sender.batch_size)
        if sender.circuit_state != "closed":
            if not await self.health.take_probe(sender):
                self.book.set_aside(sender.id)  # another worker probes it
                return True
            limit = 1  # the probe: one email tells whether the relay is back
        await self.book.use(sender, connections)
        # Claim, reserve quota for what was claimed and record the claim: one transaction.
        claimed_at = self.options.clock.monotonic()
        with tracing.span("mailroom.claim", {"mailroom.sender.id": sender.id}) as claim_span:
            streams = self.book.streams_in_turn(sender)
            claim = await claiming.take(self.pool, self.lease, sender.id, limit, streams, sender.from_domains)
            self.book.claimed(sender, claim.empty_streams, claim.stream)
            tracing.note(claim_span, claim_attributes(claim))
        count_claim(sender.name, len(claim.emails), claim.suppressed, claim.expired)
        if claim.seen == 0:
            return False
        if claim.short:
            self.book.set_aside(sender.id)  # its limit is reached: the surplus went straight back
        if not claim.emails:
            return True
        self._held.add(claim.token, claimed_at)
        try:
            sender = await self.book.with_campaigns(sender, claim.emails)
            unsent = await self._deliver(sender, claim, connections[sender.id], claim_span)
        except BaseException:
            # Cancelled after the grace period, or failed: hand back whatever this claim still holds.
            # Shielded whole: a second cancellation must not cut it short.
            with contextlib.suppress(psycopg.Error):
                await asyncio.shield(self._finish(claim, [e.id for e in claim.emails]))
            raise
        await self._finish_beside_next_claim(index, claim, unsent)
        return True

    async def _finish_beside_next_claim(self, index: int, claim: claiming.Claim, unsent: list[int]) -> None:
        """The slot's connection goes on to the next claim while this one's bookkeeping is written (a
        claim and its bookkeeping took a tenth of a slot's time); the batch before must be done by the
        time this one is, so a slot never has more than two under way."""
        previous = self._finishing.pop(index, None)
        self._finishing[index] = asyncio.create_task(self._finish(claim, unsent))
        if previous is not None:
            # Its error, if any, is this slot's now (after this claim's bookkeeping is under way).
            await asyncio.shield(previous)

    async def _await_finishing(self, index: int) -> None:
        """Wait for the slot's previous batch's bookkeeping; its database errors are this slot's."""
        finishing = self._finishing.pop(index, None)
        if finishing is not None:
            # Shielded: a slot cancelled after the grace period must not cut the bookkeeping short.
            await asyncio.shield(finishing)

    async def _finish(self, claim: claiming.Claim, unsent: list[int]) -> None:
        """End a claim through the completer; its lease is renewed until that is done."""
        try:
            await self.completer.finish(claim, unsent)
            observe_claim_finished(time.monotonic() - claim.claimed_at)
        finally:
            self._held.discard(claim.token)
            if self.options.drain:
                # Slots of a draining worker that found nothing wait for in-flight claims like this one.
                self.waker.notify()

    # -- sending --------------------------------------------------------------------------------

    async def _deliver(
        self, sender: Sender, claim: claiming.Claim, connection: Transport, claim_span: Any = None
    ) -> list[int]:
        """Execute a claim's emails in order, each result completed before the next message goes out
        (so a killed worker leaves at most one message per connection sent but not recorded); return
        the ids left unsent. Their spans link to `claim_span` (see `worker.engine.traces`)."""
        from worker.engine.execute import execute  # email building and SMTP: loaded with the first claim

        pending = list(claim.emails)
        # One database connection for the whole batch: a pool checkout costs a health-check round trip.
        db = Borrowed(self.pool)
        try:
            # Spans only while tracing is on: otherwise one test a claim and a no-op a message.
            traces = await ClaimTraces.load(db, pending, claim_span, sender.id) if tracing.active() else None
            build = self._builder(sender, traces, db)
            # Each message is built one turn ahead, so its MAIL, RCPT and DATA can ride behind the body
            # before it (see SmtpConnection.send).
            upcoming = await build(pending[0]) if pending else None
            while pending and not self.stopping.is_set():
                # Paced: the wait for this sender's next send slot comes first. Then the lease, right
                # before the message goes out: a process that stood still anywhere before (in that
                # wait, or recording the last result) asks the database what it still holds.
                await self.book.pace(sender)
                if not self._held.fresh(claim.token):
                    pending, upcoming = await self._still_held(claim, pending, build, upcoming)
                    if not pending:
                        break
                email = pending.pop(0)
                built = upcoming
                assert built is not None
                upcoming = await build(pending[0]) if pending else None
                with tracing.NOOP if traces is None else traces.delivering(email) as span:
                    result = await execute(email, built, upcoming, connection)
                    count_result(sender.name, result, self.options.clock)
                    outcome(span, result)
                    held = await self.completer.complete(db, claim, sender.id, result)
                if not held:
                    # Our lease expired and the claim went back to the queue: another worker owns the
                    # rest of this batch now, so sending it here would send it twice.
                    log.warning("lease lost for %d claimed email(s); leaving them to the queue", len(pending))
                    pending.clear()
                    break
                if not await self.health.after_attempt(sender, result, self.book):
                    break
        finally:
            connection.forget_announced()  # a stop or a lost lease leaves the next one unsent
            await db.give_back()
        return [e.id for e in pending]

    @staticmethod
    def _builder(
        sender: Sender, traces: ClaimTraces | None, db: Borrowed
    ) -> Callable[[ClaimedEmail], Awaitable[Built]]:
        """How the batch's emails are built: as this sender sends them, traced when tracing is on, each
        with its files read first (`worker.engine.files`) when it carries any."""
        from worker.engine import files
        from worker.engine.execute import build as build_message_for

        build = functools.partial(build_message_for, sender)
        if traces is not None:
            build = functools.partial(traces.build, build)
        shelf = files.Shelf()

        async def built(email: ClaimedEmail) -> Built:
            if email.attachments:
                try:
                    email = await files.with_files(await db.get(), shelf, email)
                except ValueError as exc:
                    return exc
            return build(email)

        return built

    async def _still_held(
        self,
        claim: claiming.Claim,
        pending: list[ClaimedEmail],
        build: Callable[[ClaimedEmail], Awaitable[Built]],
        upcoming: Built | None,
    ) -> tuple[list[ClaimedEmail], Built | None]:
        """Renew a claim whose lease is not known to hold for long enough to send the next message (see
        `leases.HeldLeases`): the emails it still holds, and the first one's message (`upcoming` when
        that is still the first). The others were rescued while this worker stood still, and another
        worker sends them."""
        held = await leases.renew_claim(self.pool, self._held, claim.token)
        kept = [e for e in pending if e.id in held]
        if len(kept) < len(pending):
            log.warning(
                "lease lost for %d claimed email(s) while this worker stood still; leaving them to the queue",
                len(pending) - len(kept),
                extra=event("lease_lost", count=len(pending) - len(kept)),
            )
        if not kept:
            return kept, None
        return kept, upcoming if kept[0] is pending[0] else await build(kept[0])

    async def _connect_for_recording(self) -> psycopg.AsyncConnection[Any]:
        """The sent journal's own connection (durable unless MAILROOM_JOURNAL_DURABLE is false: see
        `worker.core.db.connection_kwargs`)."""
        return await psycopg.AsyncConnection.connect(
            self.url,
            **connection_kwargs(self.settings, asynchronous_commit=not self.settings.journal_durable),
        )

    def _retry_seconds(self) -> float:
        """How long recording an attempt keeps retrying a lost database before the claim is given up."""
        return max(self.settings.lease_seconds, 5.0)

    # -- idle -----------------------------------------------------------------------------------

    async def _idle(self, seconds: float, ticket: asyncio.Event | None = None) -> None:
        if not self.stopping.is_set():
            await self.waker.wait(seconds, ticket)

    def _fallback_seconds(self) -> float:
        return self.options.poll_seconds if self.listener.live else min(self.options.poll_seconds, 1.0)

    async def _idle_timeout(self) -> float:
        """Sleep until the next scheduled email is due, a NOTIFY arrives, or the fallback timer fires."""
        return await idle_seconds(
            self.pool, self._fallback_seconds(), drain=self.options.drain, clock=self.options.clock
        )

    async def _drained(self, since: float) -> bool:
        """With `--drain`: whether this slot, which began looking for work at `since`, may end (see
        `worker.engine.leases.drained`). Slots asking together share one check that began after they
        began looking: every slot of a worker that finds nothing asks at once. The producers' first
        rounds come first: what they make due goes out in the same drain."""
        await self._producers.rested(self.stopping)
        lease, clock = self.settings.lease_seconds, self.options.clock
        return await self._drain_checks.get(
            lambda: drained(self.pool, lease, bool(self._held), self.book.routes(), clock), since=since
        )


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
