"""The engine finds an email its claim still holds through the primary key, whatever the planner's
statistics say of assigned email (the note above COMPLETE in `worker.engine.queue_sql`).

Statistics taken while every email was pending (a queue loaded in bulk and analyzed, as before any
drain) made the planner read email_queue_lease_idx, every assigned email, for each email looked up:
a cost per email that grew with the emails in flight. Each statement here runs for one email beside
IN_FLIGHT others, with the plan psycopg uses for its first runs (custom) and the one PostgreSQL may
keep after them (generic), and how it read the queue is looked at.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from tests.worker.helpers import add_sender, enqueue_many
from worker.engine import queue_sql as q

IN_FLIGHT = 600
TOKEN = uuid.UUID("00000000-0000-0000-0000-0000000011fe")


def _statements(email_id: int, sender: int) -> dict[str, tuple[str, dict[str, Any]]]:
    sent = {
        "id": email_id, "token": str(TOKEN), "sender": sender, "code": 250, "enhanced": "2.0.0",
        "response": "2.0.0 queued", "duration_ms": 3, "message_id": f"<{email_id}@test>",
    }  # fmt: skip
    failure = {
        "id": email_id, "outcome": "retry", "log_outcome": "transient", "code": 451, "enhanced": "4.3.0",
        "response": "try later", "duration_ms": 3, "retry_at": datetime.now(UTC), "message_id": None,
        "sender": sender, "token": TOKEN, "owner": "host:1",
    }  # fmt: skip
    return {
        "JOURNAL_SENT": (q.JOURNAL_SENT, {"sent": json.dumps([sent]), "owner": "host:1"}),
        "COMPLETE": (q.COMPLETE, failure),
        "RELEASE": (q.RELEASE, {"ids": [email_id], "token": TOKEN}),
        "UNCLAIM": (q.UNCLAIM, {"ids": [email_id], "token": TOKEN}),
    }


def _in_flight(db_url: str, port: int) -> tuple[int, int]:
    """IN_FLIGHT emails, analyzed while pending, then all assigned under TOKEN: one id, the sender."""
    sender = add_sender(db_url, port)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body)"
            " SELECT 'u' || i || '@example.com', 'Hello', 'Body' FROM generate_series(1, %s) AS i",
            (IN_FLIGHT,),
        )
        # The statistics of a queue analyzed while all was pending, kept: no autovacuum run between.
        conn.execute("ALTER TABLE mailroom.email_queue SET (autovacuum_enabled = false)")
        conn.execute("ANALYZE mailroom.email_queue")
        conn.execute(
            "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 'host:1', lease_token = %s,"
            " lease_expires_at = now() + interval '1 hour', sender_account_id = %s",
            (TOKEN, sender),
        )
        row = conn.execute("SELECT max(id) FROM mailroom.email_queue").fetchone()
    assert row is not None
    return int(row[0]), sender


def _reads(
    conn: psycopg.Connection[Any], name: str, sql: str, params: dict[str, Any], mode: str
) -> tuple[set[str], int]:
    """How the statement, run once with `params` under plan_cache_mode `mode`, read the queue: the
    scans it used on email_queue (an index's name, or the scan's kind) and the rows they read and
    then filtered out."""
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in order:
            order.append(match.group(1))
        return f"${order.index(match.group(1)) + 1}"

    prepared = re.sub(r"%\((\w+)\)s", number, sql)
    with conn.transaction(force_rollback=True):
        conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
        conn.execute(f"PREPARE {name} AS {prepared}")
        # Literal arguments (a client-side cursor): EXECUTE takes expressions, not bind parameters.
        with psycopg.ClientCursor(conn) as cursor:
            arguments = ", ".join("%s" for _ in order)
            cursor.execute(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {name}({arguments})",
                [params[key] for key in order],
            )
            row = cursor.fetchone()
        conn.execute(f"DEALLOCATE {name}")
    assert row is not None
    nodes = _nodes(row[0][0]["Plan"])
    scans = {n["Index Name"] for n in nodes if n.get("Index Name", "").startswith("email_queue")}
    scans |= {
        n["Node Type"] for n in nodes if n.get("Relation Name") == "email_queue" and "Seq" in n["Node Type"]
    }
    filtered = sum(
        int(n.get("Rows Removed by Filter", 0)) + int(n.get("Rows Removed by Index Recheck", 0))
        for n in nodes
        if n.get("Relation Name") == "email_queue"
    )
    return scans, filtered


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(node for child in plan.get("Plans", []) for node in _nodes(child))]


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
def test_looking_up_a_held_email_reads_no_other_email_in_flight(
    db_url: str, smtp_sink: Any, mode: str
) -> None:
    email_id, sender = _in_flight(db_url, smtp_sink.port)
    with psycopg.connect(db_url) as conn:
        touched = {
            name: _reads(conn, name.lower(), sql, params, mode)
            for name, (sql, params) in _statements(email_id, sender).items()
        }
    # Through the primary key (an index scan or a bitmap of it) each, and no other email read and
    # filtered out.
    assert touched == {name: ({"email_queue_pkey"}, 0) for name in touched}


def test_the_journal_neither_locks_nor_waits_for_an_email_its_claim_no_longer_holds(
    db_url: str, smtp_sink: Any
) -> None:
    """An email rescued from this worker's claim and being claimed by another worker (its row locked,
    the claim not yet committed): journalling it under the old claim finds it not held at once, and
    the other claim's transaction is not waited for."""
    sender = add_sender(db_url, smtp_sink.port)
    [email_id] = enqueue_many(db_url, 1)  # pending: rescued from TOKEN's claim
    sent = {
        "id": email_id, "token": str(TOKEN), "sender": sender, "code": 250, "enhanced": "2.0.0",
        "response": "2.0.0 queued", "duration_ms": 3, "message_id": f"<{email_id}@test>",
    }  # fmt: skip
    with psycopg.connect(db_url) as claiming, psycopg.connect(db_url, autocommit=True) as journal:
        # Another worker's claim, under way: the email's row locked as the claim's SKIP LOCKED locks it.
        claiming.execute("SELECT 1 FROM mailroom.email_queue WHERE id = %s FOR UPDATE", (email_id,))
        journal.execute("SET lock_timeout = '5s'")  # a wait would fail the statement, not hang the test
        rows = journal.execute(q.JOURNAL_SENT, {"sent": json.dumps([sent]), "owner": "host:1"}).fetchall()
        claiming.rollback()
    assert rows == []
