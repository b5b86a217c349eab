"""The `mailroom` command line, run in-process (fast) and as the installed console script (real)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.cli import run


def test_enqueue_prints_one_result_per_line_and_exits_nonzero_on_rejects(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines = "\n".join(
        [
            json.dumps({"to": "a@example.com", "subject": "One", "text": "x"}),
            json.dumps({"to": "nobody", "subject": "Two", "text": "x"}),
            "",
            json.dumps(
                {"to": "b@example.com", "subject": "Three", "html": "<p>x</p>", "idempotency_key": "k"}
            ),
            json.dumps({"to": "c@example.com", "subject": "Again", "text": "x", "idempotency_key": "k"}),
            "{broken",
        ]
    )
    code, out, err = run(capsys, "enqueue", "-", stdin=lines, monkeypatch=monkeypatch)
    results = [json.loads(line) for line in out.splitlines()]
    assert code == 1
    assert [r["line"] for r in results] == [1, 2, 4, 5, 6]
    assert "id" in results[0] and results[1]["field"] == "to" and results[4]["field"] == "line"
    assert results[2]["id"] == results[3]["id"]
    assert "3 accepted, 2 rejected" in err
    subjects = sorted(
        r["subject"] for r in conn.execute("SELECT subject FROM mailroom.email_queue").fetchall()
    )
    assert subjects == ["One", "Three"]


def test_large_enqueue_is_validated_in_worker_processes_and_keeps_input_order(
    cli_env: dict[str, str], conn: psycopg.Connection[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mail.jsonl"
    lines = [json.dumps({"to": f"u{i}@example.com", "subject": f"s{i}", "text": "b"}) for i in range(700)]
    lines[650] = json.dumps({"to": "not-an-address", "subject": "s", "text": "b"})
    path.write_text("\n".join(lines) + "\n")
    code, out, _ = run(capsys, "enqueue", str(path), "--batch-size", "100", "--jobs", "2")
    results = [json.loads(line) for line in out.splitlines()]
    assert code == 1
    assert [r["line"] for r in results] == list(range(1, 701))
    assert results[650]["field"] == "to"
    ids = [r["id"] for r in results if "id" in r]
    assert len(ids) == len(set(ids)) == 699
    row = conn.execute("SELECT count(*) AS n FROM mailroom.email_queue").fetchone()
    assert row is not None
    assert row["n"] == 699


def test_enqueue_missing_file_is_a_clear_error(
    cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "enqueue", "/nonexistent/mail.jsonl")
    assert code == 2
    assert "cannot read /nonexistent/mail.jsonl" in err


def test_senders_add_stores_password_encrypted_and_lists(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DEMO_SMTP_PASSWORD", "hunter2-very-secret")
    code, out, _ = run(
        capsys,
        "senders",
        "add",
        "primary",
        "--from",
        "noreply@example.com",
        "--host",
        "smtp.example.com",
        "--username",
        "mailer",
        "--password-env",
        "DEMO_SMTP_PASSWORD",
        "--daily-limit",
        "500",
    )
    assert code == 0 and "added sender account primary" in out
    row = conn.execute("SELECT smtp_password_encrypted, daily_limit FROM mailroom.sender_accounts").fetchone()
    assert row is not None
    assert b"hunter2" not in bytes(row["smtp_password_encrypted"])
    from worker.core.crypto import SecretBox

    assert (
        SecretBox(cli_env["MAILROOM_SECRET_KEY"]).decrypt(row["smtp_password_encrypted"])
        == "hunter2-very-secret"
    )
    code, out, _ = run(capsys, "senders", "list", "--json")
    listed = json.loads(out)
    assert listed[0]["name"] == "primary" and listed[0]["effective_limit"] == 500


def test_senders_add_without_secret_key_is_a_clear_error_and_stores_nothing(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MAILROOM_SECRET_KEY")
    monkeypatch.setenv("PW", "x")
    code, _, err = run(
        capsys, "senders", "add", "s1", "--from", "a@example.com", "--host", "h", "--password-env", "PW"
    )
    assert code == 2
    assert "MAILROOM_SECRET_KEY is not set" in err
    row = conn.execute("SELECT count(*) AS n FROM mailroom.sender_accounts").fetchone()
    assert row is not None and row["n"] == 0


def test_pause_resume_suspend_sender(
    cli_env: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "senders", "add", "s1", "--from", "a@example.com", "--host", "h")[0] == 0
    assert run(capsys, "senders", "pause", "s1", "--reason", "maintenance")[1].strip().endswith("paused")
    code, _, err = run(capsys, "senders", "pause", "s1")
    assert code == 1 and "is paused" in err
    assert run(capsys, "senders", "resume", "s1")[1].strip().endswith("active")
    assert run(capsys, "senders", "suspend", "s1")[1].strip().endswith("suspended")
    code, _, err = run(capsys, "senders", "pause", "nope")
    assert code == 1 and "no sender account named 'nope'" in err


def test_stats_json_counts_every_status(
    cli_env: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    conn.execute(
        "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body) VALUES ('a@x.io', 's', 'b')"
    )
    conn.execute(
        "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, scheduled_for)"
        " VALUES ('b@x.io', 's', 'b', now() + interval '1 day')"
    )
    conn.commit()
    code, out, _ = run(capsys, "stats", "--json")
    stats = json.loads(out)
    assert code == 0
    assert stats["queue"] == {
        "unrendered": 0,
        "pending": 2,
        "assigned": 0,
        "sent": 0,
        "bounced": 0,
        "failed": 0,
        "cancelled": 0,
        "suppressed": 0,
    }
    assert stats["due_now"] == 1 and stats["scheduled_later"] == 1
    assert stats["oldest_pending_seconds"] is not None and stats["senders"] == []


def _failed_email(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body) VALUES"
        " ('a@x.io', 's', 'b') RETURNING id"
    ).fetchone()
    assert row is not None
    conn.execute(
        "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 'w', lease_token ="
        " gen_random_uuid(), lease_expires_at = now() WHERE id = %s",
        (row["id"],),
    )
    conn.execute(
        "UPDATE mailroom.email_queue SET status = 'failed', last_error = '550 no', retry_count = 2"
        " WHERE id = %s",
        (row["id"],),
    )
    conn.commit()
    return int(row["id"])


def test_retry_and_cancel(
    cli_env: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    failed = _failed_email(conn)
    code, out, _ = run(capsys, "retry", str(failed), "999999")
    assert code == 1 and "retried 1 email(s)" in out and "999999: no such email" in out
    row = conn.execute(
        "SELECT status, retry_count FROM mailroom.email_queue WHERE id = %s", (failed,)
    ).fetchone()
    assert row == {"status": "pending", "retry_count": 0}
    conn.commit()
    code, out, _ = run(capsys, "cancel", str(failed))
    assert code == 0 and "cancelled 1 email(s)" in out
    code, out, _ = run(capsys, "cancel", str(failed))
    assert code == 1 and f"{failed}: is cancelled" in out
    other = _failed_email(conn)
    code, out, _ = run(capsys, "retry", "--all-failed")
    assert code == 0 and "retried 1 email(s)" in out
    row = conn.execute("SELECT status FROM mailroom.email_queue WHERE id = %s", (other,)).fetchone()
    assert row == {"status": "pending"}


def test_db_current_and_downgrade(cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    from worker.core.db import head_revision

    head = head_revision()
    assert run(capsys, "db", "current")[1].strip() == head
    assert run(capsys, "db", "downgrade", "0001")[1].strip() == "database at 0001"
    assert run(capsys, "db", "downgrade", "base")[1].strip() == "database at base"
    assert run(capsys, "db", "upgrade")[1].strip() == f"database at {head}"


@pytest.mark.e2e
def test_installed_console_script_enqueues_from_stdin(cli_env: dict[str, str]) -> None:
    script = Path(sys.executable).with_name("mailroom")
    done = subprocess.run(
        [str(script), "enqueue"],
        input=json.dumps({"to": "a@example.com", "subject": "s", "text": "b"}) + "\n",
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["line"] == 1
    assert "a@example.com" not in done.stderr
