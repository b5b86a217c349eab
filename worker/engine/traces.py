"""The engine's spans: each email's delivery continues the trace of the code that enqueued it.

Used only when tracing is on (`worker.core.tracing.active`): a claim then reads its emails' stored
trace contexts with one query, and each email gets

    mailroom.deliver         child of the enqueuing span (stored traceparent), linked to the claim's span
      mailroom.send          the SMTP (or API) transaction (`worker.engine.execute`): reply code, never the text
      mailroom.record        the completer recording the result (`worker.engine.completer`)
    mailroom.message.build   building and DKIM-signing the message, a turn ahead (sibling of deliver)

A claim is a batch of emails from many traces: `mailroom.claim` is a trace of its own, which the
delivery spans link to. A stored context that cannot be read starts no parent: the email is
delivered all the same, in a trace of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from worker.core import tracing
from worker.engine.claim import Claim
from worker.engine.database import Borrowed
from worker.engine.outcomes import OutcomeKind, Result
from worker.engine.rows import ClaimedEmail

if TYPE_CHECKING:
    from worker.core.message import Envelope
    from worker.engine.attempts import Attempt

# Only the emails that carry something: most email enqueued outside a trace costs no row here.
STORED = """
SELECT id, traceparent, tracestate, correlation_id FROM mailroom.email_queue
WHERE id = ANY(%s) AND (traceparent IS NOT NULL OR correlation_id IS NOT NULL)
"""


@dataclass(frozen=True, slots=True)
class Stored:
    """What an email carries from the code that enqueued it."""

    parent: Any  # a context from `tracing.parent_from`, or None
    correlation_id: str | None


_NONE = Stored(None, None)


class ClaimTraces:
    """The spans of one claim's emails (made only while tracing is on)."""

    def __init__(self, stored: dict[int, Stored], claim_span: Any, sender_id: int) -> None:
        self._stored = stored
        self._links = tracing.link_to(claim_span)
        self._sender = sender_id

    @classmethod
    async def load(
        cls, db: Borrowed, emails: Sequence[ClaimedEmail], claim_span: Any, sender_id: int
    ) -> ClaimTraces:
        """Read the claimed emails' stored trace contexts (one query)."""
        conn = await db.get()
        cur = await conn.execute(STORED, ([e.id for e in emails],))
        stored = {
            int(row[0]): Stored(tracing.parent_from(row[1], row[2]), _correlation(row[3]))
            for row in await cur.fetchall()
        }
        return cls(stored, claim_span, sender_id)

    def build(self, build: Any, email: ClaimedEmail) -> Envelope | Exception:
        """`worker.engine.execute.build` in a span under the email's enqueuing span."""
        with tracing.span(
            "mailroom.message.build",
            {"mailroom.email.id": email.id},
            parent=self._stored.get(email.id, _NONE).parent,
        ) as span:
            built: Envelope | Exception = build(email)
            if isinstance(built, Exception):
                tracing.failed(span, type(built).__name__)
            else:
                tracing.note(
                    span,
                    {"mailroom.message.dkim": _signed(built), "mailroom.message.bytes": len(built.content)},
                )
            return built

    @contextmanager
    def delivering(self, email: ClaimedEmail) -> Iterator[Any]:
        """The email's delivery span, current for the block; its log lines carry its ids."""
        stored = self._stored.get(email.id, _NONE)
        attributes: dict[str, str | int | bool] = {
            "mailroom.email.id": email.id,
            "mailroom.sender.id": self._sender,
            "mailroom.email.attempt": email.retry_count + 1,
        }
        if stored.correlation_id is not None:
            attributes["mailroom.correlation_id"] = stored.correlation_id
        if email.campaign_id is not None:
            attributes["mailroom.campaign_id"] = email.campaign_id
        with (
            tracing.about_email(email.id, stored.correlation_id),
            tracing.span("mailroom.deliver", attributes, parent=stored.parent, links=self._links) as span,
        ):
            yield span


def claim_attributes(claim: Claim) -> dict[str, int]:
    """What a claim's span says of it: how many emails it saw, kept, suppressed and expired."""
    return {
        "mailroom.claim.seen": claim.seen,
        "mailroom.claim.size": len(claim.emails),
        "mailroom.claim.suppressed": claim.suppressed,
        "mailroom.claim.expired": claim.expired,
    }


def attempt_attributes(attempt: Attempt) -> dict[str, str | int | bool]:
    """What a send span says of its attempt: the reply's code and enhanced code, the phase it ended in,
    its duration, how many copies were refused. Never the reply's text: it may quote the address."""
    reply = attempt.reply
    attributes: dict[str, str | int | bool] = {
        "smtp.phase": reply.phase,
        "mailroom.send.duration_ms": attempt.duration_ms,
    }
    if reply.code is not None:
        attributes["smtp.reply.code"] = reply.code
    if reply.enhanced is not None:
        attributes["smtp.reply.enhanced_code"] = reply.enhanced
    if attempt.many:
        attributes["mailroom.send.copies_refused"] = len(attempt.refused)
    return attributes


def outcome(span: Any, result: Result) -> None:
    """The result of a delivery on its span: outcome, verdict and reply code (never the reply's text)."""
    if span is None:
        return
    attributes: dict[str, str | int | bool] = {
        "mailroom.outcome": result.kind.value,
        "mailroom.verdict": result.verdict.value,
    }
    if result.attempt.reply.code is not None:
        attributes["smtp.reply.code"] = result.attempt.reply.code
    tracing.note(span, attributes)
    if result.kind is OutcomeKind.FAILED:
        tracing.failed(span, result.verdict.value)


def _signed(envelope: Envelope) -> bool:
    return envelope.content.startswith(b"DKIM-Signature:")


def _correlation(value: object) -> str | None:
    # Checked by the database (length, no control characters); a log line must not break on one anyway.
    if isinstance(value, str) and 0 < len(value) <= 255 and value.isprintable():
        return value
    return None
