"""What one attempt means for its email: an outcome kind, and the result value executing an email returns."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from worker.engine.attempts import Attempt
from worker.engine.classify import Reply, Verdict, classify
from worker.engine.rows import ClaimedEmail


class OutcomeKind(enum.Enum):
    """What becomes of an email after one attempt (the values are those `queue_sql.COMPLETE` reads)."""

    SENT = "sent"  # the relay answered 2xx to the end of DATA
    RETRY = "retry"  # pending again after a backoff, one attempt charged
    FAILED = "failed"  # for good: a permanent refusal, a bad mailbox, retries used up, or our own error
    RELEASE = "release"  # the sender's fault: back to the queue, the email's retry budget untouched


class FailureKind(enum.Enum):
    """Why the engine failed an email, as `email_queue.failure_kind` records it (last_error says it to people)."""

    EXPIRED = "expired"  # in the queue longer than the queue lifetime
    ATTEMPT = "attempt"  # an attempt's outcome failed it (`OutcomeKind.FAILED`)


@dataclass(frozen=True, slots=True)
class Result:
    """One executed email: which email, what became of it and why, the reply and how long it took.

    A value only: the completer (`worker.engine.completer`) records it."""

    email: ClaimedEmail
    kind: OutcomeKind
    verdict: Verdict
    attempt: Attempt
    message_id: str | None

    @property
    def charged(self) -> bool:
        """Whether the provider counted it against the sender's quota: a send, or a permanent refusal."""
        return self.kind is OutcomeKind.SENT or self.verdict is Verdict.PERMANENT


def outcome_kind(verdict: Verdict, email: ClaimedEmail) -> OutcomeKind:
    """The email's outcome for a verdict: a transient or local failure is retried while retries are left."""
    if verdict is Verdict.SENT:
        return OutcomeKind.SENT
    if verdict in (Verdict.AUTH, Verdict.SENDER):
        return OutcomeKind.RELEASE
    if verdict in (Verdict.TRANSIENT, Verdict.LOCAL) and email.retry_count < email.max_retries:
        return OutcomeKind.RETRY
    return OutcomeKind.FAILED


def decide(email: ClaimedEmail, attempt: Attempt, message_id: str) -> Result:
    """Classify the reply of an attempt and choose the email's outcome."""
    verdict = attempt.verdict or classify(attempt.reply)
    return Result(email, outcome_kind(verdict, email), verdict, attempt, message_id)


def failed_locally(email: ClaimedEmail, reason: str) -> Result:
    """An attempt that failed before any SMTP reply, for a reason of ours: the email fails, nothing else."""
    attempt = Attempt(Reply(None, reason, "build"), 0)
    return Result(email, OutcomeKind.FAILED, Verdict.LOCAL, attempt, None)
