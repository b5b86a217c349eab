"""`mailroom senders add --auth gmail` and `keys rotate` for Gmail API senders, run in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.cli import not_on_terminal, on_terminal, run
from tests.worker.gmail_helpers import SUBJECT, service_account_key
from tests.worker.senders import audit_rows, sender
from worker.core.crypto import SecretBox, generate_key

TOKEN_URI = "https://oauth2.googleapis.com/token"
ADD = ["senders", "add", "workspace", "--auth", "gmail", "--impersonate", SUBJECT]


@pytest.fixture
def key_file(tmp_path: Path, pem: bytes, cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Path:
    not_on_terminal(monkeypatch)
    path = tmp_path / "key.json"
    path.write_text(service_account_key(pem, TOKEN_URI))
    return path


def _count(conn: psycopg.Connection[Any]) -> int:
    conn.rollback()
    row = conn.execute("SELECT count(*) AS n FROM mailroom.sender_accounts").fetchone()
    assert row is not None
    return int(row["n"])


def test_add_a_gmail_sender_from_a_key_file_and_list_it_without_the_key(
    key_file: Path, cli_env: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *ADD, "--service-account-file", str(key_file), "--no-dns-check")
    assert code == 0, err
    assert "added sender account workspace" in out
    row = sender(conn, "workspace")
    assert (row["auth_type"], row["gmail_subject_email"], row["from_email"]) == ("gmail", SUBJECT, SUBJECT)
    assert (row["smtp_username"], row["smtp_password_encrypted"]) == (None, None)
    box = SecretBox(cli_env["MAILROOM_SECRET_KEY"])
    assert box.decrypt(row["gmail_key_encrypted"]) == key_file.read_text()
    code, listed, _ = run(capsys, "senders", "list", "--json")
    assert code == 0 and json.loads(listed)[0]["auth_type"] == "gmail"
    for shown in (listed, json.dumps(audit_rows(conn, "sender.add"), default=str)):
        assert "PRIVATE KEY" not in shown
    assert audit_rows(conn, "sender.add")[0]["detail"]["impersonate"] == SUBJECT


def test_the_key_comes_from_a_variable_or_a_prompt_too(
    key_file: Path,
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GMAIL_KEY", key_file.read_text())
    code, _, err = run(
        capsys, *ADD, "--service-account-env", "GMAIL_KEY", "--from", "news@example.org", "--no-dns-check"
    )
    assert code == 0, err
    assert sender(conn, "workspace")["from_email"] == "news@example.org"
    one_line = json.dumps(json.loads(key_file.read_text()))
    on_terminal(monkeypatch, "", password=one_line)
    argv = ["senders", "add", "typed", "--auth", "gmail", "--impersonate", SUBJECT, "--no-dns-check"]
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    assert "Paste the service account's JSON key" in err
    assert sender(conn, "typed")["auth_type"] == "gmail"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--service-account=secret"], "shows in `ps`"),
        ([], "needs its service account key"),
        (["--host", "smtp.gmail.com", "--service-account-file", "KEY"], "leave out --host"),
        (["--username", "x", "--service-account-file", "KEY"], "leave out --username"),
        (["--password-env", "HOME", "--service-account-file", "KEY"], "service account key alone"),
        (["--service-account-file", "KEY", "--service-account-env", "HOME"], "exclude each other"),
        (["--service-account-file", "/nonexistent/key.json"], "cannot read the service account key file"),
        (["--service-account-env", "HOME"], "is not JSON"),
    ],
    ids=["on-argv", "no-key", "host", "username", "password", "two-sources", "missing-file", "not-json"],
)
def test_a_gmail_sender_missing_or_mixing_things_is_refused_and_nothing_is_added(
    key_file: Path,
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    said: str,
) -> None:
    argv = [str(key_file) if a == "KEY" else a for a in argv]
    code, out, err = run(capsys, *ADD, *argv, "--no-dns-check")
    assert code == 2 and said in err, err
    assert "PRIVATE" not in out + err
    assert _count(conn) == 0


def test_gmail_options_need_auth_gmail_and_other_senders_still_need_from_and_host(
    key_file: Path, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["senders", "add", "relay", "--from", "a@example.org", "--host", "127.0.0.1", "--security", "none"]
    code, _, err = run(capsys, *base, "--impersonate", SUBJECT, "--no-dns-check")
    assert code == 2 and "add --auth gmail" in err
    code, _, err = run(capsys, "senders", "add", "relay", "--host", "127.0.0.1", "--no-dns-check")
    assert code == 2 and "Missing option '--from'" in err
    code, _, err = run(capsys, "senders", "add", "relay", "--from", "a@example.org", "--no-dns-check")
    assert code == 2 and "Missing option '--host'" in err
    assert _count(conn) == 0


def test_an_edit_never_turns_an_account_into_a_gmail_sender_or_back(
    key_file: Path, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, *ADD, "--service-account-file", str(key_file), "--no-dns-check")[0] == 0
    code, _, err = run(capsys, "senders", "edit", "workspace", "--auth", "password")
    assert code == 2 and "remove it and add it again" in err
    code, _, err = run(capsys, "senders", "edit", "workspace", "--daily-limit", "500")
    assert code == 0, err
    row = sender(conn, "workspace")
    assert (row["daily_limit"], row["auth_type"], row["gmail_subject_email"]) == (500, "gmail", SUBJECT)


def test_keys_rotate_re_encrypts_the_service_account_key(
    key_file: Path,
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert run(capsys, *ADD, "--service-account-file", str(key_file), "--no-dns-check")[0] == 0
    new_key = generate_key()
    monkeypatch.setenv("MAILROOM_NEW_SECRET_KEY", new_key)
    code, out, err = run(capsys, "keys", "rotate")
    assert code == 0, err
    assert "1 Gmail API key(s)" in out
    stored = sender(conn, "workspace")["gmail_key_encrypted"]
    assert SecretBox(new_key).decrypt(stored) == key_file.read_text()
    with pytest.raises(Exception, match="cannot be decrypted"):
        SecretBox(cli_env["MAILROOM_SECRET_KEY"]).decrypt(stored)
    assert audit_rows(conn, "keys.rotate")[-1]["detail"]["gmail_keys"] == 1
