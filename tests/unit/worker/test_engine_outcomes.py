"""Executing and completing, without a database: outcome kinds, quota charges, typed rows, the clock."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from worker.engine import queue_sql as q
from worker.engine.classify import Reply, Verdict
from worker.engine.clock import SYSTEM, MovedClock
from worker.engine.completer import failure_statements
from worker.engine.outcomes import OutcomeKind, decide, failed_locally, outcome_kind
from worker.engine.rows import ClaimedEmail
from worker.engine.smtp import Attempt


def email(retry_count: int = 0, max_retries: int = 3) -> ClaimedEmail:
    return ClaimedEmail(
        id=7, status="assigned", last_error=None, recipient_email="a@example.com", recipient_name=None,
        subject="Hi", text_body="Hello", html_body=None, headers={}, created_at=datetime.now(UTC),
        retry_count=retry_count, max_retries=max_retries, campaign_id="c1", suppression_reason=None,
        to_extra=None, cc=None, bcc=None, reply_to=None, dropped=None,
    )  # fmt: skip


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


def test_a_permanent_refusal_is_charged_on_the_claim_row_before_the_email_completes() -> None:
    token = uuid.uuid4()
    result = decide(email(), Attempt(Reply(552, "5.3.4 Message too big", "data"), 5), "<m@x>")
    statements = failure_statements(result, None, 1, token, "w:1")
    assert [s for s, _ in statements] == [q.COUNT_USED, q.COMPLETE, q.COUNT_USAGE]
    assert statements[1][1]["outcome"] == "failed" and statements[1][1]["log_outcome"] == "permanent"


def test_a_bad_mailbox_goes_on_the_bounce_list_and_is_not_charged() -> None:
    result = decide(email(), Attempt(Reply(550, "5.1.1 User unknown", "rcpt"), 5), "<m@x>")
    statements = failure_statements(result, None, 1, uuid.uuid4(), "w:1")
    assert [s for s, _ in statements] == [q.COMPLETE, q.RECORD_BOUNCES, q.COUNT_USAGE]
    assert statements[1][1]["emails"] == ["a@example.com"] and statements[1][1]["campaigns"] == ["c1"]


def test_a_claimed_email_reads_as_the_plain_row_the_message_builder_takes() -> None:
    row = email().as_row()
    assert row["id"] == 7 and row["recipient_email"] == "a@example.com" and row["dropped"] is None
    assert list(row) == [f for f in ClaimedEmail.__slots__]


def test_the_system_clock_leaves_due_times_to_the_database_and_a_moved_one_runs_ahead() -> None:
    clock = MovedClock()
    assert SYSTEM.ahead == 0.0 == clock.ahead
    before = SYSTEM.now()
    clock.advance(3600.0)
    steady = clock.monotonic()
    assert clock.ahead == 3600.0
    assert clock.now() - before >= timedelta(seconds=3600)
    # A wall clock that jumps leaves the steady one be: deadlines and lease renewal do not jump with it.
    assert clock.monotonic() - steady < 60
