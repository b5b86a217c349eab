"""Daily quota reservations in SQL: counted per UTC day, handed back to the day they were taken on."""

from __future__ import annotations

from typing import Any

import psycopg

from worker.engine.queue_sql import RELEASE_QUOTA, RESERVE

SENDER = (
    "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, daily_limit)"
    " VALUES ('q', 'noreply@example.org', '127.0.0.1', 25, 10) RETURNING id"
)


def _usage(conn: psycopg.Connection[Any], sender: int) -> dict[str, int]:
    rows = conn.execute(
        "SELECT day::text AS day, sent FROM mailroom.sender_usage WHERE sender_account_id = %s", (sender,)
    ).fetchall()
    return {r["day"]: r["sent"] for r in rows}


def test_reserving_past_the_limit_grants_the_rest_and_pauses_the_sender(
    conn: psycopg.Connection[Any],
) -> None:
    sender = conn.execute(SENDER).fetchone()["id"]
    granted, day = conn.execute(RESERVE, (sender, 8)).fetchone().values()
    assert granted == 8
    assert conn.execute(RESERVE, (sender, 8)).fetchone()["granted"] == 2
    status = conn.execute("SELECT status FROM mailroom.sender_accounts WHERE id = %s", (sender,)).fetchone()
    assert status == {"status": "paused_limit_reached"}
    assert _usage(conn, sender) == {str(day): 10}


def test_quota_reserved_before_midnight_is_refunded_to_that_day(conn: psycopg.Connection[Any]) -> None:
    sender = conn.execute(SENDER).fetchone()["id"]
    # A batch reserved 5 yesterday (its sender then reached its limit); today 3 are in use already.
    conn.execute(
        "INSERT INTO mailroom.sender_usage (sender_account_id, day, sent) VALUES"
        " (%(s)s, (now() AT TIME ZONE 'UTC')::date - 1, 10), (%(s)s, (now() AT TIME ZONE 'UTC')::date, 3)",
        {"s": sender},
    )
    conn.execute(
        "UPDATE mailroom.sender_accounts SET status = 'paused_limit_reached',"
        " limit_reached_on = (now() AT TIME ZONE 'UTC')::date - 1 WHERE id = %s",
        (sender,),
    )
    yesterday = conn.execute("SELECT (now() AT TIME ZONE 'UTC')::date - 1 AS d").fetchone()["d"]
    conn.execute(RELEASE_QUOTA, (sender, 4, yesterday))
    usage = _usage(conn, sender)
    assert usage[str(yesterday)] == 6
    # Today's counter is untouched: refunding it would let today exceed its limit by 4.
    assert sorted(usage.values()) == [3, 6]
