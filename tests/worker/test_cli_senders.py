"""`mailroom senders add|edit|remove|list|resume` against the real database, run in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.cli import not_on_terminal, on_terminal, run
from tests.worker.senders import audit_rows, sender
from worker.cli.main import main
from worker.core.crypto import SecretBox

BASE = ["senders", "add", "relay", "--from", "noreply@example.com", "--host", "smtp.example.com"]


# --- senders add: asks on a terminal, warns without one --------------------------------------


def test_add_without_a_terminal_defaults_port_and_security_with_warnings(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    not_on_terminal(monkeypatch)
    code, _, err = run(capsys, *BASE)
    assert code == 0
    assert "warning: no --security given: using starttls" in err
    assert "warning: no --port given: using 587" in err
    assert "warning: no password" in err
    row = sender(conn)
    assert (row["smtp_port"], row["smtp_security"], row["smtp_username"]) == (587, "starttls", None)


def test_add_without_a_terminal_refuses_a_login_without_password(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    not_on_terminal(monkeypatch)
    code, _, err = run(capsys, *BASE, "--port", "587", "--security", "starttls", "--username", "mailer")
    assert code == 2 and "--username needs a password" in err and "--password-file" in err
    assert conn.execute("SELECT count(*) AS n FROM mailroom.sender_accounts").fetchone() == {"n": 0}


def test_the_sink_help_example_adds_a_relay_without_a_login_and_without_a_secret_key(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    not_on_terminal(monkeypatch)
    monkeypatch.delenv("MAILROOM_SECRET_KEY")
    _, help_text, _ = run(capsys, "sink", "--help")
    [example] = [line.split("mailroom ", 1)[1] for line in help_text.splitlines() if "senders add" in line]
    code, out, err = run(capsys, *example.split())
    assert code == 0 and "MAILROOM_SECRET_KEY" not in err, err
    assert "added sender account dev" in out
    assert sender(conn, "dev")["smtp_password_encrypted"] is None


def test_a_login_without_a_secret_key_is_refused_before_anything_is_stored(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    not_on_terminal(monkeypatch)
    monkeypatch.delenv("MAILROOM_SECRET_KEY")
    secret = tmp_path / "password"
    secret.write_text("s3cret")
    code, _, err = run(
        capsys, *BASE, "--security", "tls", "--username", "mailer", "--password-file", str(secret)
    )
    assert code == 2 and "MAILROOM_SECRET_KEY is not set" in err and "keys generate" in err
    assert conn.execute("SELECT count(*) AS n FROM mailroom.sender_accounts").fetchone() == {"n": 0}


def test_add_on_a_terminal_asks_for_security_port_login_and_password(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    on_terminal(monkeypatch, "tls\n\nmailer\n", password="s3cret-typed")
    code, out, err = run(capsys, *BASE)
    assert code == 0, err
    assert "Security (none, starttls, tls) [starttls]:" in err and "SMTP port [465]:" in err
    assert "warning" not in err and out.startswith("added sender account relay")
    row = sender(conn)
    assert (row["smtp_port"], row["smtp_security"], row["smtp_username"]) == (465, "tls", "mailer")
    assert SecretBox(cli_env["MAILROOM_SECRET_KEY"]).decrypt(row["smtp_password_encrypted"]) == "s3cret-typed"


def test_add_on_a_terminal_asks_again_after_a_wrong_answer(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    on_terminal(monkeypatch, "ssl\nnone\nabc\n2525\n\n")
    code, _, err = run(capsys, *BASE)
    assert code == 0, err
    assert err.count("please answer") == 2
    row = sender(conn)
    assert (row["smtp_port"], row["smtp_security"], row["smtp_username"]) == (2525, "none", None)


def test_add_reads_the_password_from_a_file(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    not_on_terminal(monkeypatch)
    secret = tmp_path / "smtp-password"
    secret.write_text("from-a-file\n")
    argv = [*BASE, "--port", "587", "--security", "starttls", "--username", "mailer"]
    code, _, err = run(capsys, *argv, "--password-file", str(secret))
    assert code == 0, err
    row = sender(conn)
    assert SecretBox(cli_env["MAILROOM_SECRET_KEY"]).decrypt(row["smtp_password_encrypted"]) == "from-a-file"


def test_a_password_on_the_command_line_is_refused_saying_how_to_avoid_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*BASE, "--password", "hunter2"]) == 2
    err = capsys.readouterr().err
    assert "shows in `ps`" in err and "--password-env VAR" in err and "--password-file PATH" in err


# --- senders edit ----------------------------------------------------------------------------


def _add_relay(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *extra: str) -> None:
    not_on_terminal(monkeypatch)
    assert run(capsys, *BASE, "--port", "587", "--security", "starttls", *extra)[0] == 0


def test_edit_changes_only_the_given_settings_and_is_audited(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _add_relay(capsys, monkeypatch, "--from-name", "Shop", "--send-delay-ms", "50")
    before = sender(conn)
    code, out, err = run(capsys, "senders", "edit", "relay", "--daily-limit", "5000", "--port", "2587")
    assert code == 0, err
    assert "changed smtp_port, daily_limit" in out
    after = sender(conn)
    assert (after["daily_limit"], after["smtp_port"], after["version"]) == (5000, 2587, before["version"] + 1)
    untouched = ("from_email", "from_name", "smtp_host", "smtp_security", "send_delay_ms", "max_connections")
    assert {k: after[k] for k in untouched} == {k: before[k] for k in untouched}
    [edited] = audit_rows(conn, "sender.edit")
    assert edited["target"] == "relay"
    assert edited["detail"]["changed"] == {"smtp_port": [587, 2587], "daily_limit": [2000, 5000]}


def test_edit_is_validated_like_add_and_changes_nothing_when_refused(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _add_relay(capsys, monkeypatch)
    before = sender(conn)
    code, _, err = run(capsys, "senders", "edit", "relay", "--port", "70000")
    assert code == 2 and "port: must be between 1 and 65535" in err
    code, _, err = run(capsys, "senders", "edit", "relay", "--username", "mailer")
    assert code == 2 and "needs a password" in err
    code, _, err = run(capsys, "senders", "edit", "relay", "--daily-limit", "9", "--version", "99")
    assert code == 1 and f"at version {before['version']}, not 99" in err
    code, _, err = run(capsys, "senders", "edit", "nope", "--daily-limit", "9")
    assert code == 1 and "no sender account named 'nope'" in err
    assert sender(conn) == before and audit_rows(conn, "sender.edit") == []


def test_edit_replaces_the_password_without_auditing_it_and_warns_of_doubtful_choices(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _add_relay(capsys, monkeypatch)
    monkeypatch.setenv("NEW_SMTP_PASSWORD", "rotated-secret")
    argv = ["senders", "edit", "relay", "--username", "mailer", "--password-env", "NEW_SMTP_PASSWORD"]
    version = str(sender(conn)["version"])
    code, _, err = run(capsys, *argv, "--security", "none", "--allow-plaintext-login", "--version", version)
    assert code == 0, err
    assert "mail to smtp.example.com crosses the network unencrypted" in err
    assert "the login to smtp.example.com crosses the network unencrypted" in err
    row = sender(conn)
    assert (
        SecretBox(cli_env["MAILROOM_SECRET_KEY"]).decrypt(row["smtp_password_encrypted"]) == "rotated-secret"
    )
    [edited] = audit_rows(conn, "sender.edit")
    assert edited["detail"]["password"] is True and "rotated-secret" not in json.dumps(edited["detail"])
    assert run(capsys, "senders", "edit", "relay", "--no-login")[0] == 0
    row = sender(conn)
    assert row["smtp_username"] is None and row["smtp_password_encrypted"] is None


def _listed_auth(capsys: pytest.CaptureFixture[str]) -> str:
    """The AUTH column of the relay's line in `senders list`."""
    code, out, _ = run(capsys, "senders", "list")
    [header, line] = [row for row in out.splitlines() if row.startswith(("NAME", "relay "))]
    assert code == 0 and header.split()[-1] == "AUTH"
    return line.split()[-1]


