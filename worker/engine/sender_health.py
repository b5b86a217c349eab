"""What an attempt says about its sender account: a failed login suspends it, a relay's fault opens its
circuit, a relay that answered closes it. A relay's faults are the sender's, never its emails'.

A sender-level fault (connection refused, DNS, TLS, greeting or command timeout, 421 at connect, or
`MAILROOM_CIRCUIT_MAIL_REFUSALS` refusals of MAIL FROM in a row) opens the sender's circuit in the
database: every worker leaves the sender alone until its backoff passes (doubling per failure, capped),
then one worker takes the probe and sends a single email. A delivered email closes the circuit.
One warning when a circuit opens and one when it closes, not one per connection.
"""

from __future__ import annotations

import logging

from worker.core.config import Settings
from worker.core.logs import event
from worker.core.masking import mask_addresses_in
from worker.engine import queue_sql as q
from worker.engine.classify import Reply, Verdict
from worker.engine.database import Pool, fetch_scalar
from worker.engine.outcomes import Result
from worker.engine.queue_sql import CLOSE_CIRCUIT, OPEN_CIRCUIT, TAKE_PROBE
from worker.engine.sender_book import Sender, SenderBook

log = logging.getLogger("mailroom.worker")


class SenderHealth:
    """Suspends sender accounts, opens, probes and closes their circuits; counts MAIL FROM refusals in a
    row per sender."""

    def __init__(self, pool: Pool, settings: Settings) -> None:
        self.pool = pool
        self.settings = settings
        self._mail_refusals: dict[int, int] = {}

    async def after_attempt(self, sender: Sender, outcome: Result, book: SenderBook) -> bool:
        """Act on what an attempt says about the sender; False when its batch must stop (suspended,
        circuit open)."""
        reply = outcome.attempt.reply
        if outcome.verdict is Verdict.AUTH:
            await self.suspend(sender, reply)
            book.forget()
            return False
        if outcome.verdict is Verdict.SENDER:
            if not self.counts_as_sender_fault(sender, reply):
                return True
            await self.open(sender, reply)
            book.set_aside(sender.id)
            book.forget()
            return False
        if reply.phase in ("rcpt", "data"):
            # The relay took MAIL FROM: it is reachable, whatever it thinks of this recipient or message.
            self.answered(sender)
            if sender.circuit_state != "closed":
                await self.close(sender)
                book.forget()
        return True

    async def suspend(self, sender: Sender, reply: Reply) -> None:
        """Authentication failed: suspend the sender account (an operator resumes it)."""
        reason = mask_addresses_in(f"authentication failed: {reply.said()}")[:500]
        # One failed login per connection in flight: the first suspends and says so, the rest are quiet.
        if await fetch_scalar(self.pool, q.SUSPEND_SENDER, {"sender": sender.id, "reason": reason}) is None:
            return
        log.error(
            "sender account %s suspended: %s",
            sender.name,
            reason,
            extra=event("sender_suspended", sender=sender.name, reason=reason),
        )

    async def take_probe(self, sender: Sender) -> bool:
        """For a sender whose circuit is not closed: whether this worker may send its one probe email."""
        timeouts = sender.account
        hold = max(30.0, timeouts.connect_timeout + 3 * timeouts.command_timeout + timeouts.data_timeout)
        return bool(await fetch_scalar(self.pool, TAKE_PROBE, (sender.id, hold)))

    def counts_as_sender_fault(self, sender: Sender, reply: Reply) -> bool:
        """Whether a SENDER-verdict reply opens the circuit now: always, but MAIL FROM only N times in a row."""
        if reply.phase != "mail":
            return True
        refusals = self._mail_refusals.get(sender.id, 0) + 1
        self._mail_refusals[sender.id] = refusals
        return refusals >= self.settings.circuit_mail_refusals

    def answered(self, sender: Sender) -> None:
        """The relay took a MAIL FROM: the refusals in a row start again."""
        self._mail_refusals.pop(sender.id, None)

    async def open(self, sender: Sender, reply: Reply) -> None:
        """Open (or keep open) the sender's circuit with the reply as its reason."""
        self._mail_refusals.pop(sender.id, None)
        reason = mask_addresses_in(f"{reply.phase}: {reply.code or 'no reply'} {reply.text}".strip())[:500]
        settings = self.settings
        opened = await fetch_scalar(
            self.pool,
            OPEN_CIRCUIT,
            (sender.id, reason, settings.circuit_base_seconds, settings.circuit_cap_seconds),
        )
        if opened:
            log.warning(
                "sender account %s unreachable, circuit open: %s",
                sender.name,
                reason,
                extra=event("circuit_open", sender=sender.name, reason=reason),
            )

    async def close(self, sender: Sender) -> None:
        """The relay delivered: close the circuit (one line when it was open)."""
        if await fetch_scalar(self.pool, CLOSE_CIRCUIT, (sender.id,)):
            log.warning(
                "sender account %s reachable again, circuit closed",
                sender.name,
                extra=event("circuit_closed", sender=sender.name),
            )
