"""What an attempt comes to (`worker.engine.outcomes`), without a database: outcome kinds, quota
charges, a failure of ours; and the claimed row the message builder reads (`worker.engine.rows`)."""

from __future__ import annotations

import pytest

from tests.unit.worker.claimed import email
from worker.engine.classify import Reply, Verdict
from worker.engine.outcomes import OutcomeKind, decide, failed_locally, outcome_kind
from worker.engine.rows import ClaimedEmail
from worker.engine.smtp import Attempt


@pytest.mark.parametrize(
    ("verdict", "retries_left", "kind"),
    [
        (Verdict.SENT, True, OutcomeKind.SENT),
        (Verdict.TRANSIENT, True, OutcomeKind.RETRY),
        (Verdict.TRANSIENT, False, OutcomeKind.FAILED),
        (Verdict.LOCAL, True, OutcomeKind.RETRY),
        (Verdict.PERMANENT, True, OutcomeKind.FAILED),
        (Verdict.BOUNCE, True, OutcomeKind.FAILED),
        (Verdict.AUTH, False, OutcomeKind.RELEASE),
        (Verdict.SENDER, False, OutcomeKind.RELEASE),
    ],
)
def test_each_verdict_has_one_outcome_kind(verdict: Verdict, retries_left: bool, kind: OutcomeKind) -> None:
    assert outcome_kind(verdict, email(retry_count=0 if retries_left else 3)) is kind


@pytest.mark.parametrize(
    ("reply", "charged"),
    [
        (Reply(250, "2.0.0 OK", "data"), True),
        (Reply(552, "5.3.4 Message too big", "data"), True),  # the provider counted it
        (Reply(550, "5.1.1 User unknown", "rcpt"), False),
        (Reply(451, "4.3.0 Try later", "data"), False),
        (Reply(None, "connection refused", "connect"), False),
    ],
)
def test_only_a_send_or_a_permanent_refusal_is_charged_to_the_quota(reply: Reply, charged: bool) -> None:
    assert decide(email(), Attempt(reply, 5), "<m@x>").charged is charged


def test_a_failure_of_ours_fails_the_email_alone_with_the_reason() -> None:
    result = failed_locally(email(), "cannot build the message: bad header")
    assert (result.kind, result.verdict, result.attempt.reply.phase) == (
        OutcomeKind.FAILED,
        Verdict.LOCAL,
        "build",
    )


def test_a_claimed_email_reads_as_the_plain_row_the_message_builder_takes() -> None:
    row = email().as_row()
    assert row["id"] == 7 and row["recipient_email"] == "a@example.com" and row["dropped"] is None
    assert list(row) == [f for f in ClaimedEmail.__slots__]
