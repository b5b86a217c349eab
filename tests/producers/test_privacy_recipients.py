"""Privacy reaches every recipient an email names: more To addresses, Cc, Bcc, Reply-To, the per-recipient
outcomes and the archives."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from tests.producers.helpers import NOW
from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.ops.archive_files import archive_directory, read_archive
from worker.ops.privacy import erase_address, export_address
from worker.ops.retention import run_maintenance

ADA = "ada@example.com"
CAROL = "carol@example.org"


def _group_email(conn: psycopg.Connection[Any], settings: Settings) -> int:
    return enqueue(
        conn,
        EmailRequest(to=[ADA, "dan@example.com"], cc=[CAROL], bcc=["eve@example.net"], reply_to=[CAROL],
                     subject="Minutes", text="Hello all"),
        settings=settings,
    )  # fmt: skip


def test_export_finds_email_that_names_the_address_only_in_cc_and_its_recipient_outcomes(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    email_id = _group_email(conn, settings)
    conn.execute(
        "INSERT INTO mailroom.recipient_outcomes (email_id, recipient, kind, outcome, reason)"
        " VALUES (%s, %s, 'cc', 'suppressed', 'unsubscribed')",
        (email_id, CAROL),
    )
    conn.commit()
    data = export_address(conn, CAROL)
    assert [e["id"] for e in data["emails"]] == [email_id]
    assert [o["recipient"] for o in data["recipient_outcomes"]] == [CAROL]


def test_erase_replaces_the_address_in_every_list_keeps_the_others_and_cancels_unsent_email(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    email_id = _group_email(conn, settings)
    conn.execute(
        "INSERT INTO mailroom.recipient_outcomes (email_id, recipient, kind, outcome, reason)"
        " VALUES (%s, %s, 'cc', 'refused', '550 5.1.1 <carol@example.org> unknown')",
        (email_id, CAROL),
    )
    conn.commit()
    report = erase_address(conn, CAROL)
    row = conn.execute(
        "SELECT status, recipient_email, to_extra, cc, bcc, reply_to FROM mailroom.email_queue WHERE id = %s",
        (email_id,),
    ).fetchone()
    assert row is not None
    assert report.cancelled == 1 and row["status"] == "cancelled"
    assert row["recipient_email"] == ADA and row["to_extra"] == ["dan@example.com"]
    assert row["bcc"] == ["eve@example.net"]
    assert row["cc"] == [report.replacement] and row["reply_to"] == [report.replacement]
    outcome = conn.execute("SELECT recipient, reason FROM mailroom.recipient_outcomes").fetchone()
    assert outcome == {"recipient": report.replacement, "reason": f"550 5.1.1 <{report.replacement}> unknown"}
    everything = conn.execute("SELECT row_to_json(q)::text AS t FROM mailroom.email_queue q").fetchall()
    assert not any(CAROL in r["t"] for r in everything)


def test_erase_reaches_the_address_in_the_lists_of_archived_email(
    conn: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    email_id = _group_email(conn, settings)
    conn.execute("UPDATE mailroom.email_queue SET status = 'cancelled' WHERE id = %s", (email_id,))
    conn.execute(
        "UPDATE mailroom.email_queue SET finished_at = %s WHERE id = %s", (NOW - timedelta(days=40), email_id)
    )
    conn.commit()
    home_settings = Settings(
        home=tmp_path, database_url=settings.database_url, secret_key=settings.secret_key
    )
    assert home_settings.database_url is not None
    with psycopg.connect(home_settings.database_url, autocommit=True) as maintenance:
        run_maintenance(maintenance, home_settings, now=NOW)
    directory = archive_directory(home_settings)
    assert export_address(conn, CAROL, directory)["archived_emails"]
    erase_address(conn, CAROL, archive_dir=directory)
    records = [r for path in directory.glob("emails-*.jsonl.gz") for _, r in read_archive(path)]
    assert records and not any(CAROL in line for line in records)


def test_erase_reaches_bounce_events_and_removes_quarantined_reports_that_name_the_address(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    email_id = _group_email(conn, settings)
    conn.execute(
        "INSERT INTO mailroom.bounce_events (email_id, recipient, kind, status, diagnostic, source, raw_size,"
        " dedupe_key) VALUES (%s, %s, 'hard', '5.1.1', 'smtp; 550 5.1.1 <Carol@Example.org> unknown', 'dsn', 10, 'k1')",
        (email_id, CAROL),
    )
    conn.execute(
        "INSERT INTO mailroom.bounce_quarantine (reason, raw, raw_size, digest) VALUES"
        " ('unparseable', %s, 30, '\\x01'), ('unparseable', %s, 30, '\\x02')",
        (b"To: CAROL@example.org\r\n\r\nhi", b"To: someone@example.net\r\n\r\nhi"),
    )
    conn.commit()
    exported = export_address(conn, CAROL)
    assert len(exported["bounce_events"]) == 1 and len(exported["bounce_quarantine"]) == 1
    report = erase_address(conn, CAROL)
    event = conn.execute("SELECT recipient, diagnostic FROM mailroom.bounce_events").fetchone()
    assert event == {
        "recipient": report.replacement,
        "diagnostic": f"smtp; 550 5.1.1 <{report.replacement}> unknown",
    }
    left = conn.execute("SELECT raw FROM mailroom.bounce_quarantine").fetchall()
    assert [bytes(r["raw"]) for r in left] == [b"To: someone@example.net\r\n\r\nhi"]
