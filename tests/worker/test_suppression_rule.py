"""The suppression rule, written once (mailroom.suppression_verdict in schema.sql), as each of its callers
applies it: mailroom.suppression_reason, the claim, the retry preview and the reminders, over one table of
cases."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from tests.worker.helpers import add_sender
from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.engine import claim as claiming
from worker.engine import queue_sql
from worker.ops.preview import retry_preview
from worker.producers.documents import reminders
from worker.producers.documents.records import add_document, expect_signer

Conn = psycopg.Connection[dict[str, Any]]
DOC = "policy"


@dataclass(frozen=True)
class Case:
    """An address's listings, the email's kind, and what the rule says of it."""

    name: str
    bounce: tuple[str, int] | None  # its bounce_list row: bounce_type, bounce_count (the last an hour ago)
    unsubscribed: bool
    transactional: bool
    reason: str | None  # why it is not sent; None: it may be
    claimed: str  # the email's status after one claim
    address: str = "ada@example.com"


HARD = "on the bounce list (hard)"
CASES = (
    Case("hard", ("hard", 1), False, True, HARD, "suppressed"),
    Case("complaint", ("complaint", 1), False, True, "on the bounce list (complaint)", "suppressed"),
    Case("manual", ("manual", 1), False, True, "suppressed by an operator (manual)", "suppressed"),
    # under three soft bounces: not suppressed, held by the claim until a day after the last one
    Case("soft once", ("soft", 1), False, True, None, "pending"),
    Case("soft twice", ("soft", 2), False, True, None, "pending"),
    Case("soft three times", ("soft", 3), False, True, "on the bounce list (soft, 3 times)", "suppressed"),
    Case("unsubscribed, transactional", None, True, True, None, "assigned"),
    Case("unsubscribed, not transactional", None, True, False, "unsubscribed", "suppressed"),
    Case("nothing listed", None, False, False, None, "assigned"),
    Case("upper-case address", ("hard", 1), False, True, HARD, "suppressed", "Ada@Example.COM"),
    Case("upper-case, unsubscribed", None, True, False, "unsubscribed", "suppressed", "Ada@Example.COM"),
)


def _enqueue(conn: Conn, case: Case, settings: Settings) -> int:
    request = EmailRequest(to=case.address, subject="Hi", text="b", transactional=case.transactional)
    return enqueue(conn, request, settings=settings)


def _list(conn: Conn, case: Case) -> None:
    """Put the address on the lists after its emails were enqueued: the enqueue let them through."""
    address = case.address.lower()
    if case.bounce is not None:
        conn.execute(
            "INSERT INTO mailroom.bounce_list (email, bounce_type, bounce_count, first_bounced_at, last_bounced_at)"
            " VALUES (%s, %s, %s, now() - interval '1 hour', now() - interval '1 hour')",
            (address, *case.bounce),
        )
    if case.unsubscribed:
        conn.execute("INSERT INTO mailroom.unsubscribe_list (email, source) VALUES (%s, 'link')", (address,))


def _rule(conn: Conn, address: str, transactional: bool) -> str | None:
    row = conn.execute("SELECT mailroom.suppression_reason(%s, %s) AS r", (address, transactional)).fetchone()
    assert row is not None
    return None if row["r"] is None else str(row["r"])


def _reminder_skip(conn: Conn, settings: Settings) -> str | None:
    """Why the reminders skip the signer (None: a reminder is queued); nothing is kept."""
    result = reminders.send_reminders(conn, DOC, settings=settings)
    conn.rollback()
    return result.skipped.get("ada@example.com")


async def _claim(db_url: str, sender: int, email_id: int) -> tuple[str, str | None]:
    async with AsyncConnectionPool(db_url, open=False, kwargs={"autocommit": True}) as pool:
        await pool.open()
        await claiming.take(pool, claiming.Lease("t:1", 60, 5 * 86400), sender, 10)
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT status, suppression_reason FROM mailroom.email_queue WHERE id = %s", (email_id,)
        ).fetchone()
    assert row is not None
    return row[0], row[1]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_every_caller_of_the_suppression_rule_agrees(
    db_url: str, settings: Settings, case: Case
) -> None:
    sender = add_sender(db_url, 2525)  # never connected to: only claimed for
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        claimed = _enqueue(conn, case, settings)
        retried = _enqueue(conn, case, settings)
        conn.execute(
            "UPDATE mailroom.email_queue SET status = 'failed', last_error = '550 x' WHERE id = %s",
            (retried,),
        )
        add_document(conn, DOC, title="Policy")
        expect_signer(conn, DOC, case.address, name="Ada", settings=settings)
        _list(conn, case)
        conn.commit()
        told: dict[str, object] = {
            "suppression_reason": _rule(conn, case.address, case.transactional),
            "retry preview": retry_preview(conn, [retried]).suppressed,
        }
        # A reminder is transactional email: it goes by the rule for that.
        reminder_rule = _rule(conn, case.address, reminders.TRANSACTIONAL)
        told["reminders"] = _reminder_skip(conn, settings)
    told["claim"] = await _claim(db_url, sender, claimed)
    assert told == {
        "suppression_reason": case.reason,
        "retry preview": int(case.reason is not None),
        "reminders": None if reminder_rule is None else f"address is {reminder_rule}",
        "claim": (case.claimed, case.reason),
    }
    assert reminder_rule == (case.reason if case.transactional else None)


def test_the_claim_applies_the_rule_inlined_not_as_a_call_per_row(conn: Conn) -> None:
    # A SECURITY DEFINER, a SET search_path, STRICT or a FROM in mailroom.suppression_verdict would turn
    # it into a function call per claimed row (bench.claim_suppression measures what that costs).
    params = {"limit": 10, "owner": "t", "token": "00000000-0000-0000-0000-000000000001", "lease": 60,
              "sender": 1, "lifetime": 86400, "expired": "x", "own_expired": "x", "ahead": 0,
              "stream": "transactional", "domains": []}  # fmt: skip
    plan = "\n".join(r["QUERY PLAN"] for r in conn.execute("EXPLAIN (VERBOSE) " + queue_sql.CLAIM, params))
    assert "'on the bounce list ('::text || b.bounce_type)" in plan
    assert "suppression_verdict" not in plan
