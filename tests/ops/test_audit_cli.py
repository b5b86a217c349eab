"""`mailroom audit`, and the audit rows the command line writes for senders, retry and cancel (as the OS user)."""

from __future__ import annotations

import getpass
import json

import pytest

from tests.cli import run
from tests.ops.helpers import audit_rows, failed_emails
from tests.worker.helpers import enqueue_many
from worker.cli.main import main


def add_and_suspend(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_SMTP_PASSWORD", "relay-secret")
    code, _, _ = run(
        capsys,
        "senders",
        "add",
        "transactional-1",
        "--from",
        "noreply@example.com",
        "--host",
        "smtp.example.com",
        "--port",
        "587",
        "--username",
        "mailer",
        "--password-env",
        "TEST_SMTP_PASSWORD",
    )
    assert code == 0
    assert run(capsys, "senders", "suspend", "transactional-1", "--reason", "credentials revoked")[0] == 0


def test_cli_sender_actions_are_audited_as_the_os_user(
    cli_env: dict[str, str], db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    add_and_suspend(capsys, monkeypatch)
    assert run(capsys, "senders", "pause", "transactional-1")[0] == 1  # suspended: refused, not audited
    assert run(capsys, "senders", "resume", "transactional-1")[0] == 0
    rows = audit_rows(db_url)
    assert [(r["action"], r["actor"], r["affected"]) for r in rows] == [
        ("sender.add", getpass.getuser(), 1),
        ("sender.suspend", getpass.getuser(), 1),
        ("sender.resume", getpass.getuser(), 1),
    ]
    assert rows[1]["detail"]["reason"] == "credentials revoked"


def test_cli_retry_and_cancel_are_audited_with_how_many_changed(
    cli_env: dict[str, str], db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    failed = failed_emails(db_url, 2)
    pending = enqueue_many(db_url, 3, start=10)
    assert run(capsys, "retry", "--all-failed")[0] == 0
    assert run(capsys, "cancel", *map(str, [*pending, 999_999]))[0] == 1
    rows = audit_rows(db_url)
    assert [(r["action"], r["actor"], r["affected"]) for r in rows] == [
        ("queue.retry", getpass.getuser(), 2),
        ("queue.cancel", getpass.getuser(), 3),
    ]
    assert rows[0]["detail"]["ids"] == failed
    assert rows[1]["detail"]["skipped"] == 1


def test_audit_lists_newest_first_with_role_actor_action_target_count_and_detail(
    cli_env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    add_and_suspend(capsys, monkeypatch)
    code, out, _ = run(capsys, "audit")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3
    assert lines[0].split() == ["WHEN", "(UTC)", "DB", "ROLE", "ACTOR", "ACTION", "COUNT", "TARGET", "DETAIL"]
    user = getpass.getuser()
    assert lines[1].split()[3:7] == [user, "sender.suspend", "1", "transactional-1"]
    assert 'reason="credentials revoked"' in lines[1] and "from=active" in lines[1]
    assert "to=suspended" in lines[1]
    assert "sender.add" in lines[2] and "host=smtp.example.com" in lines[2]
    assert "relay-secret" not in out
    # the columns line up: every row's action starts where the heading's does
    assert {line.index("sender.") for line in lines[1:]} == {lines[0].index("ACTION")}


def test_audit_json_and_filters(
    cli_env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    add_and_suspend(capsys, monkeypatch)
    code, out, _ = run(capsys, "audit", "--json", "--action", "sender.suspend")
    [row] = json.loads(out)
    assert code == 0
    assert row["action"] == "sender.suspend" and row["affected"] == 1 and row["target"] == "transactional-1"
    assert row["actor"] == getpass.getuser() and row["db_role"]
    assert row["detail"]["to"] == "suspended" and row["at"].endswith("+00:00")
    assert [r["action"] for r in json.loads(run(capsys, "audit", "--json", "--limit", "1")[1])] == [
        "sender.suspend"
    ]
    assert json.loads(run(capsys, "audit", "--json", "--since", "2999-01-01")[1]) == []
    assert len(json.loads(run(capsys, "audit", "--json", "--action", "sender")[1])) == 2
    assert run(capsys, "audit", "--action", "queue")[1] == (
        "no audit rows (nothing matches, or nothing audited yet)\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [(("--since", "yesterday"), "not an ISO date"), (("--limit", "0"), "0 is not in the range x>=1")],
)
def test_audit_refuses_bad_options_with_usage_status(
    cli_env: dict[str, str], capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    assert main(["audit", *argv]) == 2
    assert message in capsys.readouterr().err


def test_audit_help_explains_with_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--help"]) == 0
    out = capsys.readouterr().out
    assert "append-only" in out and "Examples:" in out and "mailroom audit --since" in out


def test_audit_text_keeps_each_row_on_one_line_and_control_characters_off_the_terminal(
    cli_env: dict[str, str], db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg
    from psycopg.types.json import Jsonb

    with psycopg.connect(db_url) as conn:
        conn.execute(
            "SELECT mailroom.audit('sender.suspend', %s, %s, 1, %s)",
            ("eve\x1b[2J", "line\nbreak", Jsonb({"reason": "two\nlines", "word": "plain"})),
        )
    code, out, _ = run(capsys, "audit")
    assert code == 0 and len(out.splitlines()) == 2 and "\x1b" not in out
    assert "eve?[2J" in out and "line?break" in out
    assert 'reason="two\\nlines"' in out and "word=plain" in out
