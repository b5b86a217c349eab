"""The engine's counting points: what one result or claim adds to the process's metrics (`worker.core.metrics`)."""

from __future__ import annotations

from worker.core import metrics
from worker.engine.classify import Verdict
from worker.engine.clock import Clock
from worker.engine.outcomes import OutcomeKind, Result

# Whose fault a verdict is. A transient reply is the email's too: its recipient's server deferred it.
_FAULT = {
    Verdict.SENT: "none",
    Verdict.TRANSIENT: "email",
    Verdict.PERMANENT: "email",
    Verdict.BOUNCE: "email",
    Verdict.AUTH: "sender",
    Verdict.SENDER: "sender",
    Verdict.LOCAL: "ours",
}

_OUTCOME = {
    OutcomeKind.SENT: "sent",
    OutcomeKind.RETRY: "deferred",
    OutcomeKind.FAILED: "failed",
    OutcomeKind.RELEASE: "released",
}


def fault(verdict: Verdict) -> str:
    """Whose fault an attempt's verdict is: email, sender, ours or none."""
    return _FAULT[verdict]


def outcome(result: Result) -> str:
    """The word `mailroom_emails_total{outcome=...}` counts a result under (a bad mailbox: bounced)."""
    if result.kind is OutcomeKind.FAILED and result.verdict is Verdict.BOUNCE:
        return "bounced"
    return _OUTCOME[result.kind]


def count_result(sender: str, result: Result, clock: Clock) -> None:
    """Count one executed email: its outcome and fault, its reply's class, its transaction time and, when
    sent, how long after its enqueue the relay accepted it."""
    if not metrics.enabled():
        return
    reply = result.attempt.reply
    metrics.count_attempt(
        sender, outcome(result), fault(result.verdict), reply.code, result.attempt.duration_ms / 1000
    )
    if result.kind is OutcomeKind.SENT:
        metrics.observe_accepted(sender, (clock.now() - result.email.created_at).total_seconds())


def count_claim(sender: str, emails: int, suppressed: int, expired: int) -> None:
    """Count one claim: its size when it got email, the emails it suppressed or expired."""
    if not metrics.enabled():
        return
    if emails:
        metrics.observe_claim(emails)
    metrics.count_email(sender, "suppressed", "none", suppressed)
    # Past the queue lifetime: nothing could deliver it in time (mostly a sender outage), never its content.
    metrics.count_email(sender, "expired", "sender", expired)
