"""Schema part 80_bounces: a bounced email comes after sent only, and undoing the revision keeps it sent."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from tests.producers.bounces.corpus import sent_email
from tests.worker.helpers import enqueue_many
from worker.core import db
from worker.core.config import Settings
from worker.producers.documents.signatures import add_document, expect_signer, send_reminders


def test_only_a_sent_email_can_turn_bounced(db_url: str) -> None:
    email = sent_email(db_url, "ada@example.com")
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE mailroom.email_queue SET status = 'bounced' WHERE id = %s", (email["id"],))
        row = conn.execute(
            "SELECT sent_at IS NOT NULL, finished_at IS NOT NULL FROM mailroom.email_queue WHERE id = %s",
            (email["id"],),
        ).fetchone()
        assert row == (True, True)
        with pytest.raises(psycopg.errors.CheckViolation, match="cannot move from bounced to pending"):
            conn.execute("UPDATE mailroom.email_queue SET status = 'pending' WHERE id = %s", (email["id"],))
        (other,) = enqueue_many(db_url, 1)
        with pytest.raises(psycopg.errors.CheckViolation, match="cannot move from pending to bounced"):
            conn.execute("UPDATE mailroom.email_queue SET status = 'bounced' WHERE id = %s", (other,))


def test_undoing_the_revision_turns_bounced_email_sent_and_drops_the_bounce_tables(empty_db_url: str) -> None:
    db.upgrade(empty_db_url)
    email = sent_email(empty_db_url, "ada@example.com")
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("UPDATE mailroom.email_queue SET status = 'bounced' WHERE id = %s", (email["id"],))
        conn.execute(
            "INSERT INTO mailroom.bounce_quarantine (reason, raw, raw_size, digest) VALUES ('x', 'x', 1, 'x')"
        )
    db.downgrade(empty_db_url, "0005")
    with psycopg.connect(empty_db_url) as conn:
        assert conn.execute("SELECT status FROM mailroom.email_queue").fetchall() == [("sent",)]
        assert conn.execute(
            "SELECT to_regclass('mailroom.bounce_events'), to_regclass('mailroom.bounce_quarantine')"
        ).fetchone() == (None, None)
    db.upgrade(empty_db_url)
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("UPDATE mailroom.email_queue SET status = 'bounced' WHERE id = %s", (email["id"],))


def test_a_reminder_whose_email_bounced_reads_bounced(
    conn: psycopg.Connection[dict[str, Any]], settings: Settings
) -> None:
    add_document(conn, "policy", title="Policy", url="https://example.com/policy.pdf")
    expect_signer(conn, "policy", "ada@example.com", name="Ada", locale="en", settings=settings)
    send_reminders(conn, "policy", datetime(2026, 11, 21, 9, 0, tzinfo=UTC), settings=settings)
    conn.execute(
        "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 't', lease_token = gen_random_uuid(),"
        " lease_expires_at = now() + interval '1 minute'"
    )
    conn.execute("UPDATE mailroom.email_queue SET status = 'sent', sent_at = now()")
    conn.execute(
        "UPDATE mailroom.email_queue SET status = 'bounced', last_error = 'bounced after delivery: 5.1.1'"
    )
    log = conn.execute("SELECT status, finished_at, error_message FROM mailroom.reminder_logs").fetchone()
    assert log is not None
    assert (log["status"], log["error_message"]) == ("bounced", "bounced after delivery: 5.1.1")
    assert log["finished_at"] is not None