def test_an_empty_username_removes_the_login_and_the_list_shows_no_auth(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SMTP_PASSWORD", "relay-secret")
    _add_relay(
        capsys, monkeypatch, "--username", "mailer", "--password-env", "SMTP_PASSWORD", "--no-dns-check"
    )
    assert _listed_auth(capsys) == "password"

    code, _, err = run(capsys, "senders", "edit", "relay", "--username", "")

    assert code == 0, err
    row = sender(conn)
    assert row["smtp_username"] is None and row["smtp_password_encrypted"] is None
    assert _listed_auth(capsys) == "none"


# --- senders remove --------------------------------------------------------------------------


def _bind_email(conn: psycopg.Connection[Any]) -> None:
    sender_id = sender(conn)["id"]
    conn.execute(
        "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, sender_account_id)"
        " VALUES ('a@example.com', 's', 'b', %s)",
        (sender_id,),
    )
    conn.commit()


def test_remove_is_refused_while_emails_are_bound_to_the_sender_saying_how_many(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _add_relay(capsys, monkeypatch)
    _bind_email(conn)
    _bind_email(conn)
    code, _, err = run(capsys, "senders", "remove", "relay", "--yes")
    assert code == 1 and "still has 2 email(s) pending or being sent" in err and "senders pause relay" in err
    assert sender(conn)["name"] == "relay" and audit_rows(conn, "sender.remove") == []


def test_remove_needs_yes_without_a_terminal_and_a_typed_name_on_one(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _add_relay(capsys, monkeypatch)
    code, _, err = run(capsys, "senders", "remove", "relay")
    assert code == 2 and "add --yes" in err
    on_terminal(monkeypatch, "no\n")
    assert run(capsys, "senders", "remove", "relay")[0] == 1
    assert sender(conn)["name"] == "relay"
    on_terminal(monkeypatch, "relay\n")
    code, out, err = run(capsys, "senders", "remove", "relay")
    assert code == 0 and "removed sender account relay" in out
    conn.rollback()
    assert conn.execute("SELECT count(*) AS n FROM mailroom.sender_accounts").fetchone() == {"n": 0}
    [removed] = audit_rows(conn, "sender.remove")
    assert removed["target"] == "relay"


def test_remove_with_yes_deletes_the_account_and_its_usage_rows(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _add_relay(capsys, monkeypatch)
    conn.execute(
        "INSERT INTO mailroom.sender_usage (sender_account_id, day, sent) VALUES (%s, current_date, 3)",
        (sender(conn)["id"],),
    )
    conn.commit()
    code, _, err = run(capsys, "senders", "remove", "relay", "--yes")
    assert code == 0, err
    assert conn.execute("SELECT count(*) AS n FROM mailroom.sender_usage").fetchone() == {"n": 0}


# --- options that exclude each other, values out of range ----------------------------------------


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ([*BASE, "--password-env", "PW", "--password-file", "pw.txt"], "--password-env and --password-file"),
        (["senders", "edit", "relay", "--password-env", "PW", "--password-prompt"], "--password-prompt"),
        (["senders", "edit", "relay", "--bounce-domain", "b.example.org", "--no-bounce-domain"], "exclude"),
    ],
    ids=["password-env-and-file", "password-env-and-prompt", "bounce-domain-and-none"],
)
def test_options_that_exclude_each_other_are_a_usage_error_and_change_nothing(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    said: str,
) -> None:
    if argv[1] == "edit":
        _add_relay(capsys, monkeypatch)
    before = conn.execute("SELECT * FROM mailroom.sender_accounts").fetchall()
    monkeypatch.setenv("PW", "secret")
    code, _, err = run(capsys, *argv)
    assert code == 2 and said in err and "Usage: mailroom senders" in err
    conn.rollback()
    assert conn.execute("SELECT * FROM mailroom.sender_accounts").fetchall() == before


@pytest.mark.parametrize("action", ["add", "edit"])
def test_a_warmup_stage_beyond_5_is_a_usage_error(action: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = BASE if action == "add" else ["senders", "edit", "relay"]
    code, _, err = run(capsys, *argv, "--warmup-stage", "6")
    assert code == 2 and "--warmup-stage" in err and "0<=x<=5" in err


@pytest.mark.parametrize("status", ["suspended", "paused"])
def test_remove_of_an_account_out_of_service_is_not_told_to_pause_it_and_its_pending_email_stays(
    status: str,
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _add_relay(capsys, monkeypatch)
    _bind_email(conn)  # last tried through it, back in the queue: the other senders take it
    conn.execute("UPDATE mailroom.sender_accounts SET status = %s WHERE name = 'relay'", (status,))
    conn.commit()
    code, out, err = run(capsys, "senders", "remove", "relay", "--yes")
    assert (code, err) == (0, "") and out.startswith("removed sender account relay")
    assert conn.execute("SELECT status, sender_account_id FROM mailroom.email_queue").fetchall() == [
        {"status": "pending", "sender_account_id": None}
    ]


def test_remove_of_a_suspended_account_holding_a_claim_says_to_wait_not_to_pause(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _add_relay(capsys, monkeypatch)
    conn.execute(
        "INSERT INTO mailroom.claims (lease_token, sender_account_id, owner, day, reserved, expires_at)"
        " SELECT gen_random_uuid(), id, 'host:1', current_date, 1, now() + interval '1 minute'"
        " FROM mailroom.sender_accounts"
    )
    conn.execute("UPDATE mailroom.sender_accounts SET status = 'suspended'")
    conn.commit()
    code, _, err = run(capsys, "senders", "remove", "relay", "--yes")
    assert code == 1 and "is suspended and still holds 1 open claim(s)" in err
    assert "pause" not in err
    assert sender(conn)["name"] == "relay"
