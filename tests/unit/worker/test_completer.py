"""The statements the completer (`worker.engine.completer`) records an attempt with, without a database:
their order (the claim row first, the lock order of rescue), which one needs the claim to hold the
email, and what goes on the lists."""

from __future__ import annotations

import uuid

from tests.unit.worker.claimed import email
from worker.engine import queue_sql as q
from worker.engine.classify import Reply
from worker.engine.completer import failure_statements
from worker.engine.outcomes import decide
from worker.engine.smtp import Attempt


def test_a_permanent_refusal_is_charged_on_the_claim_row_before_the_email_completes() -> None:
    token = uuid.uuid4()
    result = decide(email(), Attempt(Reply(552, "5.3.4 Message too big", "data"), 5), "<m@x>")
    statements = failure_statements(result, None, 1, token, "w:1")
    assert [s.sql for s in statements] == [q.COUNT_USED, q.COMPLETE, q.COUNT_USAGE]
    assert [s.needs_held for s in statements] == [False, True, False]
    assert statements[1].params["outcome"] == "failed" and statements[1].params["log_outcome"] == "permanent"


def test_a_bad_mailbox_goes_on_the_bounce_list_and_is_not_charged() -> None:
    result = decide(email(), Attempt(Reply(550, "5.1.1 User unknown", "rcpt"), 5), "<m@x>")
    statements = failure_statements(result, None, 1, uuid.uuid4(), "w:1")
    assert [s.sql for s in statements] == [q.COMPLETE, q.RECORD_BOUNCES, q.COUNT_USAGE]
    assert statements[1].params["emails"] == ["a@example.com"] and statements[1].params["campaigns"] == ["c1"]
