"""Reminders to expected signers: locale, refusal interval, concurrency, and their delivered outcome."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.worker.helpers import add_sender, run_until_drained
from worker.cli.main import main
from worker.core.config import Settings
from worker.devtools.sink import RunningSink
from worker.ops.actions import cancel, retry
from worker.producers.documents.signatures import (
    ReminderResult,
    add_document,
    expect_signer,
    reminder_candidates,
    send_reminders,
    sign_document,
)

Conn = psycopg.Connection[dict[str, Any]]
T0 = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)
SIGNERS = {
    "ada@example.com": ("Ada", "fr"),
    "bob@example.com": ("Bob", "de"),
    "cy@example.com": ("Cy", "en"),
    "dolores@example.com": ("Dolores", "es"),
    "ezio@example.com": ("Ezio", "it"),
}


def _doc(conn: Conn, settings: Settings, signers: dict[str, tuple[str, str]] = SIGNERS) -> None:
    add_document(conn, "policy", title="Security <policy>", url="https://example.com/policy.pdf")
    for email, (name, locale) in signers.items():
        expect_signer(conn, "policy", email, name=name, locale=locale, settings=settings)
    conn.commit()


def test_reminders_go_to_unsigned_signers_in_their_locale(conn: Conn, settings: Settings) -> None:
    _doc(conn, settings)
    sign_document(conn, "policy", "cy@example.com", settings=settings)
    conn.commit()

    assert reminder_candidates(conn, "policy", T0, settings=settings) == 4
    result = send_reminders(conn, "policy", T0, requested_by="ops", settings=settings)
    conn.commit()

    assert (result.queued, result.skipped) == (4, {})
    emails = conn.execute(
        "SELECT q.id, q.recipient_email, q.recipient_name, q.locale, q.subject, q.text_body, q.html_body,"
        " q.reference_type, q.reference_id, r.id AS log_id, r.status, r.email_id, r.requested_at, r.requested_by"
        " FROM mailroom.email_queue q JOIN mailroom.reminder_logs r ON r.id::text = q.reference_id"
        " ORDER BY q.recipient_email"
    ).fetchall()
    by_email = {e["recipient_email"]: e for e in emails}
    assert sorted(by_email) == [
        "ada@example.com",
        "bob@example.com",
        "dolores@example.com",
        "ezio@example.com",
    ]
    assert by_email["ada@example.com"]["subject"] == "Rappel : merci de signer Security <policy>"
    assert by_email["bob@example.com"]["subject"] == "Erinnerung: Bitte unterschreiben Sie Security <policy>"
    assert by_email["dolores@example.com"]["subject"].startswith("Recordatorio")
    assert by_email["ezio@example.com"]["subject"].startswith("Promemoria")
    ada = by_email["ada@example.com"]
    assert ada["locale"] == "fr" and ada["recipient_name"] == "Ada"
    assert "Bonjour Ada" in ada["text_body"] and "https://example.com/policy.pdf" in ada["text_body"]
    assert "Security &lt;policy&gt;" in ada["html_body"]
    for e in emails:
        assert (e["reference_type"], e["status"], e["email_id"]) == ("reminder_log", "queued", e["id"])
        assert (e["requested_at"], e["requested_by"]) == (T0, "ops")
    assert set(result.log_ids) == {e["log_id"] for e in emails}


def test_reminder_within_the_interval_is_refused_with_the_reason(conn: Conn, settings: Settings) -> None:
    hourly = replace(settings, reminder_interval_seconds=3600)
    _doc(conn, settings, {"ada@example.com": ("Ada", "fr")})
    assert send_reminders(conn, "policy", T0, settings=hourly).queued == 1
    conn.commit()

    later = T0 + timedelta(minutes=59)
    assert reminder_candidates(conn, "policy", later, settings=hourly) == 0
    refused = send_reminders(conn, "policy", later, settings=hourly)
    conn.commit()
    assert refused.queued == 0
    reason = refused.skipped["ada@example.com"]
    assert (
        "already reminded at 2026-11-21 09:00:00" in reason and "allowed after 2026-11-21 10:00:00" in reason
    )
    assert "ada@example.com: already reminded" in refused.summary()

    after = T0 + timedelta(minutes=61)
    assert reminder_candidates(conn, "policy", after, settings=hourly) == 1
    assert send_reminders(conn, "policy", after, settings=hourly).queued == 1
    conn.commit()
    logs = conn.execute("SELECT requested_at FROM mailroom.reminder_logs ORDER BY id").fetchall()
    assert [r["requested_at"] for r in logs] == [T0, after]


def test_a_cancelled_reminder_does_not_block_the_next(conn: Conn, settings: Settings) -> None:
    _doc(conn, settings, {"ada@example.com": ("Ada", "fr")})
    first = send_reminders(conn, "policy", T0, settings=settings)
    conn.commit()
    email = conn.execute("SELECT email_id FROM mailroom.reminder_logs").fetchone()
    assert email is not None
    cancel(conn, [email["email_id"]])
    conn.commit()
    log = conn.execute("SELECT id, status, finished_at, error_message FROM mailroom.reminder_logs").fetchone()
    assert log is not None and log["id"] == first.log_ids[0]
    assert log["status"] == "cancelled" and log["finished_at"] is not None
    assert send_reminders(conn, "policy", T0 + timedelta(minutes=1), settings=settings).queued == 1


def test_signed_bounced_and_suppressed_signers_are_not_reminded(conn: Conn, settings: Settings) -> None:
    signers = {
        "ada@example.com": ("Ada", "fr"),
        "bob@example.com": ("Bob", "de"),
        "cy@example.com": ("Cy", "en"),
    }
    _doc(conn, settings, signers)
    conn.execute(
        "INSERT INTO mailroom.bounce_list (email, bounce_type)"
        " VALUES ('bob@example.com', 'hard'), ('cy@example.com', 'manual')"
    )
    sign_document(conn, "policy", "ada@example.com", settings=settings)
    conn.commit()
    assert reminder_candidates(conn, "policy", T0, settings=settings) == 0
    result = send_reminders(conn, "policy", T0, settings=settings)
    assert result == ReminderResult(
        "policy",
        0,
        {
            "bob@example.com": "address is on the bounce list (hard)",
            # an operator's suppression is not a bounce (worded as mailroom.suppression_reason words it)
            "cy@example.com": "address is suppressed by an operator (manual)",
        },
    )
    conn.commit()
    assert conn.execute("SELECT count(*) AS n FROM mailroom.email_queue").fetchone() == {"n": 0}


def test_concurrent_remind_runs_queue_one_reminder_per_signer(
    db_url: str, conn: Conn, settings: Settings
) -> None:
    _doc(conn, settings)
    barrier = threading.Barrier(4)
    results: list[ReminderResult] = []
    errors: list[BaseException] = []

    def remind() -> None:
        try:
            with psycopg.connect(db_url) as own:
                barrier.wait(timeout=10)
                results.append(send_reminders(own, "policy", T0, settings=settings))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=remind) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    assert sorted(r.queued for r in results) == [0, 0, 0, 5]
    counts = conn.execute(
        "SELECT recipient_email, count(*) AS n FROM mailroom.email_queue GROUP BY recipient_email"
    ).fetchall()
    assert {r["recipient_email"]: r["n"] for r in counts} == dict.fromkeys(SIGNERS, 1)


def test_send_reminders_refuses_to_run_outside_a_transaction(
    db_url: str, conn: Conn, settings: Settings
) -> None:
    _doc(conn, settings)
    with (
        psycopg.connect(db_url, autocommit=True) as auto,
        pytest.raises(ValueError, match="open transaction"),
    ):
        send_reminders(auto, "policy", T0, settings=settings)


async def test_reminders_are_delivered_and_their_outcome_logged(
    db_url: str, conn: Conn, settings: Settings, smtp_sink: RunningSink
) -> None:
    _doc(conn, settings, {"ada@example.com": ("Ada", "fr"), "bob@example.com": ("Bob", "de")})
    smtp_sink.on_rcpt("bob@example.com", "550 5.1.1 User unknown")
    add_sender(db_url, smtp_sink.port)
    assert send_reminders(conn, "policy", settings=settings).queued == 2
    conn.commit()

    await run_until_drained(db_url, settings)

    [received] = smtp_sink.messages_to("ada@example.com")
    assert received.message["Subject"] == "Rappel : merci de signer Security <policy>"
    assert "Bonjour Ada" in received.message.get_body(("plain",)).get_content()
    logs = conn.execute(
        "SELECT recipient_email, status, finished_at IS NOT NULL AS finished, error_message"
        " FROM mailroom.reminder_logs ORDER BY recipient_email"
    ).fetchall()
    assert logs == [
        {"recipient_email": "ada@example.com", "status": "sent", "finished": True, "error_message": None},
        {
            "recipient_email": "bob@example.com",
            "status": "bounced",
            "finished": True,
            "error_message": "550 5.1.1 User unknown",
        },
    ]
    # An operator retries the failed reminder: its log is queued again, its error cleared.
    bounced = conn.execute("SELECT id FROM mailroom.email_queue WHERE status = 'failed'").fetchone()
    assert bounced is not None
    retry(conn, [bounced["id"]])
    conn.commit()
    log = conn.execute(
        "SELECT status, finished_at, error_message FROM mailroom.reminder_logs WHERE email_id = %s",
        (bounced["id"],),
    ).fetchone()
    assert log == {"status": "queued", "finished_at": None, "error_message": None}


def test_remind_command_reports_queued_and_refused(
    settings: Settings, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["docs", "add", "policy", "--title", "Policy"]) == 0
    assert main(["docs", "expect", "policy", "ada@example.com", "--name", "Ada", "--locale", "it"]) == 0
    capsys.readouterr()
    assert main(["docs", "remind", "policy", "--dry-run"]) == 0
    assert "1 reminder(s) would be queued" in capsys.readouterr().out
    assert main(["docs", "remind", "policy", "--by", "ops"]) == 0
    assert "queued 1 reminder(s)" in capsys.readouterr().out
    assert main(["docs", "remind", "policy"]) == 1
    assert "ada@example.com: already reminded" in capsys.readouterr().out
    assert main(["docs", "remind", "policy", "--interval", "0"]) == 0
    assert main(["docs", "remind", "nope"]) == 2
    assert "no document 'nope'" in capsys.readouterr().err
