"""The retention steps' one loop: rows past the cutoff counted on a dry run, else deleted a chunk per transaction."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from worker.ops.chunked_delete import delete_in_chunks

COUNT = "SELECT count(*) FROM mailroom.inbox WHERE received_at < %s"
DELETE = """
DELETE FROM mailroom.inbox WHERE (message_id, consumer) IN
    (SELECT message_id, consumer FROM mailroom.inbox WHERE received_at < %s LIMIT %s)
"""


def _inbox(conn: psycopg.Connection[Any], old: int, new: int, now: datetime) -> None:
    rows = [(f"old-{i}", now - timedelta(days=30)) for i in range(old)]
    rows += [(f"new-{i}", now) for i in range(new)]
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO mailroom.inbox (message_id, consumer, event_type, payload, received_at)"
            " VALUES (%s, 'orders', 'order_placed', '{}', %s)",
            rows,
        )
    conn.commit()


def _left(conn: psycopg.Connection[Any]) -> list[str]:
    return sorted(r["message_id"] for r in conn.execute("SELECT message_id FROM mailroom.inbox").fetchall())


def test_a_dry_run_counts_and_deletes_nothing(conn: psycopg.Connection[Any]) -> None:
    now = datetime.now(UTC)
    _inbox(conn, old=5, new=2, now=now)
    done = delete_in_chunks(
        conn, count=COUNT, delete=DELETE, cutoff=now - timedelta(days=1), chunk=2, dry_run=True
    )
    assert done == 5
    assert len(_left(conn)) == 7


def test_rows_past_the_cutoff_go_over_several_chunks_and_the_rest_stay(conn: psycopg.Connection[Any]) -> None:
    now = datetime.now(UTC)
    _inbox(conn, old=5, new=2, now=now)
    # 5 rows in chunks of 2: two full chunks, one short one that ends the loop.
    done = delete_in_chunks(
        conn, count=COUNT, delete=DELETE, cutoff=now - timedelta(days=1), chunk=2, dry_run=False
    )
    assert done == 5
    # Each chunk committed on its own: nothing is left open.
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert _left(conn) == ["new-0", "new-1"]


def test_an_exact_multiple_of_the_chunk_ends_after_one_empty_chunk(conn: psycopg.Connection[Any]) -> None:
    now = datetime.now(UTC)
    _inbox(conn, old=4, new=0, now=now)
    done = delete_in_chunks(
        conn, count=COUNT, delete=DELETE, cutoff=now - timedelta(days=1), chunk=2, dry_run=False
    )
    assert done == 4
    assert _left(conn) == []
