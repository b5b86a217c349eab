"""The soft-bounce policy, enforced at claim time: an address that soft-bounced less than a day ago waits
for that day to pass (no attempt charged); one that soft-bounced three times is treated as hard."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.worker.helpers import add_sender, run_until_drained
from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.devtools.sink import RunningSink

SOFT = "full@example.com"
FINE = "fine@example.com"


def _soft_bounce(db_url: str, count: int, hours_ago: float) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO mailroom.bounce_list (email, bounce_type, reason, bounce_count, first_bounced_at,"
            " last_bounced_at) VALUES (%s, 'soft', '452 4.2.2 mailbox full', %s,"
            " now() - make_interval(hours => %s), now() - make_interval(hours => %s))",
            (SOFT, count, hours_ago, hours_ago),
        )


def _enqueue_both(db_url: str, settings: Settings) -> tuple[int, int]:
    with psycopg.connect(db_url) as conn:
        held = enqueue(conn, EmailRequest(to=SOFT, subject="Hi", text="b"), settings=settings)
        fine = enqueue(conn, EmailRequest(to=FINE, subject="Hi", text="b"), settings=settings)
    return held, fine


def _row(db_url: str, email_id: int) -> dict[str, Any]:
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        row = conn.execute(
            "SELECT q.status, q.retry_count, q.lease_token, q.suppression_reason,"
            " q.scheduled_for - b.last_bounced_at AS wait"
            " FROM mailroom.email_queue q LEFT JOIN mailroom.bounce_list b ON b.email = q.recipient_email"
            " WHERE q.id = %s",
            (email_id,),
        ).fetchone()
    assert row is not None
    return row


async def test_an_address_that_soft_bounced_within_a_day_waits_for_the_day_uncharged(
    db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    _soft_bounce(db_url, count=1, hours_ago=1)
    held, _fine = _enqueue_both(db_url, settings)
    assert await run_until_drained(db_url, settings) == 1
    assert [m.rcpt_tos[0] for m in smtp_sink.messages] == [FINE]
    row = _row(db_url, held)
    assert (row["status"], row["retry_count"], row["lease_token"]) == ("pending", 0, None)
    assert row["wait"] == timedelta(days=1)


@pytest.mark.parametrize("count", [1, 2])
async def test_a_day_after_a_soft_bounce_the_address_is_mailed_again(
    db_url: str, settings: Settings, smtp_sink: RunningSink, count: int
) -> None:
    add_sender(db_url, smtp_sink.port)
    _soft_bounce(db_url, count=count, hours_ago=25)
    _enqueue_both(db_url, settings)
    assert await run_until_drained(db_url, settings) == 2
    assert sorted(m.rcpt_tos[0] for m in smtp_sink.messages) == [FINE, SOFT]


async def test_the_third_soft_bounce_makes_the_address_hard(
    db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    _soft_bounce(db_url, count=3, hours_ago=48)
    held, _fine = _enqueue_both(db_url, settings)
    assert await run_until_drained(db_url, settings) == 1
    row = _row(db_url, held)
    assert (row["status"], row["suppression_reason"]) == ("suppressed", "on the bounce list (soft, 3 times)")
